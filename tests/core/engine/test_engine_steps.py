"""The engine's decode strategy comes from its config, and the step functions use only the
:class:`StepHost` interface (checked on the real engine over the real SmolLM2 runtime)."""

from __future__ import annotations

import typing

from kvgate.core.config import EngineConfig
from kvgate.core.engine import steps
from kvgate.core.engine.engine import Engine, decode_step_for
import pytest

from kvgate.plugins.drafter_ngram import NgramDrafts
from kvgate.core.engine.speculative import SpeculativeStep


def test_speculation_is_chosen_by_the_engine_config():
    assert decode_step_for(EngineConfig()) is steps.decode_step
    step = decode_step_for(EngineConfig(speculative_ngram=4))
    assert isinstance(step, SpeculativeStep) and step.source == NgramDrafts() and step.max_draft == 4


def test_engine_built_with_speculation_decodes_speculatively(smollm2_runtime):
    step = Engine(smollm2_runtime, EngineConfig(speculative_ngram=3)).decode_step
    assert isinstance(step, SpeculativeStep) and step.max_draft == 3
    assert Engine(smollm2_runtime, EngineConfig()).decode_step is steps.decode_step


def test_mtp_speculation_needs_a_runtime_with_a_draft_head(smollm2_runtime):
    with pytest.raises(ValueError, match="needs a model with an MTP layer"):
        Engine(smollm2_runtime, EngineConfig(speculative="mtp"))


def test_the_engine_offers_every_member_of_the_step_interface(smollm2_runtime):
    engine = Engine(smollm2_runtime, EngineConfig())
    members = set(typing.get_type_hints(steps.StepHost)) | {"batch_size", "start_decoding", "finish"}
    assert members == {"runtime", "config", "cache", "batch_size", "start_decoding", "finish"}
    for name in members:
        assert hasattr(engine, name), name
    assert engine.batch_size() == 0
