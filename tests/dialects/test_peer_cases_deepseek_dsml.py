"""vLLM's DeepSeek V3.2 DSML tool-parser cases on deepseek_dsml, fed whole and split at every
position, in both variants (V4 writes the same markup in a ``tool_calls`` block).

Sources: vLLM tests/tool_parsers/test_deepseekv32_tool_parser.py::TestExtractToolCalls and SGLang's
TestDeepSeekV32Detector (test_function_call_parser.py), as an external corpus of what models
write; plus an invoke whose body is a JSON object (the issue "More tool dialects"). The conventions where kvgate differs are listed in :mod:`kvgate.dialects.deepseek_dsml`.
"""

import pytest

from dialect_helpers import call_id, every_split, outcome
from kvgate.core.types import Tool
from kvgate.dialects.deepseek_dsml import DeepseekDsml

SOURCE = "vLLM tests/tool_parsers/test_deepseekv32_tool_parser.py::TestExtractToolCalls::"
D = "｜DSML｜"
FC_START, FC_END = f"<{D}function_calls>", f"</{D}function_calls>"
INV_START, INV_END = f'<{D}invoke name="', f"</{D}invoke>"
PARAM_START, PARAM_END = f'<{D}parameter name="', f"</{D}parameter>"
WAIT = {"anyOf": [{"type": "object", "properties": {"type": {"const": "until"}, "date": {"type": "string"}}},
                  {"type": "object", "properties": {"type": {"const": "for"}, "minutes": {"type": "number"}}}]}
PATCHES = {"oneOf": [{"type": "array", "items": {"type": "object"}}, {"type": "null"}]}


def tool(name: str, **props) -> Tool:
    return Tool(name, "", {"type": "object", "properties": {
        k: (v if isinstance(v, dict) else {"type": v}) for k, v in props.items()}})


TOOLS = [tool("get_time"), tool("get_weather", location="string", date="string"),
         tool("toggle", enabled="boolean", count="integer"), tool("set_value", value="integer"),
         tool("schedule", wait=WAIT, patches=PATCHES),
         tool("sleep", wait={"anyOf": [{"type": "object"}, {"type": "null"}]}), tool("locate", location="string"),
         tool("label", tags="array", meta="object"), tool("scale", ratio="number")]


def invoke(name: str, params: list[tuple], body: str = "") -> str:
    """One invoke as vLLM's build_tool_call writes it; a param is (key, value, string flag)."""
    tags = "".join(f'{PARAM_START}{k}" string="{flag}">{v}{PARAM_END}' for k, v, flag in params)
    return INV_START + name + '">\n' + tags + body + "\n" + INV_END


def block(*invokes: str) -> str:
    return FC_START + "\n" + "\n".join(invokes) + "\n" + FC_END


