"""vLLM's Hermes tool-parser cases on chatml_json, fed whole and split at every position.

Sources: vLLM tests/tool_parsers/test_hermes_tool_parser.py (Hermes2ProToolParser) and SGLang's
Qwen25Detector unit tests (test_qwen25_detector.py), as an external corpus of what models write. Each case names its test; where kvgate differs on purpose, the case
says why (the conventions are listed in :mod:`kvgate.dialects.chatml_json`).
"""

import json

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool, ToolCallArgsDelta
from kvgate.dialects.chatml_json import ChatmlJson

SOURCE = "vLLM tests/tool_parsers/test_hermes_tool_parser.py::"


def tool(name: str, **props: str) -> Tool:
    return Tool(name, "", {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}})


TOOLS = [tool("final_answer", trigger="boolean"), tool("get_current_temperature", location="string", unit="string"),
         tool("get_weather", city="string"), tool("search", q="string"), tool("get_db_config", param="string"),
         tool("do_thing")]
TEXT = "This is some prior text that has nothing to do with tool calling."
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}}\n</tool_call>'
TEMPERATURE = ('<tool_call>{"name": "get_current_temperature","arguments": {"location":"San Francisco, California, '
               'United States", "unit": "celsius"}}</tool_call>')
TWO = ('<tool_call>{"name": "search", "arguments": {"q": "cats"}}</tool_call>'
       '<tool_call>{"name": "search", "arguments": {"q": "dogs"}}</tool_call>')
SERIALIZED = '<tool_call>\n{"name": "get_db_config", "arguments": "{\\"param\\": \\"max_connections\\"}"}\n</tool_call>'
BARE = '<tool_call>\n{"name": "do_thing", "arguments": "hello"}\n</tool_call>'
STRING_ARGS = "arguments written as a JSON string holding the object"

CASES = [  # (test name, model output, content, completed calls, unfinished calls, issues)
    ("test_hermes_parser_streaming_just_forward_text", TEXT, TEXT, [], [], []),
    ("test_hermes_parser_streaming_failure_case_bug_19056", FINAL, "", [("final_answer", {"trigger": True})], [], []),
    ("test_hermes_parser_streaming", TEMPERATURE, "", [("get_current_temperature", {
        "location": "San Francisco, California, United States", "unit": "celsius"})], [], []),
    ("content then call", 'Sure, let me check the weather.<tool_call>{"name": "get_weather", "arguments": '
     '{"city": "NYC"}}</tool_call>', "Sure, let me check the weather.", [("get_weather", {"city": "NYC"})], [], []),
    ("two calls back to back", TWO, "", [("search", {"q": "cats"}), ("search", {"q": "dogs"})], [], []),
    ("test_hermes_parser_non_streaming_no_tool_call", "This is not a tool call.", "This is not a tool call.",
     [], [], []),
    # the closing tag missing at the end of output is read silently (stop strings often swallow it)
    ("test_hermes_parser_non_streaming_tool_call_until_eos", FINAL[:-len("\n</tool_call>")], "",
     [("final_answer", {"trigger": True})], [], []),
    # convention: vLLM drops this call; its arguments object is complete, so kvgate completes it and reports the '}'
    ("test_hermes_parser_non_streaming_tool_call_invalid_json", FINAL[:-len("}\n</tool_call>")], "",
     [("final_answer", {"trigger": True})], [], ["tool call closed without the '}' that ends its JSON"]),
    ("test_hermes_parser_non_streaming_serialized_arguments", SERIALIZED, "",
     [("get_db_config", {"param": "max_connections"})], [], [STRING_ARGS]),
    # convention: vLLM returns arguments '"hello"'; not an object, so kvgate never completes the call (the
    # response then ends with an error, see kvgate.core.dialect.StreamParser)
    ("test_hermes_parser_non_streaming_bare_string_arguments", BARE, "", [], ["do_thing"],
     ["arguments are a JSON string that does not hold a JSON object"]),
]


@pytest.mark.parametrize("name, text, content, calls, unfinished, issues", CASES,
                         ids=[SOURCE + case[0] for case in CASES])
def test_hermes_case(name, text, content, calls, unfinished, issues):
    events = every_split(lambda: ChatmlJson().new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}


def test_serialized_arguments_stream_as_the_decoded_object():
    """Source: ...::test_hermes_parser_non_streaming_serialized_arguments ("Same streamed"): the
    arguments deltas are the decoded object's text, not the JSON string."""
    parser = ChatmlJson().new_parser(TOOLS, call_id)
    deltas = [e.text for piece in SERIALIZED for e in parser.feed(piece) if isinstance(e, ToolCallArgsDelta)]
    assert "".join(deltas) == '{"param": "max_connections"}'


def test_empty_string_arguments_are_no_arguments():
    """Not a peer case: ``"arguments": ""`` for a tool without parameters reads as ``{}`` (reported)."""
    text = '<tool_call>\n{"name": "do_thing", "arguments": ""}\n</tool_call>'
    events = every_split(lambda: ChatmlJson().new_parser(TOOLS, call_id), text, "")
    assert outcome(events) == {"content": "", "calls": [("do_thing", {})], "unfinished": [], "issues": [STRING_ARGS]}


SGLANG = "SGLang test_qwen25_detector.py::TestQwen25Detector::"
SGLANG_TOOLS = [Tool("get_weather", "", {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}),
    Tool("search", "", {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}})]


def sglang_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


SGLANG_CASES = [  # (test name, model output, content, completed calls, unfinished calls, issues)
    ("test_single_tool_call", sglang_call("get_weather", {"city": "Beijing"}), "",
     [("get_weather", {"city": "Beijing"})], [], []),
    # convention: SGLang strips the text before a call; kvgate sends it as the model wrote it
    ("test_normal_text_before_tool_call", "Let me check the weather. " + sglang_call("get_weather", {"city": "Tokyo"}),
     "Let me check the weather. ", [("get_weather", {"city": "Tokyo"})], [], []),
    ("test_no_tool_call", "The weather is nice today.", "The weather is nice today.", [], [], []),
    ("test_parallel_tool_calls", sglang_call("get_weather", {"city": "Beijing"}) + "\n"
     + sglang_call("search", {"query": "restaurants"}), "",
     [("get_weather", {"city": "Beijing"}), ("search", {"query": "restaurants"})], [], []),
    ("test_tool_call_with_multiple_arguments", sglang_call("get_weather", {"city": "London", "unit": "celsius"}), "",
     [("get_weather", {"city": "London", "unit": "celsius"})], [], []),
    ("test_malformed_json_is_skipped", "<tool_call>\n{not valid json}\n</tool_call>\n"
     + sglang_call("search", {"query": "books"}), "", [("search", {"query": "books"})], [], ["expected '\"name\"' in a tool call"]),
    ("test_streaming_partial_bot_token_is_buffered",
     'hello <tool_call>\n{"name": "search", "arguments": {"query": "hi"}}\n</tool_call>', "hello ",
     [("search", {"query": "hi"})], [], []),
    # "I think <tool" then the end of output: the held-back tag start is text after all
    ("test_streaming_partial_bot_token_does_not_leak_prefix", "I think <tool", "I think <tool", [], [], []),
]


@pytest.mark.parametrize("name, text, content, calls, unfinished, issues", SGLANG_CASES,
                         ids=[SGLANG + case[0] for case in SGLANG_CASES])
def test_qwen25_detector_case(name, text, content, calls, unfinished, issues):
    events = every_split(lambda: ChatmlJson().new_parser(SGLANG_TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}
