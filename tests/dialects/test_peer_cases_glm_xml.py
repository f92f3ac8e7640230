"""vLLM's GLM-4.5 / 4.7 tool-parser cases on glm_xml, fed whole and split at every position.

Sources: vLLM tests/tool_parsers/test_glm47_moe_tool_parser.py and test_glm4_moe_tool_parser.py, and
SGLang's Glm4MoeDetector tests (the GLM-4 / GLM-4.7 separator variants, as vendored by rtp-llm), as
an external corpus of what models write; plus GLM-4.6's escaped-quote arrays and objects (the
issue "More tool dialects"). Where kvgate differs on purpose the case says why (the conventions
are listed in :mod:`kvgate.dialects.glm_xml`).
"""

import json

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallStart
from kvgate.dialects.glm_xml import GlmXml

GLM47 = "vLLM tests/tool_parsers/test_glm47_moe_tool_parser.py::TestGlm47ExtractToolCalls::"
GLM4 = "vLLM tests/tool_parsers/test_glm4_moe_tool_parser.py::"
SGLANG = "SGLang test_glm4_moe_detector.py::TestGlm4MoeDetector::"


def tool(name: str, **props) -> Tool:
    return Tool(name, "", {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}})


TOOLS = [tool("get_current_date"), tool("get_weather", city="string", date="string", unit="string"), tool("get_time"),
         tool("send", message="string", s="string", greeting="string", emoji="string", code="string"),
         Tool("calculate", "", {}), tool("plan", items="array", meta="object")]


def arg(key: str, value: str, sep: str = "") -> str:
    return f"<arg_key>{key}</arg_key>{sep}<arg_value>{value}</arg_value>{sep}"


def call(name: str, body: str = "") -> str:
    return f"<tool_call>{name}{body}</tool_call>"


DATE = call("get_current_date")
BEIJING = call("get_weather", arg("city", "Beijing"))
LITERAL_NEWLINE = "a literal '\\n' between tags read as a newline"
ESCAPED = "a value written with escaped quotes read as the parameter's JSON"

