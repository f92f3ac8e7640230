"""Over a real server configured with each new dialect on SmolLM2 (``[model] dialect``): a forced
call comes back complete on the Chat protocol, and turn 2 reads turn 1's prompt and output from the
prefix cache (the call was rendered back byte for byte). One server per dialect, Chat only: the
three protocols are checked for every dialect without a server in test_dialect_continuity.py.

The reuse is measured against the tokens themselves (the request recorder's): the cache must serve
every token turn 2 shares with turn 1's prompt and output. When the model spelled part of its call
with other tokens than the tokenizer's own (``<`` ``/`` for ``</``), turn 2's prompt, tokenized from
the same bytes, parts from turn 1's tokens there, and no exact cache may serve past that point: a
cold run of turn 2 gets the tokenizer's spelling too."""

from __future__ import annotations

import json

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
    record = tmp_path / "requests.jsonl"
    settings = {"model": {"dialect": dialect, "dialect_variant": variant}, "cache": {"cached_tokens_granularity": 1},
                "server": {"record_path": str(record)}}
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
    first, second = (json.loads(line) for line in record.read_text().splitlines())
    turn1, turn2 = first["prompt"] + first["output"], second["prompt"]
    shared = next((i for i, (a, b) in enumerate(zip(turn1, turn2)) if a != b), len(turn1))
    # every shared token came from the cache (the last output token was sampled, never computed)
    assert cached2 == min(shared, len(turn1) - 1) and shared >= prompt1
    tokenizer = smollm2_tokenizer()
    rendered = tokenizer.decode(turn2[prompt1:], skip_special_tokens=False)
    assert rendered.startswith(tokenizer.decode(first["output"], skip_special_tokens=False))  # byte for byte
    if shared == len(turn1):  # the model spelled its output as the tokenizer does: all of it reused
        assert 0 <= prompt1 + output1 - cached2 <= MAX_TOOL_GAP


def smollm2_tokenizer():
    from kvgate.models.embedded import embedded_gguf_path
    from kvgate.models.gguf_loader import open_gguf, read_metadata
    from kvgate.models.gguf_tokenizer import build_tokenizer

    return build_tokenizer(read_metadata(open_gguf(embedded_gguf_path())))
