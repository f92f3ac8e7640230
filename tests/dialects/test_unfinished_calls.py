"""Every dialect: a call the output does not complete never ends with partial arguments.

The rule (kvgate.core.dialect.StreamParser): a started call ends with ToolCallEnd only when its
arguments are one complete JSON object; otherwise a ParseIssue and no ToolCallEnd. Checked on
every prefix of two rendered calls in each dialect, and on the peers' truncated cases.
"""

import pytest

from dialect_helpers import TOOLS, call_id, every_split, feed, outcome
from kvgate.core.types import ToolCall
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

DIALECTS = {"chatml_json": ChatmlJson(), "glm_xml glm45": GlmXml("glm45"), "glm_xml glm47": GlmXml("glm47"),
            "deepseek_dsml v32": DeepseekDsml("v32"), "deepseek_dsml v4": DeepseekDsml("v4"),
            "qwen3_coder_xml": Qwen3CoderXml(), "deepseek_v31 v31": DeepseekV31("v31"),
            "deepseek_v31 r1": DeepseekV31("r1"), "kimi_k2": KimiK2()}
CALLS = [ToolCall("a", "get_weather", '{"city": "Paris", "days": 3, "opts": {"unit": "C"}}'),
         ToolCall("b", "search", '{"q": "x"}', "web")]
FULL = [("get_weather", {"city": "Paris", "days": 3, "opts": {"unit": "C"}}), ("search", {"q": "x"})]


def calls_text(dialect) -> str:
    return dialect.render_calls(CALLS) or "".join(dialect.render_tool_call(c.namespace + "__" + c.name if c.namespace else c.name, c.arguments)
                   for c in CALLS)


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_no_prefix_of_two_calls_ends_a_call_with_partial_arguments(name):
    dialect = DIALECTS[name]
    text = calls_text(dialect)
    for size in range(len(text) + 1):
        got = outcome(feed(dialect.new_parser(TOOLS, call_id), [text[:size]]))
        assert got["calls"] == FULL[:len(got["calls"])], (size, text[:size])
        assert len(got["unfinished"]) <= 1 and (got["issues"] or not got["unfinished"]), (size, text[:size])
    assert outcome(feed(dialect.new_parser(TOOLS, call_id), [text]))["calls"] == FULL


D = "｜DSML｜"
HERMES = "vLLM tests/tool_parsers/test_hermes_tool_parser.py::"
GLM4 = "vLLM tests/tool_parsers/test_glm4_moe_tool_parser.py::"
DSML = "vLLM tests/tool_parsers/test_deepseekv32_tool_parser.py (build_tool_call, cut off)"
TRUNCATED = [  # (source, dialect, output, completed calls, unfinished calls)
    # the arguments object is complete: only the envelope's '}' is missing (vLLM drops it; kvgate completes it)
    (HERMES + "test_hermes_parser_non_streaming_tool_call_invalid_json", "chatml_json",
     '<tool_call>\n{"name": "get_weather", "arguments": {"flag": true}', [("get_weather", {"flag": True})], []),
    (HERMES + "test_hermes_parser_non_streaming_tool_call_invalid_json, arguments cut", "chatml_json",
     '<tool_call>\n{"name": "get_weather", "arguments": {"flag": tr', [], ["get_weather"]),
    (GLM4 + "test_malformed_tool_call_no_regex_match", "glm_xml glm45", "<tool_call>   ", [], []),
    ("glm47 call cut in a value", "glm_xml glm47", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Bei",
     [], ["get_weather"]),
    (DSML, "deepseek_dsml v32", f'<{D}function_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" '
     f'string="true">SF', [], ["get_weather"]),
    (DSML + ", between parameters", "deepseek_dsml v32", f'<{D}function_calls>\n<{D}invoke name="get_weather">\n'
     f'<{D}parameter name="city" string="true">SF</{D}parameter>\n', [], ["get_weather"]),
    ("qwen3-coder call cut in a value", "qwen3_coder_xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
     [], ["get_weather"]),
    ("deepseek v3.1 call cut in its arguments", "deepseek_v31 v31",
     '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "P', [], ["get_weather"]),
    ("kimi call without its end marker, arguments complete", "kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>"
     'functions.get_weather:0<|tool_call_argument_begin|>{"city": "P"}', [("get_weather", {"city": "P"})], []),
]


@pytest.mark.parametrize("source, name, text, calls, unfinished", TRUNCATED, ids=[c[0] for c in TRUNCATED])
def test_truncated_case(source, name, text, calls, unfinished):
    dialect = DIALECTS[name]
    got = outcome(every_split(lambda: dialect.new_parser(TOOLS, call_id), text, ""))
    assert (got["calls"], got["unfinished"]) == (calls, unfinished)
    assert got["issues"], "a truncated call is always reported"
