"""A real server with ``[plugins] disabled = ["json_schema"]``: no schema preparer is registered, so a
keyword the grammar backend cannot enforce is the backend's own 400 instead of a relaxation (the
default server relaxes it: tests/core/fence/test_fence_schemas_server.py), and schemas the backend
compiles are served as sent."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
UNSUPPORTED = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}, "required": ["a"]}
PLAIN = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("no_json_schema"), {"plugins": {"disabled": ["json_schema"]}}) as proc:
        yield proc


def chat(server, schema) -> httpx.Response:
    body = {"model": "smollm2", "max_tokens": 24, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
            "tool_choice": "required"}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)


def test_an_unsupported_keyword_is_the_backends_400(server):
    reply = chat(server, UNSUPPORTED)
    assert reply.status_code == 400, reply.text
    assert "uniqueItems" in reply.json()["error"]["message"] and "relaxed_schema" not in reply.text


def test_a_schema_the_backend_compiles_is_served_unrelaxed(server):
    reply = chat(server, PLAIN)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert "relaxed_schema" not in reply.json().get("kvgate", {})
