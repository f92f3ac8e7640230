"""A custom tool's call with and without n-gram speculation on the real engine and model: the same
tokens under greedy sampling, and an input its grammar (Codex's ``exec`` Lark grammar, and a regex
the prompt invites copying, so drafts are proposed and accepted) accepts either way."""

from __future__ import annotations

import json
import re

import pytest

from kvgate.core.config import Config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.adapters.custom_tools import custom_tool
from kvgate.core.fence import tokenizer_info
from kvgate.plugins.lark_grammar.to_regex import lark_to_regex
from kvgate.core.types import ChatRequest, InputFormat, Message, SamplingParams, ToolChoice
from kvgate.dialects.chatml_json import ChatmlJson
from tests.adapters.codex_tools import EXEC_GRAMMAR
from tests.core.fence.engine_run import generate

pytestmark = pytest.mark.slow
SHELL_REGEX = "ls( -[a-z]+)?( [a-z./]+)*"
TOOLS = {"shell": (custom_tool("shell", "Run a command.", InputFormat("regex", SHELL_REGEX)), SHELL_REGEX),
         "exec": (custom_tool("exec", "Run JavaScript.", InputFormat("lark", EXEC_GRAMMAR), "functions"),
                  lark_to_regex(EXEC_GRAMMAR))}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_custom_call_is_the_same_and_valid_with_speculation(smollm2_runtime, engines, pm, accepted_drafts, name):
    runtime, config = smollm2_runtime, bind_plugin_sections(Config(), pm)
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    tool, regex = TOOLS[name]
    request = ChatRequest(model="m", messages=[Message("user", "Run exactly: ls -la src docs src docs")],
                          tools=[tool], tool_choice=ToolChoice("named", tool.qualified_name),
                          sampling=SamplingParams(temperature=0.0))
    plain, spec = engines
    without, done, _ = generate(plain, runtime, ChatmlJson(), request, info, config, pm, 40)
    with_spec, _, _ = generate(spec, runtime, ChatmlJson(), request, info, config, pm, 40)
    assert with_spec == without, (runtime.tokenizer.decode(without), runtime.tokenizer.decode(with_spec))
    text = runtime.tokenizer.decode(without)
    body = json.loads(text.split("<tool_call>\n", 1)[1].split("\n</tool_call>")[0])
    assert body["name"] == tool.qualified_name and re.fullmatch(regex, body["arguments"]["input"]), text
    if name == "shell":
        assert sum(accepted_drafts) > 0  # drafts were really accepted, so the comparison means something
