"""The embedded model's agent-fit defaults on the real server: a request asking for far more output
than SmolLM2 can use (Claude Code's 64,000, Codex's none) runs within the model's clamp, labelled as
cut where the clamp cut it, sampled with the model's defaults where it sent none; an operator's
``[model] max_output_tokens`` and ``[sampling]`` override them."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from kvgate.models.embedded import EMBEDDED_MAX_OUTPUT_TOKENS, EMBEDDED_SAMPLING
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
ANTHROPIC = {"anthropic-version": "2023-06-01"}
LIST = "List twenty animals, one per line."
OPERATOR_CAP = 12


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("embedded-defaults")) as proc:
        yield proc


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, headers=ANTHROPIC, timeout=600)
    assert reply.status_code == 200, reply.text
    return reply.json()


def claude_like(prompt: str) -> dict:
    return {"model": "claude-opus-4-8", "max_tokens": 64000, "messages": [{"role": "user", "content": prompt}]}


def codex_like(prompt: str) -> dict:
    return {"model": "gpt-6.2-sol", "input": prompt, "store": False}


def test_agent_requests_run_within_the_clamp_with_the_model_sampling(server):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # decoded side by side, in one batch
        message = pool.submit(post, server, "/v1/messages", claude_like("Say hello"))
        response = pool.submit(post, server, "/v1/responses", codex_like("Say hello"))
        message, response = message.result(), response.result()
    used = message["usage"]["output_tokens"]
    assert 0 < used <= EMBEDDED_MAX_OUTPUT_TOKENS
    assert message["stop_reason"] == ("max_tokens" if used == EMBEDDED_MAX_OUTPUT_TOKENS else "end_turn")
    assert response["max_output_tokens"] == EMBEDDED_MAX_OUTPUT_TOKENS  # the cap it ran under
    assert (response["temperature"], response["top_p"]) == (EMBEDDED_SAMPLING["temperature"],
                                                            EMBEDDED_SAMPLING["top_p"])
    used = response["usage"]["output_tokens"]
    assert 0 < used <= EMBEDDED_MAX_OUTPUT_TOKENS
    assert response["status"] == ("incomplete" if used == EMBEDDED_MAX_OUTPUT_TOKENS else "completed")
    log = server.log()
    assert f"output clamp: no reply runs past {EMBEDDED_MAX_OUTPUT_TOKENS} tokens (the model's own)" in log
    sampling = ", ".join(f"{name}={value:g}" for name, value in EMBEDDED_SAMPLING.items())
    assert f"sampling defaults for requests that leave them out: {sampling}" in log


def test_a_request_below_the_clamp_and_its_own_temperature_are_kept(server):
    response = post(server, "/v1/responses", {**codex_like(LIST), "max_output_tokens": 5, "temperature": 1.0})
    assert (response["max_output_tokens"], response["temperature"]) == (5, 1.0)
    assert response["usage"]["output_tokens"] == 5 and response["status"] == "incomplete"


def test_the_operator_config_overrides_the_model_defaults(tmp_path):
    settings = {"model": {"max_output_tokens": OPERATOR_CAP}, "sampling": {"temperature": 0.7}}
    with ServerProcess(tmp_path, settings) as operated:
        message = post(operated, "/v1/messages", claude_like(LIST))
        response = post(operated, "/v1/responses", codex_like(LIST))
        chat = post(operated, "/v1/chat/completions", {"messages": [{"role": "user", "content": LIST}]})
        assert f"no reply runs past {OPERATOR_CAP} tokens ([model] max_output_tokens)" in operated.log()
    assert (message["stop_reason"], message["usage"]["output_tokens"]) == ("max_tokens", OPERATOR_CAP)
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert (response["max_output_tokens"], response["usage"]["output_tokens"]) == (OPERATOR_CAP, OPERATOR_CAP)
    assert (response["temperature"], response["top_p"]) == (0.7, EMBEDDED_SAMPLING["top_p"])
    assert (chat["choices"][0]["finish_reason"], chat["usage"]["completion_tokens"]) == ("length", OPERATOR_CAP)
