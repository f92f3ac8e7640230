"""The token budget: a fenced call must close before ``max_tokens`` runs out, even when the
model would keep writing a string value forever (driven here by fixed logits that always prefer
one word; guards off so only the budget logic acts)."""

from __future__ import annotations

import pytest
import torch

from bench.fence_check import check_calls
from kvgate.core.fence import build_request_fence
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.minimax_m2 import MinimaxM2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml
from tests.core.fence.conftest import CLOCK, WEATHER, args, greedy_run, request
from tests.core.fence.test_fence_new_dialects import calls_text, lead

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


@pytest.mark.parametrize("text", ["厉", "☠", "😀"])
def test_text_split_inside_a_character_runs_to_the_cap(smol_info, smol_tokenizer, pm, config, text):
    """A character spread over several tokens leaves the grammar not accepting between them; that
    opens no call, so plain text near the cap neither stops early nor loses the trigger ban."""
    config.section("guard").enabled = False
    fence = build_request_fence(request("auto"), ChatmlJson(), smol_info, config, pm)
    pieces = smol_tokenizer.encode(text * 40, add_special_tokens=False).ids
    assert len(smol_tokenizer.encode(text, add_special_tokens=False).ids) > 1
    budget = fence.call_cost + 8  # the cap falls inside the no-room-for-a-call zone
    out = greedy_run(fence, lambda out: one_hot(smol_tokenizer, pieces[len(out)]), budget)
    assert len(out) == budget and out[:-1] == pieces[:budget - 1]  # the last may complete a character
    assert not fence.plan.entered
    for token in smol_tokenizer.encode("\n<tool_call", add_special_tokens=False).ids:
        fence.advance(token)
    close = smol_tokenizer.encode(">", add_special_tokens=False).ids[0]
    assert close in fence.plan.trigger_bans(20)  # still free text: no call may open without room


def test_a_call_opens_when_the_trigger_is_written(smol_info, smol_tokenizer, pm, config):
    fence = build_request_fence(request("auto"), ChatmlJson(), smol_info, config, pm)
    for token in smol_tokenizer.encode("Sure 厉.\n<tool_call", add_special_tokens=False).ids:
        fence.advance(token)
    assert not fence.plan.entered
    fence.advance(smol_tokenizer.encode(">", add_special_tokens=False).ids[0])
    assert fence.plan.entered


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_after_text_and_a_call_the_output_stops_without_room_for_another(smol_info, smol_tokenizer, pm, config,
                                                                         dialect):
    """``auto``: text (with a character split over tokens) opens nothing; the call after it does,
    and once it closed with no room for a second one the output ends."""
    fence = build_request_fence(request("auto"), dialect, smol_info, config, pm)
    ids = smol_tokenizer.encode("Checking 厉." + lead(dialect) + calls_text(dialect, ("get_time", args(tz="UTC"))),
                                add_special_tokens=False).ids
    written = b""
    for step, token in enumerate(ids):
        fence.set_budget(len(ids) - step + fence.call_cost + 2)
        assert fence.allows(token)
        fence.advance(token)
        written += smol_info.token_bytes()[token]
        assert fence.plan.entered == (dialect.trigger.encode() in written), written
    fence.set_budget(fence.call_cost + 1)
    assert fence.must_stop


def one_hot(tokenizer, token: int) -> torch.Tensor:
    logits = torch.zeros(tokenizer.get_vocab_size())
    logits[token] = 10.0
    return logits


REASONING_DIALECTS = [ChatmlJson(), GlmXml("glm47"), DeepseekDsml("v32"), Qwen3CoderXml(), DeepseekV31("r1"),
                      KimiK2("thinking"), MinimaxM2()]


@pytest.mark.parametrize("dialect", REASONING_DIALECTS, ids=lambda d: f"{d.name}-{d.variant}")
@pytest.mark.parametrize("spare", [0, 9, 40])
def test_reasoning_closes_in_time_for_a_required_call(smol_info, smol_tokenizer, pm, config, dialect, spare):
    """A completion that starts inside reasoning (the prompt opened it) and a model that would think
    forever: the fence closes the reasoning and the call within the budget."""
    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(WEATHER,)), dialect, smol_info, config, pm,
                                start_in="reasoning")
    shortest = fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer, reasoning=True)
    assert shortest is not None, "no closing path from inside the reasoning"
    budget = len(shortest) + spare
    text = run_to_budget(fence, smol_tokenizer, " hello", budget)
    verdict = check_calls(dialect, [WEATHER], text, start_in="reasoning")
    assert verdict.ok and len(verdict.calls) == 1, (text, verdict.problems)
    assert len(smol_tokenizer.encode(text).ids) <= budget
