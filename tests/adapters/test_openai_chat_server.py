"""The Chat Completions adapter on a real server (embedded SmolLM2) through the official SDK and raw HTTP."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

MAX_CONTEXT = 512
HELLO = [{"role": "user", "content": "Write a sentence about cats."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": MAX_CONTEXT, "aliases": ["gpt-*", "claude-test"]}}
    with ServerProcess(tmp_path_factory.mktemp("openai_chat"), settings=settings) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def raw_chunks(server, body: dict, path: str = "/v1/chat/completions") -> list:
    with httpx.stream("POST", server.base_url + path, json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def greedy(client, max_tokens=16, **kwargs):
    return client.chat.completions.create(model="smollm2", messages=HELLO, max_tokens=max_tokens,
                                          temperature=0, **kwargs)


def test_non_streaming_answer(client):
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=HELLO, max_tokens=8)
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert answer.model == "gpt-4o-mini"
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = answer.usage
    assert 0 < usage.completion_tokens <= 8 and usage.prompt_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens
    assert set(usage.model_extra["kvgate"]) == {"cached_tokens_device", "cached_tokens_ssd"}
    assert answer.model_extra["kvgate"]["parse_issues"] == []


def test_streaming_matches_non_streaming_and_follows_chunk_rules(server, client):
    expected = greedy(client)
    body = {"model": "smollm2", "messages": HELLO, "max_tokens": 16, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks = raw_chunks(server, body)
    assert len({(c["id"], c["created"]) for c in chunks}) == 1
    with_choices = [c for c in chunks if c["choices"]]
    assert [c["choices"][0]["delta"].get("role") for c in with_choices].count("assistant") == 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in with_choices)
    assert text == expected.choices[0].message.content
    assert with_choices[-1]["choices"][0]["finish_reason"] == expected.choices[0].finish_reason
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == expected.usage.completion_tokens


def test_stream_without_include_usage_sends_no_usage(server):
    body = {"messages": HELLO, "max_tokens": 4, "stream": True}
    assert all(c["choices"] and not c.get("usage") for c in raw_chunks(server, body, "/chat/completions"))


def test_stop_sequence_cuts_text_and_sdk_stream_helper_completes(client):
    full = greedy(client).choices[0].message.content
    words = full.split()
    stop_word = next(w for w in words[2:] if full.index(w) > 0)
    cut = greedy(client, stop=[stop_word])
    assert cut.choices[0].message.content == full[:full.index(stop_word)]
    assert cut.choices[0].finish_reason == "stop"
    with client.chat.completions.stream(model="smollm2", messages=HELLO, max_tokens=16, temperature=0,
                                        stop=stop_word, stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == cut.choices[0].message.content
    assert final.choices[0].finish_reason == "stop" and final.usage.completion_tokens > 0


def test_same_seed_gives_same_sample(client):
    def sample(seed):
        return client.chat.completions.create(model="smollm2", messages=HELLO, max_tokens=10, temperature=1.0,
                                              seed=seed).choices[0].message.content
    first = sample(1234)
    assert sample(1234) == first
    assert any(sample(seed) != first for seed in (1, 2))


def test_unknown_fields_are_accepted(client):
    answer = greedy(client, max_tokens=2, extra_body={"context_management": {"edits": []}, "client_metadata": {},
                                                      "top_k": 5, "chat_template_kwargs": {"enable_thinking": False}},
                    prompt_cache_key="k", user="u", metadata={"a": "b"}, store=False)
    assert answer.choices[0].message.content is not None


def test_malformed_json_is_a_400_and_the_server_keeps_serving(server, client):
    response = httpx.post(server.base_url + "/v1/chat/completions", content=b'{"model": "smollm2", "messa',
                          headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "JSON" in error["message"]
    assert greedy(client, max_tokens=2).choices[0].message.content is not None


@pytest.mark.parametrize("override, param", [
    ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"messages": []}, "messages"),
    ({"temperature": "warm"}, "temperature"),
    ({"n": 3}, "n"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "messages[0].content[0]"),
])
def test_invalid_fields_are_400_with_param(server, override, param):
    for stream in (False, True):
        body = {"model": "smollm2", "messages": HELLO, "max_tokens": 2, "stream": stream, **override}
        response = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == 400 and response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param) and error["message"]


def test_sdk_sees_param_on_bad_request(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="smollm2", messages=HELLO, max_tokens="many")
    assert info.value.param == "max_tokens"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=HELLO, max_tokens=2)
    assert info.value.code == "model_not_found"


def test_over_context_prompt_is_context_length_exceeded(client):
    long = [{"role": "user", "content": "apple " * (MAX_CONTEXT + 50)}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="smollm2", messages=long, max_tokens=2, stream=stream)
        assert info.value.code == "context_length_exceeded"
        assert f"maximum context length is {MAX_CONTEXT} tokens" in info.value.message


def test_models_routes(server, client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["smollm2", "claude-test"]
    assert client.models.retrieve("gpt-4.1").id == "gpt-4.1"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other")
    bare = httpx.get(server.base_url + "/models", timeout=10).json()
    assert bare["object"] == "list" and bare["data"][0]["owned_by"]
    anthropic = httpx.get(server.base_url + "/v1/models?limit=1000", headers={"anthropic-version": "2023-06-01"},
                          timeout=10).json()
    assert anthropic["has_more"] is False and anthropic["first_id"] == "smollm2"
    assert {m["type"] for m in anthropic["data"]} == {"model"} and anthropic["data"][1]["id"] == "claude-test"


def test_tool_calls_render_consistently_in_both_modes(server, client):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
    body = {"model": "smollm2", "messages": messages, "tools": tools, "max_tokens": 32, "temperature": 0}
    answer = client.chat.completions.create(**body)
    chunks = raw_chunks(server, {**body, "stream": True})
    message, finish = answer.choices[0].message, answer.choices[0].finish_reason
    streamed_calls: dict[int, dict] = {}
    for chunk in chunks:
        for fragment in chunk["choices"][0]["delta"].get("tool_calls", []):
            first = fragment["index"] not in streamed_calls
            assert ("id" in fragment) == first and ("name" in fragment["function"]) == first
            call = streamed_calls.setdefault(fragment["index"], {"name": fragment["function"].get("name"),
                                                                  "arguments": ""})
            call["arguments"] += fragment["function"].get("arguments", "")
    calls = message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (streamed_calls[i]["name"], streamed_calls[i]["arguments"]) for i in sorted(streamed_calls)]
    assert all(c.id.startswith("call_") and c.type == "function" for c in calls)
    assert finish in (("tool_calls", "length") if calls else ("stop", "length"))
    assert chunks[-1]["choices"][0]["finish_reason"] == finish
