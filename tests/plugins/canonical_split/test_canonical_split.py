"""Forced text keeps the tokenizer's own split: a scripted model that prefers non-canonical splits
(``g`` for ``get_weather``, ``"}`` before ``}\\n</tool_call>``, ``>`` before ``</tool_call>``) still
produces tokens that re-tokenize to themselves, and the same text; without the overlay it does not."""

from __future__ import annotations

import pytest
import torch

from bench.fence_check import check_calls
from kvgate.core.fence import build_request_fence
from kvgate.core.types import Tool
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.glm_xml import GlmXml
from tests.core.fence.conftest import greedy_run, request

WEATHER = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"], "additionalProperties": False})
SEARCH = Tool("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}},
                                   "required": ["q"], "additionalProperties": False})

# (text the output ends with, tokens the scripted model prefers there, best first)
CHATML_SCRIPT = [('"name": "', ["g", "s"]), ('"city": "', ["Paris"]), ("Paris", ['"}', '"'])]
GLM_SCRIPT = [("<tool_call>", ["s", "g"]), ("<arg_value>", ["Rome"]), ("Rome", ["</"]),
              ("Rome</", ["arg"]), ("Rome</arg", ["_"]), ("Rome</arg_", ["value"]), ("Rome</arg_value", [">"])]


def scripted_run(fence, tokenizer, script, limit: int = 60) -> list[int]:
    pieces = {text: [tokenizer.token_to_id(p) if tokenizer.token_to_id(p) is not None
                     else tokenizer.encode(p, add_special_tokens=False).ids[0] for p in prefer]
              for text, prefer in script}

    def logits_for(out: list[int]) -> torch.Tensor:
        text = tokenizer.decode(out)
        logits = torch.zeros(tokenizer.get_vocab_size())
        logits[2] = 5.0  # end the turn where the output may end
        for ending, prefer in pieces.items():
            if text.endswith(ending):
                for rank, token in enumerate(prefer):
                    logits[token] = 20.0 - rank
        return logits

    return greedy_run(fence, logits_for, limit)


@pytest.mark.parametrize("dialect,script,wanted", [
    (ChatmlJson(), CHATML_SCRIPT, '{"name": "get_weather", "arguments": {"city": "Paris"}}'),
    (GlmXml("glm47"), GLM_SCRIPT, "search<arg_key>q</arg_key><arg_value>Rome</arg_value></tool_call>"),
], ids=["chatml_json", "glm_xml"])
def test_forced_text_keeps_the_canonical_split(smol_info, smol_tokenizer, pm, config, dialect, script, wanted):
    config.section("guard").enabled = False
    runs = {}
    for canonical in (True, False):
        fence = build_request_fence(request("required", tools=(WEATHER, SEARCH)), dialect, smol_info, config, pm)
        if not canonical:
            fence.refiners = []
        out = scripted_run(fence, smol_tokenizer, script)
        text = smol_tokenizer.decode(out)
        assert check_calls(dialect, [WEATHER, SEARCH], text).ok, text
        runs[canonical] = (out, text)
    out, text = runs[True]
    assert wanted in text
    assert smol_tokenizer.encode(text, add_special_tokens=False).ids == out
    plain_out, plain_text = runs[False]
    assert smol_tokenizer.encode(plain_text, add_special_tokens=False).ids != plain_out  # the script bites


def test_the_overlay_only_moves_weight_between_allowed_tokens(smol_info, smol_tokenizer, pm, config):
    fence = build_request_fence(request("required", tools=(WEATHER, SEARCH)), ChatmlJson(), smol_info, config, pm)
    for token in smol_tokenizer.encode('<tool_call>\n{"name": "', add_special_tokens=False).ids:
        fence.advance(token)
    allowed = fence.allowed()
    logits = torch.randn(smol_tokenizer.get_vocab_size())
    g, get = smol_tokenizer.token_to_id("g"), smol_tokenizer.token_to_id("get")
    logits[g] = 50.0
    fence.apply(logits)
    kept = torch.isfinite(logits).numpy()
    assert not (kept & ~allowed).any()  # nothing outside the grammar came back
    assert allowed[g] and not kept[g]  # 'g' is a split of 'get_weather' the tokenizer never makes
    assert kept[get] and float(logits[get]) == 50.0  # 'get' took its weight
    assert int(torch.argmax(logits)) == get
