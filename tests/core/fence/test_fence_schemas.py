"""Client schemas served end to end: the real agents' tool lists compiled within budget, and once.
(Normalising, relaxing and bounding recursion: tests/plugins/json_schema/test_fence_schemas.py.)"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from bench.fence_check import check_calls
from kvgate.core.fence import build_request_fence
from kvgate.core.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice

from tests.core.fence.conftest import greedy_run

CORPUS = Path(__file__).parent / "corpus"


def corpus_tools(name: str) -> list[Tool]:
    data = json.loads((CORPUS / name).read_text())
    return [Tool(tool.replace("/", "__"), "", schema) for tool, schema in data["tools"].items()]


def forced(tool: Tool, response=None) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=[tool],
                       tool_choice=ToolChoice("named", tool.name), response_format=response or ResponseFormat())


@pytest.fixture(scope="module")
def chatml(pm):
    from kvgate.core.plugins import collect

    return collect(pm, "register_dialects", "dialect").get("chatml_json")()


def fence_for(req, chatml, smol_info, config, pm):
    return build_request_fence(req, chatml, smol_info, config, pm)


@pytest.mark.parametrize("corpus", ["claude_code_2.1.197.json", "codex_0.171.0.json"])
def test_client_corpus_compiles_within_budget(chatml, smol_info, config, pm, corpus, smol_tokenizer):
    tools = corpus_tools(corpus)
    fence_for(forced(Tool("warm", "", {})), chatml, smol_info, config, pm)  # the one-time work
    times, relaxed = [], []
    for tool in tools:
        started = time.monotonic()
        fence = fence_for(forced(tool), chatml, smol_info, config, pm)
        times.append(time.monotonic() - started)
        relaxed += fence.relaxed
    print(f"{corpus}: {len(tools)} tools, compile median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms, relaxed {relaxed}")
    assert max(times) < config.fence.compile_budget_s and relaxed == []
    for tool in tools[:4]:  # a forced call under the fence, with a tiny budget, is schema-valid
        fence = fence_for(forced(tool), chatml, smol_info, config, pm)
        out = greedy_run(fence, lambda o: torch.zeros(smol_info.vocab_size), 48)
        verdict = check_calls(chatml, [tool], smol_tokenizer.decode(out, skip_special_tokens=False))
        assert verdict.ok and len(verdict.calls) == 1, (tool.name, verdict.problems)


def test_repeated_tool_list_compiles_once(chatml, smol_info, config, pm):
    req = ChatRequest(model="m", messages=[Message("user", "hi")], tools=corpus_tools("claude_code_2.1.197.json"))
    started = time.monotonic()
    fence_for(req, chatml, smol_info, config, pm)
    first = time.monotonic() - started
    started = time.monotonic()
    fence_for(req, chatml, smol_info, config, pm)
    second = time.monotonic() - started
    print(f"Claude Code's 24 tools: first build {first * 1000:.0f} ms, second {second * 1000:.1f} ms")
    assert second < 0.1 and second < first / 5
