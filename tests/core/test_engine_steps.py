"""The engine's decode strategy comes from its config, and the step functions use only the
:class:`StepHost` interface (checked on the real engine over the real SmolLM2 runtime)."""

from __future__ import annotations

import typing

from kvgate.core.config import EngineConfig
from kvgate.core.engine import steps
from kvgate.core.engine.engine import Engine, decode_step_for
from kvgate.core.engine.speculative import speculative_decode_step


def test_speculation_is_chosen_by_the_engine_config():
    assert decode_step_for(EngineConfig()) is steps.decode_step
    assert decode_step_for(EngineConfig(speculative_ngram=4)) is speculative_decode_step


def test_engine_built_with_speculation_decodes_speculatively(smollm2_runtime):
    assert Engine(smollm2_runtime, EngineConfig(speculative_ngram=3)).decode_step is speculative_decode_step
    assert Engine(smollm2_runtime, EngineConfig()).decode_step is steps.decode_step


def test_the_engine_offers_every_member_of_the_step_interface(smollm2_runtime):
    engine = Engine(smollm2_runtime, EngineConfig())
    members = set(typing.get_type_hints(steps.StepHost)) | {"batch_size", "start_decoding", "finish"}
    assert members == {"runtime", "config", "cache", "batch_size", "start_decoding", "finish"}
    for name in members:
        assert hasattr(engine, name), name
    assert engine.batch_size() == 0
