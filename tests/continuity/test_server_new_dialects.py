"""Over a real server configured with each new dialect on SmolLM2 (``[model] dialect``): a forced
call comes back complete on the Chat protocol, and turn 2 reads turn 1's prompt and output from the
prefix cache (the call was rendered back byte for byte). One server per dialect, Chat only: the
three protocols are checked for every dialect without a server in test_dialect_continuity.py."""

from __future__ import annotations

import pytest

from tests.continuity.helpers import TOOLS, ChatClient
from tests.continuity.test_server_continuity import MAX_TOOL_GAP, RESULTS, post
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

# SmolLM2 spells the DeepSeek / Kimi markers in 9-15 tokens each: room for one call
CASES = {"qwen3_coder_xml": ("", 96), "deepseek_v31": ("v31", 200), "kimi_k2": ("instruct", 160)}


@pytest.mark.parametrize("dialect", sorted(CASES))
def test_forced_call_and_turn2_from_cache(tmp_path, dialect):
    variant, max_tokens = CASES[dialect]
    # exact cached-token counts: the assertion measures reuse to the token (the default rounds to blocks)
    settings = {"model": {"dialect": dialect, "dialect_variant": variant}, "cache": {"cached_tokens_granularity": 1}}
    client = ChatClient()
    with ServerProcess(tmp_path, settings) as server:
        body1 = client.turn1(tools=TOOLS[:1], user="What is the weather in Paris?", max_tokens=max_tokens)
        body1["parallel_tool_calls"] = False
        reply1 = post(server, client, body1)
        calls = client.calls(reply1)
        assert calls and all(name == "get_weather" and "city" in args for name, args in calls), reply1
        prompt1, output1, _ = client.usage(reply1)
        reply2 = post(server, client, client.turn2(body1, reply1, RESULTS))
        prompt2, _, cached2 = client.usage(reply2)
        print(f"{dialect}: prompt1={prompt1} output1={output1} prompt2={prompt2} cached2={cached2} calls={calls}")
        assert prompt2 > prompt1 + output1
        assert 0 <= prompt1 + output1 - cached2 <= MAX_TOOL_GAP