CASES = [  # (source, model output, content, completed calls, unfinished, issues)
    (GLM47 + "test_no_tool_call", "This is a plain response.", "This is a plain response.", [], [], []),
    (GLM47 + "test_zero_arg_inline", DATE, "", [("get_current_date", {})], [], []),
    (GLM47 + "test_zero_arg_newline", "<tool_call>get_current_date\n</tool_call>", "",
     [("get_current_date", {})], [], []),
    (GLM47 + "test_args_same_line", BEIJING, "", [("get_weather", {"city": "Beijing"})], [], []),
    (GLM47 + "test_args_with_newlines", call("get_weather", "\n" + arg("city", "Beijing", "\n")), "",
     [("get_weather", {"city": "Beijing"})], [], []),
    (GLM47 + "test_content_before", "Checking." + DATE, "Checking.", [("get_current_date", {})], [], []),
    (GLM47 + "test_multiple", BEIJING + call("get_weather", arg("city", "Shanghai")), "",
     [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})], [], []),
    # convention: vLLM drops whitespace-only content; kvgate sends the model's text as it was written
    (GLM47 + "test_whitespace_content_none", "  \n  " + DATE, "  \n  ", [("get_current_date", {})], [], []),
    (GLM4 + "test_streaming_json_escape_in_string", call("send", arg("message", 'Hello "world"\nNew line')), "",
     [("send", {"message": 'Hello "world"\nNew line'})], [], []),
    (GLM4 + "test_extract_tool_calls_numeric_deserialization",  # no schema: JSON when the text is JSON
     call("calculate", arg("operation", "add") + arg("a", "42") + arg("b", "3.14") + arg("enabled", "true")), "",
     [("calculate", {"operation": "add", "a": 42, "b": 3.14, "enabled": True})], [], []),
    (GLM4 + "test_whitespace_preserved_in_arg_values", call("send", arg("s", "    indented code    ")), "",
     [("send", {"s": "    indented code    "})], [], []),
    (GLM4 + "test_zero_argument_tool_call", "<tool_call>get_time\n</tool_call>", "", [("get_time", {})], [], []),
    # convention: vLLM gives this text back as content; kvgate reports a call block with no name, never as text
    (GLM4 + "test_malformed_tool_call_no_regex_match", "<tool_call>   ", "", [], [], ["unclosed tool call"]),
    (GLM4 + "test_unicode_characters_preserved", call("send", arg("greeting", "你好世界") + arg("emoji", "🎉")), "",
     [("send", {"greeting": "你好世界", "emoji": "🎉"})], [], []),
    (SGLANG + "test_with_args_newline_separator", call("get_weather", "\n" + arg("city", "杭州", "\n")), "",
     [("get_weather", {"city": "杭州"})], [], []),
    (SGLANG + "test_with_args_literal_newline_separator",
     call("get_weather", "\\n" + arg("city", "杭州", "\\n")), "", [("get_weather", {"city": "杭州"})], [], [LITERAL_NEWLINE]),
    (SGLANG + "test_with_args_no_separator", call("get_weather", arg("city", "杭州")), "",
     [("get_weather", {"city": "杭州"})], [], []),
    (SGLANG + "test_no_args_literal_newline_separator", "<tool_call>get_time\\n</tool_call>", "",
     [("get_time", {})], [], [LITERAL_NEWLINE]),
    (SGLANG + "test_no_args_no_separator", call("get_time"), "", [("get_time", {})], [], []),
    (SGLANG + "test_multiple_args_newline_separator",
     call("get_weather", "\n" + arg("city", "杭州", "\n") + arg("unit", "celsius", "\n")), "",
     [("get_weather", {"city": "杭州", "unit": "celsius"})], [], []),
    (SGLANG + "test_multiple_tool_calls", call("get_weather", arg("city", "杭州")) + call("get_weather", arg("city", "北京")),
     "", [("get_weather", {"city": "杭州"}), ("get_weather", {"city": "北京"})], [], []),
    (SGLANG + "test_normal_text_before_tool_call", "让我查询天气" + call("get_weather", arg("city", "杭州")), "让我查询天气",
     [("get_weather", {"city": "杭州"})], [], []),
    (SGLANG + "test_no_tool_call", "这是普通文本，没有工具调用", "这是普通文本，没有工具调用", [], [], []),
    ("issue: GLM-4.6 escaped-quote array", call("plan", arg("items", '[{\\"a\\": 1}]')), "",
     [("plan", {"items": [{"a": 1}]})], [], [ESCAPED]),
    ("issue: GLM-4.6 escaped-quote object", call("plan", arg("meta", '{\\"k\\": \\"v \\\\\\"q\\\\\\"\\"}')), "",
     [("plan", {"meta": {"k": 'v "q"'}})], [], [ESCAPED]),
]


@pytest.mark.parametrize("variant", ["glm45", "glm47"])
@pytest.mark.parametrize("source, text, content, calls, unfinished, issues", CASES, ids=[c[0] for c in CASES])
def test_glm_case(variant, source, text, content, calls, unfinished, issues):
    events = every_split(lambda: GlmXml(variant).new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}


def test_escaped_quotes_stay_a_string_for_a_string_parameter():
    """The escaped-quote reading is the schema's: a string parameter keeps the text as written."""
    events = every_split(lambda: GlmXml().new_parser(TOOLS, call_id), call("send", arg("s", '[\\"a\\"]')), "")
    assert outcome(events)["calls"] == [("send", {"s": '[\\"a\\"]'})]


def test_partial_tool_name_is_not_sent_until_complete():
    """Source: test_glm47_moe_tool_parser.py, streaming test_delays_prefix_only_tool_name_until_exact_match."""
    parser = GlmXml().new_parser(TOOLS, call_id)
    assert not [e for e in parser.feed("<tool_call>get") if isinstance(e, ToolCallStart)]
    started = [e for e in parser.feed("_weather<arg_key>") if isinstance(e, ToolCallStart)]
    assert [e.name for e in started] == ["get_weather"]


def test_long_string_value_streams_incrementally():
    """Source: test_glm4_moe_tool_parser.py::test_streaming_long_content_incremental (a 25-line file)."""
    code = "".join(f"def f{i}(x):\n    return x + {i}  # \"{i}\"\n" for i in range(25))
    parser = GlmXml().new_parser(TOOLS, call_id)
    text = call("send", arg("code", code))
    events = [e for start in range(0, len(text), 40) for e in parser.feed(text[start:start + 40])]
    events += parser.finish()
    deltas = [e.text for e in events if isinstance(e, ToolCallArgsDelta)]
    assert len(deltas) >= 10 and json.loads("".join(deltas)) == {"code": code}
