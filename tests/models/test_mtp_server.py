"""A tiny random GLM-4.5 with an MTP layer served by a real server with ``[engine] speculative =
"mtp"``: at temperature 0 the same text and tool calls as a server without speculation, and the
draft counters on /metrics show the MTP layer drafted."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.harness import ServerProcess
from tests.models.mtp_engine_run import glm_with_mtp
from tests.models.served import post
from tests.models.test_families_server import ASK, TOOL

pytestmark = pytest.mark.slow


def answers(server) -> list:
    text = post(server, "/v1/chat/completions", {"model": "tiny-glm", "messages": ASK, "max_tokens": 40,
                                                 "temperature": 0})
    call = post(server, "/v1/chat/completions", {"model": "tiny-glm", "messages": ASK, "tools": [TOOL],
                                                 "tool_choice": "required", "max_tokens": 200, "temperature": 0})
    return [text["choices"][0]["message"], call["choices"][0]["message"]["tool_calls"][0]["function"]]


def test_a_server_speculating_with_the_mtp_layer_answers_as_one_that_does_not(tmp_path):
    directory, _, _ = glm_with_mtp(tmp_path / "glm")
    model = {"path": str(directory), "name": "tiny-glm", "dtype": "fp32", "max_context": 1024, "chat_format": "glm45"}
    results = {}
    for mode in ("", "mtp"):
        settings = {"model": model, "engine": {"speculative": mode}, "cache": {"enabled": False}}
        with ServerProcess(tmp_path / (mode or "plain"), settings=settings, state_dir=tmp_path / "state") as server:
            results[mode] = answers(server)
            metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
        drafted = re.search(r"^vllm:spec_decode_num_draft_tokens_total (\S+)$", metrics, re.M)
        assert (float(drafted.group(1)) > 0) == (mode == "mtp"), metrics
    assert results["mtp"] == results[""]
    assert results[""][0]["content"] and results[""][1]["name"] == "get_forecast"
