"""server.api_key on the Anthropic routes: both header forms work, failures are Anthropic 401s."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

KEY = "sk-test-anthropic"
COUNT_BODY = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
PATHS = ["/v1/messages", "/messages", "/v1/messages/count_tokens?beta=true", "/messages/count_tokens"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"server": {"api_key": KEY}, "model": {"max_context": 512, "aliases": ["claude-*"]}}
    with ServerProcess(tmp_path_factory.mktemp("anthropic_auth"), settings=settings) as proc:
        yield proc


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}])
def test_missing_or_wrong_key_is_anthropic_401(server, path, headers):
    response = httpx.post(server.base_url + path, json={**COUNT_BODY, "max_tokens": 2}, headers=headers, timeout=30)
    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("headers", [{"x-api-key": KEY}, {"authorization": f"Bearer {KEY}"}])
def test_either_header_form_is_accepted(server, headers):
    response = httpx.post(server.base_url + "/v1/messages/count_tokens", json=COUNT_BODY, headers=headers, timeout=30)
    assert response.status_code == 200 and response.json()["input_tokens"] > 0


def test_sdk_with_api_key_and_auth_token(server):
    by_key = anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0)
    assert by_key.messages.create(max_tokens=2, **COUNT_BODY).usage.output_tokens > 0
    by_token = anthropic.Anthropic(base_url=server.base_url, auth_token=KEY, api_key=None, max_retries=0)
    assert by_token.messages.count_tokens(**COUNT_BODY).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.base_url, api_key="nope", max_retries=0).messages.count_tokens(**COUNT_BODY)


def test_probe_needs_no_key(server):
    assert httpx.head(server.base_url + "/", timeout=10).status_code == 200
