"""The tool-name rule: names holding control text, or that a dialect cannot round-trip, are refused."""

from __future__ import annotations

import pytest
from tokenizers import AddedToken, Tokenizer, models

from kvgate.core.errors import InvalidRequest
from kvgate.plugins.tool_name_check import ToolNameCheck
from kvgate.core.types import Tool
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.glm_xml import GlmXml

DIALECTS = [ChatmlJson(), GlmXml(), DeepseekDsml()]


def tokenizer_with(*specials: str) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.add_special_tokens([AddedToken(text, special=True) for text in specials])
    return tokenizer


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_ordinary_names_pass_in_every_dialect(dialect):
    check = ToolNameCheck(dialect, tokenizer_with("<|endoftext|>"))
    for name in ("get_weather", "mcp__ide__getDiagnostics", "Bash", "a.b:c-d"):
        assert check.problem(name) is None, name
    check.check([Tool(name="read", namespace="mcp")])


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_special_token_text_and_markup_are_refused(dialect):
    check = ToolNameCheck(dialect, tokenizer_with("<|endoftext|>", "<|im_end|>"))
    for name in ("<|endoftext|>", "x<|im_end|>", "a</think>b"):
        assert "control text" in check.problem(name), name
    with pytest.raises(InvalidRequest) as error:
        check.check([Tool(name="ok"), Tool(name="<|endoftext|>")])
    assert error.value.param == "tools[1].name" and "'<|endoftext|>'" in error.value.message


def test_a_name_the_dialect_cannot_round_trip_is_refused():
    check = ToolNameCheck(ChatmlJson())
    assert "cannot carry" in check.problem("a\nb") and "cannot carry" in check.problem('a"b')
