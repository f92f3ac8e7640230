"""vLLM's Qwen3-Coder tool-parser cases on qwen3_coder_xml, fed whole and split at every position.

Sources: vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py (the coder and engine parsers) and
SGLang's Qwen3CoderDetector unit tests (test_qwen3_coder_detector.py and the malformed-parameter-end
test), as an external corpus of what models write. Where kvgate differs on purpose the case says why (the
conventions are listed in :mod:`kvgate.dialects.qwen3_coder_xml`).
"""

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

VLLM = "vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py::"
SGLANG = "SGLang test_qwen3_coder_detector.py::TestQwen3CoderDetector::"
SGLANG_END = "SGLang TestQwen3CoderDetectorMalformedParameterEnd::"
NULLABLE = lambda kind, **extra: {"anyOf": [{"type": kind, **extra}, {"type": "null"}]}  # noqa: E731

TOOLS = [
    Tool("get_current_weather", "", {"type": "object", "required": ["city", "state"], "properties": {
        "city": {"type": "string"}, "state": {"type": "string"},
        "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}}}),
    Tool("calculate_area", "", {"type": "object", "properties": {
        "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}),
    Tool("test_types", "", {"type": "object", "properties": {
        "int_param": {"type": "integer"}, "float_param": {"type": "float"}, "bool_param": {"type": "boolean"},
        "str_param": {"type": "string"}, "obj_param": {"type": "object"}}}),
    Tool("test_anyof", "", {"type": "object", "properties": {
        "anyof_int": {**NULLABLE("integer"), "default": 5}, "anyof_str": NULLABLE("string"),
        "anyof_array": NULLABLE("array", items={"type": "string"}), "anyof_obj": NULLABLE("object"),
        "type_as_array": {"type": ["integer", "null"]},
        "multi_non_null": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}}}),
    Tool("search_web", "", {"type": "object", "properties": {
        "query": NULLABLE("string"), "count": {**NULLABLE("integer"), "default": 5}, "verbose": NULLABLE("boolean")}}),
    Tool("update_record", "", {"type": "object", "properties": {"data": NULLABLE("object")}}),
    Tool("greet", "", {"type": "object", "properties": {"message": {"type": "string"}}}),
    Tool("execute_bash", "", {"type": "object", "properties": {"command": {"type": "string"}}}),
    Tool("get_weather", "", {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}),
]


def param(key: str, value: str, newlines: bool = True) -> str:
    return f"<parameter={key}>\n{value}\n</parameter>\n" if newlines else f"<parameter={key}>{value}</parameter>\n"


def call(name: str, *params: str) -> str:
    return f"<tool_call>\n<function={name}>\n{''.join(params)}</function>\n</tool_call>"


DALLAS = call("get_current_weather", param("city", "Dallas"), param("state", "TX"), param("unit", "fahrenheit"))
DALLAS_ARGS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
CIRCLE = call("calculate_area", param("shape", "circle"), param("dimensions", '{"radius": 15.5}'),
              param("precision", "3"))
CIRCLE_ARGS = {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3}
NOT_CLOSED = "parameter 'city' was not closed before the next parameter"

CASES = [  # (source, model output, content, completed calls, unfinished, issues)
    (VLLM + "test_extract_tool_calls_no_tools", "This is a test response without any tool calls",
     "This is a test response without any tool calls", [], [], []),
    (VLLM + "test_extract_tool_calls[single_tool]", DALLAS, "", [("get_current_weather", DALLAS_ARGS)], [], []),
    (VLLM + "test_extract_tool_calls[single_tool_with_content]", "Sure! Let me check the weather for you." + DALLAS,
     "Sure! Let me check the weather for you.", [("get_current_weather", DALLAS_ARGS)], [], []),
    (VLLM + "test_extract_tool_calls[single_tool_multiline_param]",
     call("calculate_area", param("shape", "rectangle"), param("dimensions", '{"width": 10, \n "height": 20}'),
          param("precision", "2")), "",
     [("calculate_area", {"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})], [], []),
    (VLLM + "test_extract_tool_calls[parallel_tools]",
     DALLAS + "\n" + call("get_current_weather", param("city", "Orlando"), param("state", "FL"),
                          param("unit", "celsius")), "",
     [("get_current_weather", DALLAS_ARGS),
      ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "celsius"})], [], []),
    (VLLM + "test_extract_tool_calls[tool_with_typed_params]", "Let me calculate that area for you." + CIRCLE,
     "Let me calculate that area for you.", [("calculate_area", CIRCLE_ARGS)], [], []),
    (VLLM + "test_extract_tool_calls_type_conversion",  # "float" is no JSON Schema type: the value reads as JSON
     call("test_types", param("int_param", "42"), param("float_param", "3.14"), param("bool_param", "true"),
          param("str_param", "hello world"), param("obj_param", '{"key": "value"}')), "",
     [("test_types", {"int_param": 42, "float_param": 3.14, "bool_param": True, "str_param": "hello world",
                      "obj_param": {"key": "value"}})], [], []),
    (VLLM + "test_extract_tool_calls_anyof_type_conversion",
     call("test_anyof", param("anyof_int", "5"), param("anyof_str", "hello"), param("anyof_array", '["a", "b", "c"]'),
          param("anyof_obj", '{"key": "value"}'), param("type_as_array", "42"), param("multi_non_null", "some text")),
     "", [("test_anyof", {"anyof_int": 5, "anyof_str": "hello", "anyof_array": ["a", "b", "c"],
                          "anyof_obj": {"key": "value"}, "type_as_array": 42, "multi_non_null": "some text"})], [], []),
    (VLLM + "test_extract_tool_calls_anyof_type_conversion_streaming",
     call("search_web", param("query", "vllm tool parser"), param("count", "10"), param("verbose", "true")), "",
     [("search_web", {"query": "vllm tool parser", "count": 10, "verbose": True})], [], []),
    (VLLM + "test_extract_tool_calls_missing_closing_parameter_tag",
     "Let me check the weather for you:\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n"
     + param("state", "TX") + param("unit", "fahrenheit") + "</function>\n</tool_call>",
     "Let me check the weather for you:", [("get_current_weather", DALLAS_ARGS)], [], [NOT_CLOSED]),
    ("kvgate: the last value unclosed before </function>",
     "<tool_call>\n<function=greet>\n<parameter=message>\nhi\n</function>\n</tool_call>", "",
     [("greet", {"message": "hi"})], [], ["parameter 'message' was not closed before the end of the call"]),
    # convention: a header without its '>' runs to the next '>': no such tool, reported, the call skipped
    (VLLM + "test_none_tool_calls_filtered",
     "<tool_call>\n<function=bad_func_no_gt\n</function>\n</tool_call>\n"
     + call("get_current_weather", param("city", "Dallas", False), param("state", "TX", False)), "",
     [("get_current_weather", {"city": "Dallas", "state": "TX"})], [], ["unknown tool 'bad_func_no_gt\\n</function'"]),
    (VLLM + "test_anyof_parameter_not_double_encoded",
     call("update_record", param("data", '{"key": "value", "count": 42}', False)), "",
     [("update_record", {"data": {"key": "value", "count": 42}})], [], []),
    (VLLM + "test_streaming_multi_param_single_chunk", DALLAS, "", [("get_current_weather", DALLAS_ARGS)], [], []),
    # convention: the newline before <tool_call> is syntax (the template writes the text stripped, then the call)
    (SGLANG + "test_detect_and_parse_single_call",
     "thinking done\n" + call("execute_bash", param("command", "pwd && ls", False)), "thinking done",
     [("execute_bash", {"command": "pwd && ls"})], [], []),
    (SGLANG + "test_detect_and_parse_two_calls",
     call("execute_bash", param("command", "ls", False)) + "\n" + call("execute_bash", param("command", "pwd", False)),
     "", [("execute_bash", {"command": "ls"}), ("execute_bash", {"command": "pwd"})], [], []),
    (SGLANG + "test_detect_and_parse_malformed_skipped",
     "<tool_call>\nthis is not valid xml\n</tool_call>\n" + call("execute_bash", param("command", "ls", False)), "",
     [("execute_bash", {"command": "ls"})], [], ["expected <function=NAME> in a tool call"]),
    (SGLANG + "test_detect_and_parse_unknown_function", call("mystery", param("x", "1", False)), "", [], [],
     ["unknown tool 'mystery'"]),
    # convention: values are raw text (the template writes them unescaped): entities stay as written
    (SGLANG + "test_safe_val_html_unescape", call("execute_bash", param("command", "echo &quot;hi&quot; &amp;&amp; ls", False)),
     "", [("execute_bash", {"command": "echo &quot;hi&quot; &amp;&amp; ls"})], [], []),
    (SGLANG_END + "test_well_formed_value_unchanged",
     call("get_weather", param("city", "Shanghai"), param("days", "3")), "",
     [("get_weather", {"city": "Shanghai", "days": 3})], [], []),
    (SGLANG_END + "test_angle_brackets_inside_value_are_kept",
     call("get_weather", param("city", "a <b>tag</b> city"), param("days", "3")), "",
     [("get_weather", {"city": "a <b>tag</b> city", "days": 3})], [], []),
    # convention: a misspelled close tag is text of the value (the next tag still ends it, reported);
    # SGLang strips it. Under the fence the tag cannot drift.
    (SGLANG_END + "test_non_streaming_strips_drifted_end_marker",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nShanghai\n</parameter1>\n" + param("days", "3")
     + "</function>\n</tool_call>", "",
     [("get_weather", {"city": "Shanghai\n</parameter1>", "days": 3})], [],
     ["parameter 'city' was not closed before the next parameter"]),
    (VLLM + "test_no_double_serialization_string_args", call("greet", param("message", "hello world", False)), "",
     [("greet", {"message": "hello world"})], [], []),
]


@pytest.mark.parametrize("source, text, content, calls, unfinished, issues", CASES, ids=[c[0] for c in CASES])
def test_qwen3_coder_case(source, text, content, calls, unfinished, issues):
    events = every_split(lambda: Qwen3CoderXml().new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}
