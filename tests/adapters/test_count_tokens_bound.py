"""``count_tokens`` and ``/v1/tokenize`` do bounded work (issue 31, finding 5): a body past
``[server] max_body_bytes`` is a 413, and a text with far more tokens than the context is a 400
after about a context's worth of tokenizing -- the count it reports is what the first windows
held, not the whole text's. A text that fits is still counted exactly."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
CONTEXT = 2048
DIGITS = "7 1 " * 20_000  # 80,000 characters: under the character cap, far over the context


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": CONTEXT}, "cache": {"ssd_enabled": False},
                "server": {"max_body_bytes": 1024 * 1024}}
    with ServerProcess(tmp_path_factory.mktemp("count-bound"), settings) as running:
        yield running


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=300)


def reported_tokens(message: str) -> int:
    return max(int(number) for number in re.findall(r"\d+", message) if int(number) != CONTEXT)


def test_count_tokens_refuses_a_text_far_over_the_context_from_its_first_windows(server, smollm2_tokenizer):
    whole = len(smollm2_tokenizer.encode(DIGITS, add_special_tokens=False).ids)
    reply = post(server, "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": DIGITS}]})
    assert reply.status_code == 400 and reply.json()["type"] == "error", reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert CONTEXT < reported_tokens(reply.json()["error"]["message"]) < whole  # not all of it was tokenized


def test_tokenize_refuses_it_too_in_its_own_shape(server, smollm2_tokenizer):
    whole = len(smollm2_tokenizer.encode(DIGITS, add_special_tokens=False).ids)
    reply = post(server, "/v1/tokenize", {"prompt": DIGITS})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and "at least" in error["message"]
    assert CONTEXT < reported_tokens(error["message"]) < whole


def test_a_body_past_max_body_bytes_is_413(server):
    reply = post(server, "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "a" * 2_000_000}]})
    assert reply.status_code == 413 and reply.json()["type"] == "error", reply.text


def test_a_long_text_that_fits_is_counted_exactly(server, smollm2_tokenizer):
    text = "                " * 600  # 9,600 characters, more than 4 per token, yet few tokens
    reply = post(server, "/v1/tokenize", {"prompt": text})
    assert reply.status_code == 200, reply.text
    assert reply.json()["tokens"] == smollm2_tokenizer.encode(text, add_special_tokens=False).ids
    assert len(text) > CONTEXT * 4
