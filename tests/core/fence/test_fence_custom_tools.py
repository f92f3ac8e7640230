"""Custom tools' grammars in the fence (core/fence/custom.py) on SmolLM2's real tokenizer, for a
dialect that writes the input JSON-escaped (ChatML JSON) and those that write it raw between tags
(Qwen3-Coder XML, GLM XML, MiniMax M2, DeepSeek DSML), and the JSON-argument dialects of DeepSeek
V3.1 and Kimi K2: a call is accepted exactly when its input
matches the tool's grammar, and a named call cannot close before its input does."""

from __future__ import annotations

import pytest

from kvgate.adapters.custom_tools import custom_tool, input_arguments
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.types import InputFormat
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.minimax_m2 import MinimaxM2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml
from tests.adapters.codex_tools import EXEC_GRAMMAR
from tests.core.fence.conftest import greedy_run, request
from tests.core.fence.test_fence_new_dialects import calls_text, rejected

DIALECTS = [ChatmlJson(), Qwen3CoderXml(), GlmXml(), MinimaxM2(), DeepseekDsml("v32"), DeepseekV31("v31"),
            KimiK2("instruct")]
SHELL = custom_tool("shell", "Run a command.", InputFormat("regex", "ls( -[al]{1,2})?( [a-z./]+)*"))
EXEC = custom_tool("exec", "Run JavaScript.", InputFormat("lark", EXEC_GRAMMAR), namespace="functions")


def call(dialect, tool, text: str) -> str:
    return calls_text(dialect, (tool.qualified_name, input_arguments(text)))


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: f"{d.name}-{getattr(d, 'variant', '')}")
class TestCustomToolFences:
    @pytest.mark.parametrize("text", ["ls", "ls -la", "ls -a ./src docs"])
    def test_input_the_grammar_accepts(self, drive, dialect, text):
        assert drive(dialect, request("named", "shell", tools=[SHELL])).accepts(call(dialect, SHELL, text))

    @pytest.mark.parametrize("text", ["rm -rf /", "ls -lal", "ls  -l", "", 'ls "x"'])
    def test_input_the_grammar_refuses(self, drive, dialect, text):
        assert rejected(drive(dialect, request("named", "shell", tools=[SHELL])), call(dialect, SHELL, text))

    def test_codex_exec_input(self, drive, dialect):
        source = "// @exec: {\"yield_time_ms\": 100}\nconst out = await tools.exec_command({cmd: \"ls\"});\ntext(out);"
        assert drive(dialect, request("required", tools=[EXEC, SHELL])).accepts(call(dialect, EXEC, source))


def test_greedy_named_call_closes_within_the_grammar(pm, config, smol_info, smol_tokenizer):
    """Whatever the model prefers (here: always ``rm``), the call is valid and closes in budget."""
    from kvgate.core.fence import build_request_fence
    import torch

    dialect = ChatmlJson()
    fence = build_request_fence(request("named", "shell", tools=[SHELL]), dialect, smol_info, config, pm)
    rm = smol_tokenizer.encode("rm", add_special_tokens=False).ids[0]

    def logits(_):
        row = torch.zeros(smol_info.vocab_size)
        row[rm] = 5.0
        return row
    text = smol_tokenizer.decode(greedy_run(fence, logits, 64))
    assert text.startswith('<tool_call>\n{"name": "shell", "arguments": {"input": "ls')
    assert text.endswith("</tool_call>")


def test_grammar_the_backend_refuses_is_a_request_error(pm, config, smol_info):
    from kvgate.core.fence import build_request_fence

    atomic = custom_tool("shell", "", InputFormat("regex", "(?>ls)"))
    with pytest.raises(FenceRequestError, match="custom tool 'shell'"):
        build_request_fence(request("named", "shell", tools=[atomic]), ChatmlJson(), smol_info, config, pm)