WEATHER = [("location", "SF", "true"), ("date", "2024-01-16", "true")]
FLAGGED = "a value flagged as a string read as the parameter's type"
CASES = [  # (test name, model output, content, completed calls, issues)
    ("test_no_tool_call", "just some text", "just some text", [], []),
    ("test_single_tool_no_params", block(invoke("get_time", [])), "", [("get_time", {})], []),
    ("test_single_tool_with_params", block(invoke("get_weather", WEATHER)), "",
     [("get_weather", {"location": "SF", "date": "2024-01-16"})], []),
    ("test_content_before_tool_call", "Sure, let me check! " + block(invoke("get_weather", WEATHER)),
     "Sure, let me check! ", [("get_weather", {"location": "SF", "date": "2024-01-16"})], []),
    ("test_multiple_tools", block(invoke("get_weather", WEATHER[:1]), invoke("get_weather", [("location", "NYC", "true")])),
     "", [("get_weather", {"location": "SF"}), ("get_weather", {"location": "NYC"})], []),
    ("test_type_conversion_in_non_streaming",
     block(invoke("toggle", [("enabled", "true", "false"), ("count", "42", "false")])), "",
     [("toggle", {"enabled": True, "count": 42})], []),
    ("test_string_attr_true_coerced_by_schema", block(invoke("set_value", [("value", "42", "true")])), "",
     [("set_value", {"value": 42})], [FLAGGED]),
    ("test_string_attr_false_allows_schema_conversion", block(invoke("set_value", [("value", "42", "false")])), "",
     [("set_value", {"value": 42})], []),
    ("test_composed_schema_converts_object_and_array_params", block(invoke("schedule", [
        ("wait", '{"type":"for","minutes":2880}', "false"),
        ("patches", '[{"op":"replace","path":"/schedule","value":"quiet"}]', "false")])), "",
     [("schedule", {"wait": {"type": "for", "minutes": 2880},
                    "patches": [{"op": "replace", "path": "/schedule", "value": "quiet"}]})], []),
    ("test_string_attr_true_coerced_by_composed_schema",
     block(invoke("sleep", [("wait", '{"type":"for","minutes":2880}', "true")])), "",
     [("sleep", {"wait": {"type": "for", "minutes": 2880}})], [FLAGGED]),
    ("test_arguments_wrapper_repaired", block(invoke("locate", [("arguments", '{"location":"Beijing"}', "false")])),
     "", [("locate", {"location": "Beijing"})], ["arguments wrapped in a parameter named 'arguments' read as the arguments"]),
    ("test_input_wrapper_repaired", block(invoke("locate", [("input", '{"location":"Beijing"}', "true")])),
     "", [("locate", {"location": "Beijing"})], ["arguments wrapped in a parameter named 'input' read as the arguments"]),
    ("test_object_and_array_params", block(invoke("label", [("tags", '["a", "b"]', "false"), ("meta", '{"k": 1}', "false")])),
     "", [("label", {"tags": ["a", "b"], "meta": {"k": 1}})], []),
    ("test_number_param", block(invoke("scale", [("ratio", "3.14", "false")])), "", [("scale", {"ratio": 3.14})], []),
    ("issue: a JSON object as the invoke's body", block(invoke("get_weather", [], '{"location": "SF"}')), "",
     [("get_weather", {"location": "SF"})], ["arguments written as a JSON object in the invoke's body"]),
    # the schema wins over the flag both ways: a string parameter flagged JSON stays the text written
    ("issue: string=\"false\" on a string parameter", block(invoke("get_weather", [("date", "20240116", "false")])),
     "", [("get_weather", {"date": "20240116"})], ["a value flagged as JSON read as a string, the parameter's type"]),
    # a flagged string that does not read as the parameter's type stays the string the model flagged
    ("issue: string=\"true\" text that is no integer", block(invoke("set_value", [("value", "many", "true")])), "",
     [("set_value", {"value": "many"})], []),
]


