"""The Chat Completions adapter on a real server (embedded SmolLM2) through the official SDK and raw HTTP."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

MAX_CONTEXT = 512
HELLO = [{"role": "user", "content": "Write a sentence about cats."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": MAX_CONTEXT, "aliases": ["gpt-*", "claude-test"], "strict_model_name": True},
                "engine": {"max_queue": 1}}  # one request at a time: a second concurrent one is refused
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
    assert set(usage.model_extra["kvgate"]) == {"cached_tokens_device", "cached_tokens_ssd", "replayed_tokens"}
    assert usage.model_extra["kvgate"]["replayed_tokens"] == 0  # per-token state cuts exactly
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


STORY = [{"role": "user", "content": "Write a very long story about a dragon and a knight."}]


def wait_until_admitted(server, since: float) -> float:
    """Seconds until the one-request queue takes a request again."""
    url = server.base_url + "/v1/chat/completions"
    while httpx.post(url, json={"messages": HELLO, "max_tokens": 1}, timeout=60).status_code == 503:
        assert time.monotonic() - since < 10, "an abandoned request still holds the queue:\n" + server.log()[-6000:]
        time.sleep(0.1)
    return time.monotonic() - since


def test_full_queue_is_503_and_a_stream_disconnect_frees_it(server):
    url = server.base_url + "/v1/chat/completions"
    long_run = {"messages": STORY, "max_tokens": 400, "temperature": 0, "stream": True}
    with httpx.stream("POST", url, json=long_run, timeout=60) as running:
        data_lines = (line for line in running.iter_lines() if line.startswith("data: "))
        assert [next(data_lines) for _ in range(3)]  # role, then two tokens: it is decoding now
        busy = httpx.post(url, json={"messages": HELLO, "max_tokens": 2}, timeout=30)
        closed_at = time.monotonic()
    assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1
    assert busy.json()["error"]["code"] == "overloaded"
    wait_until_admitted(server, closed_at)


def test_non_streaming_disconnect_cancels_the_request(server):
    url = server.base_url + "/v1/chat/completions"
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url, json={"messages": STORY, "max_tokens": 400, "temperature": 0}, timeout=1.5)
    wait_until_admitted(server, time.monotonic())


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


TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}}}
    for name, arg in (("get_weather", "city"), ("get_time", "tz"))]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def streamed_tool_calls(chunks: list) -> list[tuple[str, str]]:
    """(name, arguments) per call, asserting id/type/name come only in each call's first fragment."""
    calls: dict[int, list] = {}
    for chunk in chunks:
        for fragment in chunk["choices"][0]["delta"].get("tool_calls", []):
            first = fragment["index"] not in calls
            assert ("id" in fragment) == first and ("name" in fragment["function"]) == first
            assert ("type" in fragment) == first
            call = calls.setdefault(fragment["index"], [fragment["function"].get("name"), ""])
            call[1] += fragment["function"].get("arguments", "")
    return [tuple(calls[i]) for i in sorted(calls)]


def test_required_tool_call_in_both_modes(server, client):
    body = {"model": "smollm2", "messages": WEATHER, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 40, "temperature": 0}
    answer = client.chat.completions.create(**body)
    message = answer.choices[0].message
    assert answer.choices[0].finish_reason == "tool_calls" and message.content is None
    assert len(message.tool_calls) == 1 and message.tool_calls[0].id.startswith("call_")
    call = message.tool_calls[0]
    assert call.type == "function" and call.function.name in ("get_weather", "get_time")
    assert isinstance(json.loads(call.function.arguments), dict)
    chunks = raw_chunks(server, {**body, "stream": True})
    assert streamed_tool_calls(chunks) == [(call.function.name, call.function.arguments)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    replay = WEATHER + [message.model_dump(exclude_none=True),
                        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    follow = client.chat.completions.create(model="smollm2", messages=replay, tools=TOOLS, tool_choice="none",
                                            max_tokens=4, temperature=0)
    assert follow.choices[0].message.tool_calls is None and follow.choices[0].message.content


def test_named_tool_choice_finishes_with_stop_through_sdk_stream_helper(client):
    with client.chat.completions.stream(model="smollm2", messages=WEATHER, tools=TOOLS, max_tokens=40,
                                        tool_choice={"type": "function", "function": {"name": "get_time"}},
                                        temperature=0) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "stop"
    assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
    assert "tz" in json.loads(choice.message.tool_calls[0].function.arguments)


def test_a_call_cut_by_a_stop_string_is_an_error_not_a_call_to_run(server, client):
    """A forced call cut inside its arguments by a stop string cannot complete: both modes answer an
    error naming the call (kvgate.core.dialect.StreamParser), never a call with partial arguments."""
    body = {"model": "smollm2", "messages": WEATHER, "tools": TOOLS, "max_tokens": 40, "temperature": 0,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "stop": ['"city"']}
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(**body)
    assert "tool call 0 (get_weather) ended without valid arguments" in str(caught.value)
    chunks = raw_chunks(server, {**body, "stream": True})
    assert [name for name, _ in streamed_tool_calls(chunks[:-1])] == ["get_weather"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert "tool call 0 (get_weather) ended without valid arguments" in chunks[-1]["error"]["message"]
