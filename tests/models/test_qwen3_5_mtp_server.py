"""A tiny Qwen3.5 and Qwen3.5-MoE with an MTP layer served on the defaults (deterministic, cache on)
with ``[engine] speculative = "mtp"``: over a conversation (a first turn, a next turn that extends
it from the cache, a branch off its prompt at an unaligned token) the greedy tokens and their
logprobs equal a server's without speculation exactly, while /metrics shows drafts both accepted and
rejected (so the linear layers' recurrent state was rolled back on the rejected ones)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_qwen3_5_server import BRANCH, LINES, write_checkpoint
from tests.models.tiny_qwen3_5_mtp import add_qwen3_5_mtp

pytestmark = pytest.mark.slow

FIRST = [{"role": "user", "content": " ".join(LINES) + " Write a haiku about it."}]


def ask(server, messages: list) -> dict:
    """The greedy reply's text, its tokens' logprobs (two alternatives each) and usage."""
    reply = post(server, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 24,
                                                  "temperature": 0, "logprobs": True, "top_logprobs": 2})
    choice = reply["choices"][0]
    return {"content": choice["message"]["content"], "logprobs": choice["logprobs"]["content"],
            "usage": reply["usage"]}


def conversation(server) -> list[dict]:
    first = ask(server, FIRST)
    second = ask(server, FIRST + [{"role": "assistant", "content": first["content"]},
                                  {"role": "user", "content": "Shorter, please."}])
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 64, second["usage"]
    return [first, second, ask(server, BRANCH)]


def counter(metrics: str, name: str) -> float:
    return float(re.search(rf"^vllm:spec_decode_num_{name}_tokens_total (\S+)$", metrics, re.M).group(1))


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "qwen3_5_moe_text"])
def test_mtp_speculation_serves_plain_decodings_tokens_and_logprobs(tmp_path, model_type):
    model, _, _ = write_checkpoint(tmp_path / "model", model_type)
    add_qwen3_5_mtp(tmp_path / "model", model, same_token=True)  # guesses some tokens right, most wrong
    answers, counts = {}, {}
    for mode in ("", "mtp"):
        settings = {"model": {"path": str(tmp_path / "model"), "name": "tiny", "dtype": "fp32", "max_context": 1024},
                    "engine": {"speculative": mode}, "cache": {"chunk_tokens": 64}}
        with ServerProcess(tmp_path / (mode or "plain"), settings=settings, state_dir=tmp_path / (mode or "plain")) as server:
            answers[mode] = conversation(server)
            metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
        counts[mode] = (counter(metrics, "draft"), counter(metrics, "accepted"))
    for plain, spec in zip(answers[""], answers["mtp"]):
        assert spec["content"] == plain["content"] and spec["logprobs"] == plain["logprobs"]
    drafted, accepted = counts["mtp"]
    print(f"{model_type}: drafted {drafted:.0f}, accepted {accepted:.0f}")
    assert counts[""] == (0, 0) and drafted > accepted > 0
