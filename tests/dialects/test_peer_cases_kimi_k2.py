"""vLLM's Kimi K2 tool-parser cases on kimi_k2, fed whole and split at every position.

Sources: vLLM tests/tool_parsers/test_kimi_k2_tool_parser.py (its ``_tool`` helper puts a space
between the call ID and ``<|tool_call_argument_begin|>``) and SGLang's KimiK2Detector unit tests
(no space), as an external corpus of what models write.
Where kvgate differs on purpose the case says why (the conventions are listed in
:mod:`kvgate.dialects.kimi_k2`).
"""

import json

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool
from kvgate.dialects.kimi_k2 import KimiK2

VLLM = "vLLM tests/tool_parsers/test_kimi_k2_tool_parser.py::"
SGLANG = "SGLang test_kimi_k2_detector.py::TestKimiK2Detector::"
SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
TOOL_BEGIN, TOOL_END, ARG_BEGIN = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"


def tool(name: str, *props: str) -> Tool:
    return Tool(name, "", {"type": "object", "properties": {p: {"type": "string"} for p in props}})


TOOLS = [tool("get_weather", "city", "unit"), tool("get_news", "topic"), tool("send_email", "to", "subject"),
         tool("process_html", "html"), Tool("process_data", "", {"type": "object"}), tool("test"), tool("bad", "city"),
         tool("good", "city"), tool("valid", "city"), tool("search", "q"), tool("read_file", "path"),
         tool("write_to_file", "path", "content"), tool("execute_command", "command")]


def call(tool_id: str, args: str) -> str:
    return f"{TOOL_BEGIN}{tool_id} {ARG_BEGIN}{args}{TOOL_END}"


def section(*calls: str) -> str:
    return SECTION_BEGIN + "".join(calls) + SECTION_END


NESTED = {"path": "x.md", "content": "# T\n```py\nd={'k': 1}\n```\ndone } { more"}
BEIJING = call("functions.get_weather:0", '{"city": "Beijing"}')

