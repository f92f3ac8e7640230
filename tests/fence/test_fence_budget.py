"""The token budget: a fenced call must close before ``max_tokens`` runs out, even when the
model would keep writing a string value forever (driven here by fixed logits that always prefer
one word; guards off so only the budget logic acts)."""

from __future__ import annotations

import pytest
import torch

from kvgate.core.fence import build_request_fence
from kvgate.core.fence.check import check_calls
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml
from tests.fence.conftest import CLOCK, WEATHER, greedy_run, request

DIALECTS = [ChatmlJson(), GlmXml("glm47"), DeepseekDsml("v32"), Qwen3CoderXml(), DeepseekV31("v31"),
            DeepseekV31("r1"), KimiK2("instruct")]


def run_to_budget(fence, tokenizer, prefer: str, budget: int) -> str:
    logits = torch.zeros(tokenizer.get_vocab_size())
    for token in tokenizer.encode(prefer, add_special_tokens=False).ids:
        logits[token] = 10.0
    logits[2] = -10.0  # the end of turn is the model's last choice
    return tokenizer.decode(greedy_run(fence, lambda out: logits.clone(), budget))


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("spare", [0, 9, 40])
def test_calls_close_within_the_budget(smol_info, smol_tokenizer, pm, config, dialect, spare):
    """With ``spare`` tokens more than the shortest complete call, the call always completes."""
    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(WEATHER,)), dialect, smol_info, config, pm)
    shortest = fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer)
    budget = len(shortest) + spare
    text = run_to_budget(fence, smol_tokenizer, " hello", budget)
    verdict = check_calls(dialect, [WEATHER], text)
    assert verdict.ok and len(verdict.calls) == 1, (text, verdict.problems)
    assert len(smol_tokenizer.encode(text).ids) <= budget


def test_without_a_budget_the_value_runs_on(smol_info, smol_tokenizer, pm, config):
    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(CLOCK,)), ChatmlJson(), smol_info, config, pm)
    logits = torch.zeros(smol_tokenizer.get_vocab_size())
    logits[smol_tokenizer.encode(" hello").ids[0]] = 10.0
    for _ in range(40):  # no set_budget: nothing forces the string closed
        row = logits.clone()
        fence.apply(row)
        fence.advance(int(torch.argmax(row)))
    assert not fence.matcher.is_accepting()


def test_no_second_call_without_room_for_it(smol_info, smol_tokenizer, pm, config):
    dialect = ChatmlJson()
    fence = build_request_fence(request("required"), dialect, smol_info, config, pm)
    call = dialect.render_tool_call("get_time", '{"tz": "UTC"}')
    ids = smol_tokenizer.encode(call).ids
    budget = len(ids) + fence.call_cost + 10
    for step, token in enumerate(ids):
        fence.set_budget(budget - step)
        fence.advance(token)
    assert not fence.must_stop  # room for another call
    tight = build_request_fence(request("required"), dialect, smol_info, config, pm)
    for step, token in enumerate(ids):
        tight.set_budget(len(ids) + 3 - step)
        tight.advance(token)
    assert tight.must_stop


def test_auto_text_cannot_open_a_call_it_cannot_finish(smol_info, smol_tokenizer, pm, config):
    dialect = ChatmlJson()
    fence = build_request_fence(request("auto"), dialect, smol_info, config, pm)
    for token in smol_tokenizer.encode("Sure.\n<tool").ids:
        fence.advance(token)
    finish = smol_tokenizer.encode("_call>").ids
    fence.set_budget(fence.call_cost + 40)
    assert fence.allows(finish[0])
    fence.set_budget(5)
    mask = fence.allowed()
    assert mask[smol_tokenizer.encode(" text").ids[0]]
    rest = [t for t in range(smol_info.vocab_size)
            if smol_info.token_bytes()[t].startswith(b"_call>") or smol_info.token_bytes()[t] == b"_"]
    assert rest and not any(mask[t] for t in rest if smol_info.token_bytes()[t].startswith(b"_call>"))


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("spare", [0, 9, 40])
def test_calls_close_when_forced_runs_skip_the_logits(smol_info, smol_tokenizer, pm, config, dialect, spare):
    """Speculation takes ``forced_tokens()`` without computing a mask; the runs it gets must stop
    where the budget is due a check, or the closing path is planned too late."""
    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(WEATHER,)), dialect, smol_info, config, pm)
    budget = len(fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer)) + spare
    logits = torch.zeros(smol_tokenizer.get_vocab_size())
    logits[smol_tokenizer.encode(" hello", add_special_tokens=False).ids[0]] = 10.0
    logits[2] = -10.0
    out: list[int] = []
    while len(out) < budget and not fence.must_stop:
        fence.set_budget(budget - len(out))
        run = fence.forced_tokens()
        if not run:
            row = logits.clone()
            fence.apply(row)
            run = [int(torch.argmax(row))]
        for token in run:
            fence.advance(token)
            out.append(token)
    verdict = check_calls(dialect, [WEATHER], smol_tokenizer.decode(out))
    assert verdict.ok and len(verdict.calls) == 1 and len(out) <= budget, (smol_tokenizer.decode(out), verdict.problems)
