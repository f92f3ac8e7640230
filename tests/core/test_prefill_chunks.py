"""How the real engine splits prompts into prefill forwards, and cancels one mid-forward
(SmolLM2-135M bf16, engine thread).

The runtime's ``prefill`` is wrapped to record every forward's size and outcome; it still runs for real.
"""

from __future__ import annotations

import queue
import threading

import pytest

from kvgate.core.config import EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.runtime import PrefillInterrupted
from kvgate.core.types import SamplingParams

pytestmark = pytest.mark.slow


class RecordedForwards(list):
    """The token count of every prefill forward, in order; ``started`` is set as each one begins."""

    def __init__(self):
        super().__init__()
        self.started = threading.Event()
        self.interrupted: list[int] = []


@pytest.fixture
def recorded_forwards(smollm2_runtime_bf16, monkeypatch):
    runtime = smollm2_runtime_bf16
    forwards = RecordedForwards()
    real_prefill = runtime.prefill

    def recording_prefill(session, tokens, all_logits=False, interrupted=None):
        forwards.append(len(tokens))
        forwards.started.set()
        try:
            return real_prefill(session, tokens, all_logits, interrupted)
        except PrefillInterrupted:
            forwards.interrupted.append(len(tokens))
            raise

    monkeypatch.setattr(runtime, "prefill", recording_prefill)
    return forwards


def run_engine(runtime, **config):
    engine = Engine(runtime, EngineConfig(prefill_chunk=128, **config))
    engine.start()
    return engine


def submit(engine, prompt, max_tokens=2):
    inbox: queue.Queue = queue.Queue()
    seq = Sequence(prompt=prompt, params=SamplingParams(temperature=0.0), max_tokens=max_tokens,
                   stop_token_ids=frozenset(), deliver=inbox.put)
    engine.submit(seq)
    return seq, inbox


def wait_done(inbox, reason: str = "length") -> list[int]:
    tokens = []
    while True:
        message = inbox.get(timeout=120)
        if isinstance(message, TokenOut):
            tokens.append(message.token)
        elif isinstance(message, SequenceDone):
            assert message.reason == reason, message
            return tokens


def prompt_of(runtime, count: int) -> list[int]:
    ids = runtime.tokenizer.encode(" ".join(f"row {i}: {i * 7919 % 1000}." for i in range(count))).ids
    assert len(ids) >= count
    return ids[:count]


@pytest.mark.parametrize("prefill_alone, prompts, forwards", [
    (512, [400, 700], [400, 512, 128, 60]),  # alone: one forward up to the limit, then chunks
    (0, [300], [128, 128, 44]),  # 0: always chunk
])
def test_a_fresh_prompt_alone_runs_in_one_forward_up_to_the_limit(smollm2_runtime_bf16, recorded_forwards,
                                                                  prefill_alone, prompts, forwards):
    runtime = smollm2_runtime_bf16
    engine = run_engine(runtime, prefill_alone=prefill_alone)
    try:
        for count in prompts:
            wait_done(submit(engine, prompt_of(runtime, count))[1])
    finally:
        engine.stop()
    assert recorded_forwards == forwards


def test_prompts_chunk_while_another_request_decodes(smollm2_runtime_bf16, recorded_forwards):
    runtime = smollm2_runtime_bf16
    engine = run_engine(runtime, prefill_alone=4096)
    try:
        running, running_inbox = submit(engine, prompt_of(runtime, 50), max_tokens=400)
        while not isinstance(running_inbox.get(timeout=120), TokenOut):
            pass
        _, inbox = submit(engine, prompt_of(runtime, 300))
        wait_done(inbox)
        seen = [running_inbox.get_nowait() for _ in range(running_inbox.qsize())]
        assert seen and not any(isinstance(m, SequenceDone) for m in seen)  # it kept decoding meanwhile
        running.cancelled = True
    finally:
        engine.stop()
    assert recorded_forwards == [50, 128, 128, 44]


def test_cancelling_stops_a_one_forward_prefill_between_layers(smollm2_runtime_bf16, recorded_forwards):
    runtime = smollm2_runtime_bf16
    free_before = runtime.pool_stats()["blocks_free"]
    engine = run_engine(runtime, prefill_alone=4096)
    try:
        seq, inbox = submit(engine, prompt_of(runtime, 3000))
        assert recorded_forwards.started.wait(timeout=60)
        engine.cancel(seq)  # the 3,000-token forward takes seconds on CPU: this lands inside it
        assert wait_done(inbox, reason="cancelled") == []
        assert recorded_forwards.interrupted == [3000]
        assert runtime.pool_stats()["blocks_free"] == free_before  # nothing of it stays held
        assert len(wait_done(submit(engine, prompt_of(runtime, 100))[1])) == 2  # and the engine goes on
    finally:
        engine.stop()
