"""vLLM's Qwen3-Coder tool-parser cases on qwen3_coder_xml, fed whole and split at every position.

Source: vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py (the coder and engine parsers), as an
external corpus of what models write. Where kvgate differs on purpose the case says why (the
conventions are listed in :mod:`kvgate.dialects.qwen3_coder_xml`).
"""

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

VLLM = "vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py::"
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
    (VLLM + "test_no_double_serialization_string_args", call("greet", param("message", "hello world", False)), "",
     [("greet", {"message": "hello world"})], [], []),
]


@pytest.mark.parametrize("source, text, content, calls, unfinished, issues", CASES, ids=[c[0] for c in CASES])
def test_qwen3_coder_case(source, text, content, calls, unfinished, issues):
    events = every_split(lambda: Qwen3CoderXml().new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": unfinished, "issues": issues}
