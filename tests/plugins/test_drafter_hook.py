"""A third-party drafter registered through ``register_drafters`` drafts for the real engine over
the real SmolLM2 model: named in ``[engine] speculative``, it proposes every step's draft, the
engine verifies them, and the greedy output is the one plain decoding gives."""

from __future__ import annotations

import queue

import attrs
import pytest

from kvgate.core.config import EngineConfig
from kvgate.core.drafter import Drafter
from kvgate.core.engine.drafter_choice import drafter_registry
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence
from kvgate.core.engine.speculative import SpeculativeStep
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.types import SamplingParams
from tests.core.fence.engine_run import collect

PROMPT = "apple, banana, cherry, apple, banana, cherry, apple, banana, cherry, apple,"


@attrs.define
class RepeatLast:
    """Guesses the latest token again; counts what it was asked."""

    calls: int = 0

    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        self.calls += 1
        return [(seq.output + forced)[-1]] * count

    def max_draft(self, config: EngineConfig) -> int:
        return 3


class RepeatPlugin:
    def __init__(self, drafter: Drafter, answers_unnamed: bool = False):
        self.drafter, self.answers_unnamed = drafter, answers_unnamed

    @hookimpl
    def register_drafters(self, register):
        register("repeat", lambda runtime, config: self.drafter if config.speculative == "repeat"
                 or self.answers_unnamed else None)


def run(runtime, config: EngineConfig, drafters) -> tuple[list[int], Engine]:
    engine = Engine(runtime, config, drafters=drafters)
    engine.start()
    try:
        inbox: queue.Queue = queue.Queue()
        prompt = list(runtime.tokenizer.encode(PROMPT, add_special_tokens=False).ids)
        engine.submit(Sequence(prompt=prompt, params=SamplingParams(temperature=0.0), max_tokens=16,
                               stop_token_ids=frozenset(runtime.info.eos_token_ids), deliver=inbox.put))
        out, _ = collect(inbox)
    finally:
        engine.stop()
    return out, engine


def test_a_third_party_drafter_drafts_for_the_engine(smollm2_runtime):
    drafter = RepeatLast()
    pm = build_plugin_manager(extra_plugins=[("repeat_drafter", RepeatPlugin(drafter))])
    spec, engine = run(smollm2_runtime, EngineConfig(speculative="repeat"), drafter_registry(pm))
    plain, _ = run(smollm2_runtime, EngineConfig(), drafter_registry(pm))
    step = engine.decode_step
    assert isinstance(step, SpeculativeStep) and step.source is drafter and step.max_draft == 3
    assert drafter.calls > 0 and step.stats.drafted > 0
    assert spec == plain


def test_two_drafters_answering_one_config_is_an_error(smollm2_runtime):
    pm = build_plugin_manager(extra_plugins=[("repeat_drafter", RepeatPlugin(RepeatLast(), answers_unnamed=True))])
    with pytest.raises(ConfigError, match="drafters .* all answer this config"):
        Engine(smollm2_runtime, EngineConfig(speculative_ngram=4), drafters=drafter_registry(pm))
