"""The closing invariant holds against an adversarial model, at exactly the budget.

The "model" here is a fixed logits function that always prefers opening tokens (``{``, ``[``)
and never closes anything: a fault the real SmolLM2 produces only now and then (it nests
``"conditions": [{"city": ...`` until the budget is gone), so it is faked to hit it every time.
Each output must end valid within ``max_tokens``, for plain decoding and for drafts checked on a
fence clone and verified position by position (the engine's own speculative functions).
"""

from __future__ import annotations

import json

import pytest
import torch

from bench.fence_check import check_calls, check_json
from kvgate.core.engine.sequence import Sequence
from kvgate.core.engine.draft import draft_for
from kvgate.core.engine.speculative import verify
from kvgate.core.fence import build_request_fence
from kvgate.core.types import ResponseFormat, SamplingParams, Tool
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.glm_xml import GlmXml
from kvgate.plugins.drafter_ngram import NgramDrafts
from tests.core.fence.conftest import greedy_run, request

NEST = Tool("configure", "Nested options", {
    "type": "object", "properties": {"name": {"type": "string"}, "opts": {"type": "object"}},
    "required": ["name", "opts"], "additionalProperties": False})
DIALECTS = [ChatmlJson(), GlmXml("glm47"), DeepseekDsml("v32")]


class Adversary:
    """Logits for the text so far: the next token of ``script`` (text that nests forever) while
    the output follows it, else any opening bracket; closers, quotes, tags and the end of turn are
    its last choices."""

    def __init__(self, info, tokenizer, script: str):
        self.tokenizer, self.script = tokenizer, script
        self.base = torch.zeros(info.vocab_size)
        for token, piece in enumerate(info.token_bytes()):
            self.base[token] = 4.0 * (piece.count(b"{") + piece.count(b"[")) + 0.01 * len(piece)
            if any(c in piece for c in (b"}", b"]", b"<", b'"')):
                self.base[token] -= 20.0
        self.base[list(info.eos_ids)] = -30.0

    def __call__(self, tokens: list[int]) -> torch.Tensor:
        row = self.base.clone()
        text = self.tokenizer.decode(tokens)
        if self.script.startswith(text) and len(text) < len(self.script):
            row[self.tokenizer.encode(self.script[len(text):], add_special_tokens=False).ids[0]] = 50.0
        return row


def nesting_script(dialect, mode: str) -> str:
    """The bench's runaway answer: ``"conditions": [{"city": "LIMA", ...`` nested deeper and deeper."""
    inner: dict = {}
    for _ in range(12):
        inner = {"city": "LIMA", "temperature": 28, "conditions": [inner]}
    if mode == "json_object":
        text = json.dumps(inner)
    else:
        head = dialect.literals.get("block_open", "")
        text = head + dialect.render_tool_call("configure", json.dumps({"name": "x", "opts": inner}))
    return text[: text.rfind("[") + 1]


def make(dialect, mode, info, pm, config):
    config.section("guard").enabled = False  # only the budget acts
    if mode == "json_object":
        req = request("auto", tools=(), response=ResponseFormat("json_object"))
    else:
        req = request("named", "configure", tools=(NEST,), parallel=False)
    return build_request_fence(req, dialect, info, config, pm)


def speculative_run(fence, model: Adversary, budget: int) -> list[int]:
    """Drafts from the n-gram proposer, checked on a clone, verified row by row (the engine's own
    functions; the rows are the adversary's logits after each draft prefix)."""
    seq = Sequence(prompt=[1, 2, 3], params=SamplingParams(temperature=0.0), max_tokens=budget,
                   stop_token_ids=frozenset(fence.stop_ids), deliver=lambda m: None, fence=fence)
    while seq.budget_left() > 0:
        draft, forced = draft_for(seq, 4, seq.budget_left() - 1, NgramDrafts())
        rows = [model(seq.output + draft[:index]) for index in range(len(draft) + 1)]
        chosen, work = verify(seq, rows, draft, forced)
        seq.fence.take_state(work)
        done = next((i for i, t in enumerate(chosen) if t in fence.stop_ids), None)
        seq.output += chosen[:done]
        if done is not None or seq.fence.must_stop:
            break
    assert len(seq.output) <= budget
    return seq.output


def valid(dialect, mode, text: str) -> bool:
    if mode == "json_object":
        return check_json(text, {"type": "object"}).ok
    verdict = check_calls(dialect, [NEST], text)
    return verdict.ok and [name for name, _ in verdict.calls] == ["configure"]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("mode", ["json_object", "named"])
@pytest.mark.parametrize("run", [greedy_run, speculative_run], ids=["plain", "speculative"])
def test_nesting_cannot_outrun_the_budget(smol_info, smol_tokenizer, pm, config, dialect, mode, run):
    model = Adversary(smol_info, smol_tokenizer, nesting_script(dialect, mode))
    shortest = None
    for spare in (0, 4, 9, 13, 21, 34, 55):
        fence = make(dialect, mode, smol_info, pm, config)
        shortest = shortest or len(fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer))
        out = run(fence, model, shortest + spare)
        text = smol_tokenizer.decode(out)
        assert len(out) <= shortest + spare and valid(dialect, mode, text), (spare, text)
        assert text.count("[") >= 2 or spare < 55  # the adversary did nest