@pytest.mark.parametrize("variant", ["v32", "v4"])
@pytest.mark.parametrize("name, text, content, calls, issues", CASES, ids=[SOURCE + c[0] for c in CASES])
def test_dsml_case(variant, name, text, content, calls, issues):
    if variant == "v4":
        text = text.replace("function_calls>", "tool_calls>")
    events = every_split(lambda: DeepseekDsml(variant).new_parser(TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": [], "issues": issues}


def test_a_wrapper_among_other_parameters_is_one_argument():
    """The ``arguments`` key is held back only until the next tag: followed by another parameter it
    is an argument like any other (the call reports nothing)."""
    text = block(invoke("locate", [("arguments", '{"a": 1}', "false"), ("location", "x", "true")]))
    events = every_split(lambda: DeepseekDsml().new_parser(TOOLS, call_id), text, "")
    assert outcome(events)["calls"] == [("locate", {"arguments": {"a": 1}, "location": "x"})]
    assert outcome(events)["issues"] == []


SGLANG = "SGLang test_function_call_parser.py::TestDeepSeekV32Detector::"
SGLANG_TOOLS = [Tool("search", "", {"type": "object", "required": ["query"], "properties": {
    "query": {"type": "string"}, "topn": {"type": "integer", "default": 10},
    "source": {"type": "string", "enum": ["web", "news"], "default": "web"}}}),
    Tool("get_favorite_tourist_spot", "", {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "another_city": {"type": "string"}, "topn": {"type": "integer"},
        "obj": {"type": "object"}}}),
    Tool("get_date", "", {"type": "object", "properties": {}})]
INTRO = "I'll help you with information about San Francisco and get its favorite tourist spot for you."
SPOT = {"city": "San Francisco"}
WEBNAV = {"query": "WebNav benchmark", "topn": 10, "source": "web"}


def sglang_param(key: str, value: str, string: bool) -> str:
    return f'{PARAM_START}{key}" string="{"true" if string else "false"}">{value}{PARAM_END}'


SGLANG_CASES = [  # (test name, model output, content, completed calls, issues)
    # SGLang's model outputs indent the markup freely: whitespace between tags is lenient; the text
    # around the block is sent with its whitespace, as written (SGLang checks only that it contains the intro)
    ("test_detect_and_parse_xml_format", INTRO + "\n\n\n        " + FC_START + "\n\n            "
     + INV_START + 'get_favorite_tourist_spot">\n\n                ' + sglang_param("city", "San Francisco", True)
     + "\n\n            " + INV_END + "\n\n            " + INV_START + 'search">\n                '
     + sglang_param("query", "WebNav benchmark", True) + "\n                " + sglang_param("topn", "10", False)
     + "\n                " + sglang_param("source", "web", True) + "\n            " + INV_END + "\n        " + FC_END
     + "\n        ", INTRO + "\n\n\n        \n        ", [("get_favorite_tourist_spot", SPOT), ("search", WEBNAV)], []),
    ("test_detect_and_parse_json_format", INTRO + "\n\n        " + FC_START + "\n            " + INV_START
     + 'get_favorite_tourist_spot">\n            {\n                "city": "San Francisco"\n            }\n        '
     + INV_END + "\n            " + INV_START + 'search">\n            {\n                "query": "WebNav benchmark",'
     '\n                "topn": 10,\n                "source": "web"\n            }\n        ' + INV_END + "\n        "
     + FC_END + "\n        ", INTRO + "\n\n        \n        ", [("get_favorite_tourist_spot", SPOT), ("search", WEBNAV)],
     ["arguments written as a JSON object in the invoke's body"] * 2),
    ("test_streaming_xml_format", FC_START + "\n            " + INV_START + 'get_favorite_tourist_spot">\n                '
     + sglang_param("city", "San Francisco", True) + "\n                " + sglang_param("another_city", "London", True)
     + "\n                " + sglang_param("topn", "10", False) + "\n                "
     + sglang_param("obj", '{"name": "John", "age": 30}', False) + "\n            " + INV_END + "\n        " + FC_END,
     "", [("get_favorite_tourist_spot", {"city": "San Francisco", "another_city": "London", "topn": 10,
                                         "obj": {"name": "John", "age": 30}})], []),
    ("test_detect_and_parse_no_parameters", "Let me get the current date for you.\n\n" + FC_START + "\n" + INV_START
     + 'get_date">\n' + INV_END + "\n" + FC_END, "Let me get the current date for you.", [("get_date", {})], []),
    ("test_streaming_no_parameters_with_whitespace", FC_START + "\n" + INV_START + 'get_date">\n\n' + INV_END + "\n"
     + FC_END, "", [("get_date", {})], []),
]


@pytest.mark.parametrize("name, text, content, calls, issues", SGLANG_CASES, ids=[SGLANG + c[0] for c in SGLANG_CASES])
def test_deepseek_v32_detector_case(name, text, content, calls, issues):
    events = every_split(lambda: DeepseekDsml("v32").new_parser(SGLANG_TOOLS, call_id), text, content)
    assert outcome(events) == {"content": content, "calls": calls, "unfinished": [], "issues": issues}
