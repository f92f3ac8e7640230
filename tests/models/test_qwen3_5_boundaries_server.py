"""Two conversations on one system prompt, on the real server with the tiny Qwen3.5 of
tests/models/test_qwen3_5_server.py: the engine marks where the first prompt's messages end, the
runtime keeps a recurrent-state snapshot at the end of the system prompt, and the second
conversation, which parts from the first in its user message, replays from there only the next
message's header (``\\n<|im_start|>user\\n``, a few tokens) instead of the whole system prompt: 0 in
its usage (counted in cache blocks, as cached tokens are) and exactly the header in /metrics. Its
greedy tokens and logprobs equal a cold run's (another cache salt: nothing shared).
"""

from __future__ import annotations

import pytest

from kvgate.core.cache.namespace import common_prefix
from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_qwen3_5_replay_server import metric
from tests.models.test_qwen3_5_server import write_checkpoint

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3_5"
SYSTEM = " ".join(f"Rule {i}: answer in one line and never apologise for the weather." for i in range(20))
FIRST = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Write a haiku about the tide."}]
SECOND = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three rivers, please."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("boundaries")
    write_checkpoint(root / "model", "qwen3_5_text")
    settings = {"model": {"path": str(root / "model"), "name": MODEL, "dtype": "fp32", "max_context": 1024}}
    with ServerProcess(root / "server", settings=settings) as proc:
        yield proc


def answer(server, messages, **extra) -> dict:
    return post(server, "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 8,
                                                 "temperature": 0, "logprobs": True, **extra})


def tokens_and_logprobs(reply: dict) -> list[tuple[str, float]]:
    return [(item["token"], item["logprob"]) for item in reply["choices"][0]["logprobs"]["content"]]


def test_a_second_conversation_on_the_system_prompt_replays_only_the_next_header(server):
    first = post(server, "/v1/tokenize", {"messages": FIRST, "add_generation_prompt": True})["tokens"]
    second = post(server, "/v1/tokenize", {"messages": SECOND, "add_generation_prompt": True})["tokens"]
    system = post(server, "/v1/tokenize", {"messages": FIRST[:1], "add_generation_prompt": False})["tokens"]
    system_end = len(system) - 1  # after its <|im_end|>, before the "\n"
    fork = common_prefix(first, second)
    assert system_end > 300 and system_end % 64 and 0 < fork - system_end < 8, (system_end, fork)
    answer(server, FIRST)
    before = metric(server, "kvgate_cache_replayed_tokens_total", tier="device")
    warm = answer(server, SECOND)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= fork // 16 * 16, warm["usage"]
    assert warm["usage"]["kvgate"]["replayed_tokens"] == 0, warm["usage"]
    assert metric(server, "kvgate_cache_replayed_tokens_total", tier="device") - before == fork - system_end
    cold = answer(server, SECOND, cache_salt="cold")
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, cold["usage"]
    assert tokens_and_logprobs(warm) == tokens_and_logprobs(cold) and len(tokens_and_logprobs(cold)) > 3
