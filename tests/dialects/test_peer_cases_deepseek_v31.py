"""vLLM's DeepSeek V3.1 tool-parser cases on deepseek_v31 (variant v31), fed whole and split at
every position.

Source: vLLM tests/tool_parsers/test_deepseekv31_tool_parser.py, as an external corpus of what
models write. Where kvgate differs on purpose the case says why (the conventions are listed in
:mod:`kvgate.dialects.deepseek_v31`).
"""

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool
from kvgate.dialects.deepseek_v31 import DeepseekV31

VLLM = "vLLM tests/tool_parsers/test_deepseekv31_tool_parser.py::"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

TOOLS = [Tool("foo", "", {"type": "object", "properties": {"x": {"type": "integer"}}}),
         Tool("bar", "", {"type": "object", "properties": {"y": {"type": "integer"}}}),
         Tool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})]


def call(name: str, args: str) -> str:
    return CALL_BEGIN + name + SEP + args + CALL_END


CASES = [  # (source, model output, content, completed calls, unfinished, issues)
    (VLLM + "test_extract_tool_calls_with_tool", "normal text" + CALLS_BEGIN + call("foo", '{"x":1}') + CALLS_END,
     "normal text", [("foo", {"x": 1})], [], []),
    # convention: vLLM drops text after the block; kvgate never drops what the model wrote
    (VLLM + "test_extract_tool_calls_with_multiple_tools",
     "some prefix text" + CALLS_BEGIN + call("foo", '{"x":1}') + call("bar", '{"y":2}') + CALLS_END + " some suffix text",
     "some prefix text some suffix text", [("foo", {"x": 1}), ("bar", {"y": 2})], [], []),
    # convention (both below): vLLM gives an unreadable block back as content; kvgate never shows
    # markup as text: the block is reported and no call is made, as in vLLM
    (VLLM + "test_extract_tool_calls_unparsable_block[cut off]", "Let me look that up." + CALLS_BEGIN + "get_weather",
     "Let me look that up.", [], [], [f"expected {CALL_BEGIN} or {CALLS_END} in the tool calls block"]),
    (VLLM + "test_extract_tool_calls_unparsable_block[no call markers]", CALLS_BEGIN + 'foo' + SEP + '{"x":1}' + CALLS_END,
     "", [], [], ["text outside any call in the tool calls block ignored"]),
]


@pytest.mark.parametrize("source, text, content, calls, unfinished, issues", CASES, ids=[c[0] for c in CASES])
def test_deepseek_v31_case(source, text, content, calls, unfinished, issues):
    events = every_split(lambda: DeepseekV31("v31").new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}