CASES = [  # (source, model output, content, completed calls, unfinished, issues)
    (VLLM + "TestExtractToolCalls::test_no_tools", "This is a test", "This is a test", [], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[single_tool_call]", "I'll check. " + section(BEIJING),
     "I'll check. ", [("get_weather", {"city": "Beijing"})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[parallel_tool_calls]",
     "Compare weather. " + section(BEIJING, call("functions.get_weather:1", '{"city": "Shanghai"}')),
     "Compare weather. ", [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[three_tool_calls]",
     "Multiple tasks. " + section(call("functions.get_weather:0", '{"city": "New York"}'),
                                  call("functions.get_news:1", '{"topic": "technology"}'),
                                  call("functions.send_email:2", '{"to": "user@example.com", "subject": "Daily Update"}')),
     "Multiple tasks. ", [("get_weather", {"city": "New York"}), ("get_news", {"topic": "technology"}),
                          ("send_email", {"to": "user@example.com", "subject": "Daily Update"})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[angle_brackets_in_json]",
     "Process HTML. " + section(call("functions.process_html:0", '{"html": "<div>content</div>"}')),
     "Process HTML. ", [("process_html", {"html": "<div>content</div>"})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[multiline_json]",
     "Formatted. " + section(call("functions.process_data:0", '{\n  "name": "test",\n  "value": 123\n}')),
     "Formatted. ", [("process_data", {"name": "test", "value": 123})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[no_functions_prefix]",
     "No prefix. " + section(call("get_weather:0", '{"city": "Tokyo"}')), "No prefix. ",
     [("get_weather", {"city": "Tokyo"})], [], []),
    (VLLM + "TestExtractToolCalls::test_extract_tool_calls[empty_arguments]",
     "Empty args. " + section(call("functions.test:0", "{}")), "Empty args. ", [("test", {})], [], []),
    # convention: vLLM returns the call with its broken arguments; kvgate never completes such a call
    (VLLM + "TestExtractToolCalls::test_invalid_json_still_extracted",
     "Help. " + section(call("functions.bad:0", '{"city": "Beijing"'), call("functions.good:1", '{"city": "Shanghai"}')),
     "Help. ", [("good", {"city": "Shanghai"})], ["bad"], ["tool call arguments are not a JSON object"]),
    (VLLM + "TestExtractToolCalls::test_invalid_funcall_id_skipped",
     "Help. " + section(call("functions.invalid.0", '{"city": "Beijing"}'), call("functions.valid:1", '{"city": "Shanghai"}')),
     "Help. ", [("valid", {"city": "Shanghai"})], [], ["unknown tool 'invalid.0'"]),
    # convention: a bare counter names no tool: only with one tool offered is it read (below)
    (VLLM + "TestExtractToolCalls::test_bare_counter_multiple_tools_infers_by_args",
     "Let me check. " + section(call("0", '{"city": "Tokyo", "unit": "celsius"}')), "Let me check. ",
     [], [], ["unknown tool '0'"]),
    (VLLM + "TestStreamingEdgeCases::test_noise_between_markers_suppressed",
     "Reasoning. " + SECTION_BEGIN + " spurious noise " + call("functions.test:0", '{"k": "v"} ') + SECTION_END,
     "Reasoning. ", [("test", {"k": "v"})], [], ["text outside any call in the tool calls block ignored"]),
    (VLLM + "TestStreamingEdgeCases::test_empty_tool_section", "Reasoning. " + SECTION_BEGIN + SECTION_END,
     "Reasoning. ", [], [], []),
    # convention: vLLM hands out the partial arguments; kvgate reports the call unfinished
    (VLLM + "TestStreamingEdgeCases::test_truncated_tool_call_no_end_marker",
     "I'll check. " + SECTION_BEGIN + TOOL_BEGIN + "functions.get_weather:0 " + ARG_BEGIN + '{"city": "Bei',
     "I'll check. ", [], ["get_weather"], ["unclosed tool call"]),
    (SGLANG + "test_detect_and_parse_single",
     "Let me help. " + section(f'{TOOL_BEGIN}functions.execute_command:0{ARG_BEGIN}{{"command": "ls"}}{TOOL_END}'),
     "Let me help. ", [("execute_command", {"command": "ls"})], [], []),
    (SGLANG + "test_detect_and_parse_multiple",
     section(f'{TOOL_BEGIN}functions.write_to_file:0{ARG_BEGIN}{{"path": "a.txt", "content": "hi"}}{TOOL_END}',
             f'{TOOL_BEGIN}functions.execute_command:1{ARG_BEGIN}{{"command": "ls"}}{TOOL_END}'), "",
     [("write_to_file", {"path": "a.txt", "content": "hi"}), ("execute_command", {"command": "ls"})], [], []),
    (SGLANG + "test_detect_and_parse_nested_braces_not_truncated",
     section(TOOL_BEGIN + "functions.write_to_file:0" + ARG_BEGIN + json.dumps(NESTED) + TOOL_END), "",
     [("write_to_file", NESTED)], [], []),
    (SGLANG + "test_stream_empty_args", section(f"{TOOL_BEGIN}functions.execute_command:0{ARG_BEGIN}{{}}{TOOL_END}"),
     "", [("execute_command", {})], [], []),
    # convention: vLLM drops text after the block; kvgate never drops what the model wrote
    (VLLM + "TestStreamingEdgeCases::test_content_after_tool_section",
     "Before. " + section(call("functions.get_weather:0", '{"city": "Tokyo"} ')) + " After tools.",
     "Before.  After tools.", [("get_weather", {"city": "Tokyo"})], [], []),
]


@pytest.mark.parametrize("source, text, content, calls, unfinished, issues", CASES, ids=[c[0] for c in CASES])
def test_kimi_case(source, text, content, calls, unfinished, issues):
    events = every_split(lambda: KimiK2("instruct").new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}


def test_bare_counter_with_one_tool_offered():
    """Source: test_kimi_k2_tool_parser.py::TestExtractToolCalls::test_bare_counter (one tool offered)."""
    text = "Let me check. " + section(call("0", '{"city": "Tokyo", "unit": "celsius"}'))
    events = every_split(lambda: KimiK2("instruct").new_parser(TOOLS[:1], call_id), text, "Let me check. ")
    assert outcome(events) == {"content": "Let me check. ", "calls": [("get_weather", {"city": "Tokyo", "unit": "celsius"})],
                               "unfinished": [], "issues": ["a bare call id '0' read as the only tool 'get_weather'"]}
