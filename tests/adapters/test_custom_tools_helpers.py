"""Custom tools in the canonical model (core/custom_tools.py): the arguments the model writes for
an input, and the input decoded from arguments as they stream in, whatever the chunking."""

from __future__ import annotations

import json

import pytest

from kvgate.adapters.custom_tools import (
    InputDecoder, custom_tool, custom_tool_of, input_arguments, input_of, input_parameters,
)
from kvgate.core.types import InputFormat, Tool

TRICKY = 'say "hi"\\\n\ttab é 厉 😀 \x01 </tool_call>'


def test_custom_tool_is_a_function_with_one_string_input():
    tool = custom_tool("exec", "Run code", InputFormat("lark", "start: /x/"), namespace="functions")
    assert tool.parameters == input_parameters() and tool.qualified_name == "functions__exec"
    assert tool.parameters["properties"] == {"input": {"type": "string"}} and tool.parameters["required"] == ["input"]
    plain = Tool("exec")
    assert custom_tool_of([plain, tool], "exec", "functions") is tool
    assert custom_tool_of([plain, tool], "exec", None) is None


def test_arguments_round_trip():
    arguments = input_arguments(TRICKY)
    assert arguments == json.dumps({"input": TRICKY}, ensure_ascii=False)
    assert input_of(arguments) == TRICKY
    assert input_of('{"input": 5}') == '{"input": 5}' and input_of("not json") == "not json"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1000])
def test_decoder_streams_the_input_whatever_the_chunks(size):
    arguments = json.dumps({"input": TRICKY})  # ASCII escapes: \\u sequences and surrogate pairs split
    decoder, out = InputDecoder(), []
    for at in range(0, len(arguments), size):
        piece = decoder.feed(arguments[at:at + size])
        assert TRICKY.startswith("".join(out) + piece)  # never a wrong or half character
        out.append(piece)
    out.append(decoder.finish(arguments))
    assert "".join(out) == TRICKY


def test_decoder_finish_sends_what_the_stream_lacked():
    decoder = InputDecoder()
    assert decoder.feed('{"inp') == ""
    assert decoder.finish('{"input": "ls -la"}') == "ls -la"
