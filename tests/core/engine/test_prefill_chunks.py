"""How the real engine splits prompts into prefill forwards, and cancels one mid-forward
(SmolLM2-135M bf16, engine thread).

The runtime's ``prefill`` is wrapped to record every forward's size and outcome; it still runs for real.
"""

from __future__ import annotations

import queue
import threading
import time

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


def run_engine(runtime, prefill_slice_s=None, **config):
    """An engine with chunks of 128; unpaced unless ``prefill_slice_s`` is given, so that forward
    sizes follow the config alone."""
    engine = Engine(runtime, EngineConfig(prefill_chunk=128, **config), prefill_slice_s=prefill_slice_s)
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


def test_waiting_prompts_take_turns_one_chunk_each(smollm2_runtime_bf16, recorded_forwards):
    runtime = smollm2_runtime_bf16
    engine = Engine(runtime, EngineConfig(prefill_chunk=128, prefill_alone=4096), prefill_slice_s=None)
    _, long_inbox = submit(engine, prompt_of(runtime, 600))
    _, short_inbox = submit(engine, prompt_of(runtime, 20))  # both wait before the first turn
    engine.start()
    try:
        wait_done(short_inbox)
        assert long_inbox.qsize() == 0  # the short one finished while the long one still prefilled
        wait_done(long_inbox)
    finally:
        engine.stop()
    assert recorded_forwards[:3] == [128, 20, 128] and sum(recorded_forwards) == 620


def test_a_short_prompt_arriving_during_a_long_prefill_finishes_first(smollm2_runtime_bf16, recorded_forwards):
    runtime = smollm2_runtime_bf16
    engine = run_engine(runtime, prefill_slice_s=0.1, prefill_alone=8192)
    try:
        _, long_inbox = submit(engine, prompt_of(runtime, 3000))
        assert recorded_forwards.started.wait(timeout=60)
        started = time.monotonic()
        _, short_inbox = submit(engine, prompt_of(runtime, 8))
        assert len(wait_done(short_inbox)) == 2
        short_took = time.monotonic() - started
        assert long_inbox.qsize() == 0  # the long one has not even sent its first token
        wait_done(long_inbox)
        long_took = time.monotonic() - started
    finally:
        engine.stop()
    print(f"forwards {list(recorded_forwards)}; short {short_took:.2f} s, long {long_took:.2f} s after it")
    assert max(recorded_forwards) < 3000 and recorded_forwards[0] == 128  # paced, from chunk size until measured
    assert short_took < long_took / 2


def test_paced_chunks_give_the_same_tokens_as_one_forward(smollm2_runtime_bf16, recorded_forwards):
    runtime = smollm2_runtime_bf16
    prompt = prompt_of(runtime, 1500)
    outputs = []
    for slice_s in (None, 0.02):
        engine = run_engine(runtime, prefill_slice_s=slice_s, prefill_alone=4096)
        try:
            outputs.append(wait_done(submit(engine, prompt, max_tokens=12)[1]))
        finally:
            engine.stop()
    assert recorded_forwards[0] == 1500 and len(recorded_forwards) > 3  # one forward, then many paced ones
    assert outputs[0] == outputs[1]  # split-invariant: chunk boundaries do not change the result
