"""Replayed tokens in every protocol's usage, on the real server with the tiny Qwen3.5 of
tests/models/test_qwen3_5_server.py: a second conversation that forks from the first at an
unaligned token reports ``usage.kvgate.replayed_tokens`` > 0 in Chat Completions, Responses and
Anthropic Messages alike, and the same count in all three.

Each protocol runs its own pair of conversations (a tag right after the template's first tokens
keeps them apart), all first conversations before any fork: so every fork finds the same
snapshots before it (the prompts' ends, far past the fork, and whatever the first conversations'
short shared prefix left) and replays the same tokens, which makes the three counts comparable.
"""

from __future__ import annotations

import pytest

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_qwen3_5_server import write_checkpoint

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3_5"
LINES = [f"Line {i}: the tide comes in and the tide goes out." for i in range(12)]
TAGS = {"chat": "A:", "responses": "B:", "anthropic": "C:"}


def conversation(tag: str, forked: bool) -> list[dict]:
    tail = " Now the mountains, tall and cold." if forked else " Write a haiku about it."
    return [{"role": "user", "content": tag + " " + " ".join(LINES[:9] if forked else LINES) + tail}]


def usage_of(server, protocol: str, messages: list[dict]) -> tuple[int, dict]:
    """``(cached tokens in the protocol's own field, usage.kvgate)`` of a greedy 4-token reply."""
    if protocol == "chat":
        usage = post(server, "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 4,
                                                      "temperature": 0})["usage"]
        return usage["prompt_tokens_details"]["cached_tokens"], usage["kvgate"]
    if protocol == "responses":
        usage = post(server, "/v1/responses", {"model": MODEL, "input": messages, "max_output_tokens": 4,
                                               "temperature": 0})["usage"]
        return usage["input_tokens_details"]["cached_tokens"], usage["kvgate"]
    usage = post(server, "/v1/messages", {"model": MODEL, "messages": messages, "max_tokens": 4,
                                          "temperature": 0})["usage"]
    return usage["cache_read_input_tokens"], usage["kvgate"]


def fork_point(server, tag: str) -> int:
    first, second = (post(server, "/v1/tokenize", {"messages": conversation(tag, forked),
                                                    "add_generation_prompt": True})["tokens"]
                     for forked in (False, True))
    return next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)


def test_a_fork_reports_the_same_replayed_tokens_in_every_protocol(tmp_path):
    checkpoint = tmp_path / "model"
    write_checkpoint(checkpoint, "qwen3_5_text")
    settings = {"model": {"path": str(checkpoint), "name": MODEL, "dtype": "fp32", "max_context": 1024},
                "cache": {"chunk_tokens": 64, "ssd_enabled": False, "cached_tokens_granularity": 1,
                          "state_stride": 1024}}
    with ServerProcess(tmp_path / "server", settings=settings) as server:
        forks = {protocol: fork_point(server, tag) for protocol, tag in TAGS.items()}
        assert len(set(forks.values())) == 1 and forks["chat"] % 64, forks  # one unaligned fork point
        for protocol, tag in TAGS.items():
            usage_of(server, protocol, conversation(tag, False))
        reported = {protocol: usage_of(server, protocol, conversation(tag, True)) for protocol, tag in TAGS.items()}
    for protocol, (cached, split) in reported.items():
        assert cached == forks[protocol] == split["cached_tokens_device"], (protocol, cached, split)
        assert split["cached_tokens_ssd"] == 0
    replayed = {protocol: split["replayed_tokens"] for protocol, (_, split) in reported.items()}
    assert 0 < replayed["chat"] <= forks["chat"] and len(set(replayed.values())) == 1, replayed
