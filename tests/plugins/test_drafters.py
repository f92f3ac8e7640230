"""The built-in drafter plugins (``drafter_ngram``, ``drafter_mtp``) answer the ``[engine]`` keys
users already write, and the host picks drafters only through ``register_drafters``: switching a
plugin off makes asking for its drafter a clear error."""

from __future__ import annotations

import pytest

from kvgate.core.config import EngineConfig, config_from_dict
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.engine import steps
from kvgate.core.engine.drafter_choice import drafter_registry
from kvgate.core.engine.engine import Engine, decode_step_for
from kvgate.core.errors import ConfigError
from kvgate.core.http.app import build_context
from kvgate.core.plugins import build_plugin_manager
from kvgate.plugins.drafter_mtp import build_mtp_drafter
from kvgate.plugins.drafter_ngram import NgramDrafts, build_ngram_drafter


def drafters(disabled=()):
    return drafter_registry(build_plugin_manager(disabled=disabled))


def test_the_ngram_drafter_answers_speculative_ngram_unless_another_drafter_is_named():
    assert build_ngram_drafter(None, EngineConfig(speculative_ngram=4)) == NgramDrafts()
    assert NgramDrafts().max_draft(EngineConfig(speculative_ngram=4)) == 4
    assert build_ngram_drafter(None, EngineConfig(speculative_ngram=4, speculative="ngram")) == NgramDrafts()
    assert build_ngram_drafter(None, EngineConfig()) is None
    assert build_ngram_drafter(None, EngineConfig(speculative_ngram=4, speculative="mtp")) is None
    with pytest.raises(ValueError, match="needs speculative_ngram > 0"):
        build_ngram_drafter(None, EngineConfig(speculative="ngram"))


def test_the_mtp_drafter_answers_only_when_named_and_needs_a_draft_head(smollm2_runtime):
    assert build_mtp_drafter(smollm2_runtime, EngineConfig(speculative_ngram=4)) is None
    with pytest.raises(ValueError, match="needs a model with an MTP layer"):
        build_mtp_drafter(smollm2_runtime, EngineConfig(speculative="mtp"))


def test_both_built_in_drafters_are_registered_by_their_plugins():
    assert {"ngram", "mtp"} <= set(drafters().names())
    assert "ngram" not in drafters(disabled=["drafter_ngram"])
    assert "mtp" not in drafters(disabled=["drafter_mtp"])


def test_ngram_speculation_with_its_plugin_disabled_is_a_clear_error(smollm2_runtime):
    off = drafters(disabled=["drafter_ngram"])
    with pytest.raises(ConfigError, match=r"speculative_ngram = 4 asks for speculative decoding, but no "
                                          r"registered drafter answers it \(registered drafters: .*mtp"):
        Engine(smollm2_runtime, EngineConfig(speculative_ngram=4), drafters=off)
    assert Engine(smollm2_runtime, EngineConfig(), drafters=off).decode_step is steps.decode_step


def test_mtp_speculation_with_its_plugin_disabled_names_the_registered_drafters():
    with pytest.raises(ConfigError, match=r"no drafter named 'mtp' is registered \(registered drafters: .*ngram"):
        decode_step_for(EngineConfig(speculative="mtp"), drafters=drafters(disabled=["drafter_mtp"]))


def test_an_unknown_drafter_name_lists_the_registered_ones():
    with pytest.raises(ConfigError, match=r"no drafter named 'eagle' is registered "
                                          r"\(registered drafters: mtp, ngram"):
        decode_step_for(EngineConfig(speculative="eagle"), drafters=drafters())


def test_a_server_naming_an_unknown_drafter_fails_before_its_model_loads(tmp_path):
    pm = build_plugin_manager()
    config = bind_plugin_sections(config_from_dict({"state_dir": str(tmp_path), "engine": {"speculative": "eagle"},
                                                    "model": {"path": str(tmp_path / "absent.gguf")}}), pm)
    with pytest.raises(ConfigError, match="no drafter named 'eagle'"):
        build_context(config, pm)
