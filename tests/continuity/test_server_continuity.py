"""Over a real server: turn 2 of a conversation reads turn 1's prompt and output from the prefix cache.

For each protocol, turn 1 asks for a forced tool call (Chat ``required``, Anthropic ``any``,
Responses ``required``) at temperature 0; turn 2 is what the client sends next (helpers.py: the
returned call replayed + one tool result per call, tool_choice auto, 8 tokens). The cached tokens
turn 2 reports must cover turn 1's prompt and nearly all of its output: that holds only if the
adapter rendered the call back into history byte for byte (the exact check, token by token, for
every dialect is tests/continuity/test_dialect_continuity.py). A plain-text conversation (no
tools) is checked the same way. Each protocol gets its own question, so no conversation is served
from another one's cache.

Why not the whole output (gap = prompt 1 + output 1 - cached 2), measured on SmolLM2: 1 token,
always: the engine stops on the end-of-turn token, or the fence stops right after a call closes,
before the last sampled token is fed through the model. Tool turns used to fork earlier (8 tokens
when the arguments end in a string: ``"}`` ``}`` where the history has ``"`` ``}}``; 21-27 with two
tools: ``g`` ``et`` for ``get``); the fence now keeps forced text to the tokenizer's own split
(the canonical_split plugin), so every case measures 1.
"""

from __future__ import annotations

import httpx
import pytest

from tests.continuity.helpers import CLIENTS, TOOLS
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

MAX_TEXT_GAP = 2
MAX_TOOL_GAP = 2
TOOL_QUESTIONS = {"chat": "What is the weather in Paris?", "anthropic": "What is the weather in Rome?",
                  "responses": "What is the weather in Oslo?"}
TWO_TOOL_QUESTIONS = {"chat": "Weather in Lyon, please.", "anthropic": "Weather in Milan, please.",
                      "responses": "Weather in Bergen, please."}
TEXT_QUESTIONS = {"chat": "Name a colour.", "anthropic": "Name a fruit.", "responses": "Name an animal."}
RESULTS = ["sunny, 21 C", "3 concerts this week"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the gaps are measured to the token, so cached tokens are reported exactly (the default rounds to blocks)
    with ServerProcess(tmp_path_factory.mktemp("continuity"), {"cache": {"cached_tokens_granularity": 1}}) as running:
        yield running


def post(server, client, body: dict) -> dict:
    response = httpx.post(server.base_url + client.path, json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_tool_call_turn2_reads_turn1_from_cache(server, client):
    check_tool_turns(server, client, TOOLS[:1], TOOL_QUESTIONS[client.name])


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_tool_call_among_two_tools_turn2_reads_turn1_from_cache(server, client):
    check_tool_turns(server, client, TOOLS, TWO_TOOL_QUESTIONS[client.name])


def check_tool_turns(server, client, tools: list[dict], question: str) -> None:
    body1 = client.turn1(tools=tools, user=question, max_tokens=48)
    reply1 = post(server, client, body1)
    calls = client.calls(reply1)
    assert calls and all(isinstance(args, dict) and "city" in args for _, args in calls), reply1  # complete calls
    prompt1, output1, cached1 = client.usage(reply1)
    reply2 = post(server, client, client.turn2(body1, reply1, RESULTS))
    prompt2, _, cached2 = client.usage(reply2)
    gap = prompt1 + output1 - cached2
    print(f"{client.name}: prompt1={prompt1} cached1={cached1} output1={output1} prompt2={prompt2} "
          f"cached2={cached2} gap={gap} calls={calls}")
    assert prompt2 > prompt1 + output1
    assert 0 <= gap <= MAX_TOOL_GAP


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_text_turn2_reads_turn1_from_cache(server, client):
    body1 = client.turn1(tools=None, user=TEXT_QUESTIONS[client.name], max_tokens=8)
    reply1 = post(server, client, body1)
    prompt1, output1, _ = client.usage(reply1)
    reply2 = post(server, client, client.turn2(body1, reply1, ["And another one?"]))
    prompt2, _, cached2 = client.usage(reply2)
    print(f"{client.name}: prompt1={prompt1} output1={output1} prompt2={prompt2} cached2={cached2} "
          f"gap={prompt1 + output1 - cached2}")
    assert prompt2 > prompt1 + output1
    assert 0 <= prompt1 + output1 - cached2 <= MAX_TEXT_GAP
