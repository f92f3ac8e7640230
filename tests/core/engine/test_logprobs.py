"""Logprobs in the engine: the pure function, then the real engine and model (batched, plain and
speculative decoding) against a full prefill of the same tokens through the runtime."""

from __future__ import annotations

import queue

import pytest
import torch

from kvgate.core.config import EngineConfig
from kvgate.core.engine import speculative
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sampling import logprobs_for, token_logprobs
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.types import ChatRequest, Message, SamplingParams
from kvgate.dialects.chatml_json import ChatmlJson
from tests.core.fence.engine_run import prompt_tokens


def test_token_logprobs_are_the_fp32_log_softmax_of_the_row():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 4
    expected = torch.log_softmax(logits, dim=-1)
    order = torch.argsort(expected, descending=True)
    unlikely = int(order[500])
    got = token_logprobs(logits.to(torch.bfloat16), unlikely, 5)  # bf16 logits are widened first
    assert got.logprob == float(torch.log_softmax(logits.to(torch.bfloat16).float(), -1)[unlikely])
    got = token_logprobs(logits, unlikely, 5)
    assert got.logprob == float(expected[unlikely])  # the chosen token, though far outside the top 5
    assert [i for i, _ in got.top] == order[:5].tolist()
    assert [v for _, v in got.top] == expected[order[:5]].tolist()
    likely = token_logprobs(logits, int(order[2]), 3)
    assert likely.top[2] == (int(order[2]), likely.logprob)


def test_equal_logprobs_are_ordered_as_argmax_breaks_ties():
    logits = torch.tensor([1.0, 3.0, 0.5, 3.0, 3.0, 2.0] * 50)
    got = token_logprobs(logits, int(torch.argmax(logits)), 4)
    assert [i for i, _ in got.top] == [1, 3, 4, 7] and got.top[0] == (1, got.logprob)


def test_logprobs_cost_nothing_unless_asked_for():
    logits = torch.randn(50)
    assert logprobs_for(SamplingParams(), logits, 0) is None
    assert logprobs_for(SamplingParams(logprobs=True), logits, 7).top == []
    assert len(logprobs_for(SamplingParams(logprobs=True, top_logprobs=20), logits, 7).top) == 20


# --- the real engine ---------------------------------------------------------------------------

REQUESTS = ["Repeat this list exactly three times: apple, banana, cherry, date, elderberry.",
            "Write a sentence about cats.", "Count from one to twenty in words."]
GREEDY = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=4)


def run_batch(engine: Engine, prompts: list[list[int]], max_tokens: int) -> list[list[TokenOut]]:
    """Submit every prompt at once (they decode in one batch) and collect each one's tokens."""
    inboxes = [queue.Queue() for _ in prompts]
    for prompt, inbox in zip(prompts, inboxes):
        engine.submit(Sequence(prompt=prompt, params=GREEDY, max_tokens=max_tokens, stop_token_ids=frozenset(),
                               deliver=inbox.put))
    outputs = []
    for inbox in inboxes:
        out = []
        while not isinstance(message := inbox.get(timeout=300), SequenceDone):
            if isinstance(message, TokenOut):
                out.append(message)
        outputs.append(out)
    return outputs


def recomputed(runtime, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """log_softmax of the rows predicting each generated token, from one prefill of everything."""
    session = runtime.new_session()
    try:
        rows = runtime.prefill(session, prompt + generated[:-1], all_logits=True)[len(prompt) - 1:]
    finally:
        runtime.release(session)
    return torch.log_softmax(rows.float(), dim=-1)


@pytest.mark.slow
@pytest.mark.parametrize("draft", [0, 4], ids=["plain", "speculative"])
def test_greedy_logprobs_equal_a_full_prefill_of_the_same_tokens(smollm2_runtime, monkeypatch, draft):
    runtime = smollm2_runtime
    accepted = []
    verify = speculative.verify

    def counting(seq, rows, draft_tokens, forced):
        chosen, work = verify(seq, rows, draft_tokens, forced)
        accepted.append(len(chosen) - 1)
        return chosen, work

    monkeypatch.setattr(speculative, "verify", counting)
    engine = Engine(runtime, EngineConfig(speculative_ngram=draft, max_batch=8))
    engine.start()
    try:
        prompts = [prompt_tokens(runtime, ChatmlJson(), ChatRequest(model="m", messages=[Message("user", text)]))
                   for text in REQUESTS]
        outputs = run_batch(engine, prompts, 40)
    finally:
        engine.stop()
    for prompt, out in zip(prompts, outputs):
        tokens = [o.token for o in out]
        assert len(tokens) == 40
        for o in out:  # greedy: the chosen token is the most likely one
            assert o.logprobs.top[0] == (o.token, o.logprobs.logprob)
            assert [v for _, v in o.logprobs.top] == sorted((v for _, v in o.logprobs.top), reverse=True)
        reference = recomputed(runtime, prompt, tokens)
        chosen = torch.tensor([o.logprobs.logprob for o in out])
        assert torch.allclose(chosen, reference[torch.arange(len(tokens)), tokens], atol=1e-4, rtol=0)
        top = torch.tensor([[v for _, v in o.logprobs.top] for o in out])
        assert torch.allclose(top, reference.topk(4, dim=-1).values, atol=1e-4, rtol=0)
    if draft:
        assert sum(accepted) > 0  # drafts were accepted: their logprobs came from the verifying rows
