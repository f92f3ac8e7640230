"""Logprobs over the real server (embedded SmolLM2, ``engine.deterministic = true``) through the
official ``openai`` SDK: Chat Completions and Responses, streamed and not, their 400s, and exactness:
a request's logprobs are bit-identical whether its prompt was computed cold or came from the cache.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "Write a sentence about cats."}]
LOGPROBS = ["message.output_text.logprobs"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # reuse_output_ids off: the follow-up is compared with itself in another namespace (canonical ids)
    settings = {"model": {"max_context": 2048}, "engine": {"deterministic": True},
                "tokenizer_cache": {"reuse_output_ids": False}}
    with ServerProcess(tmp_path_factory.mktemp("logprobs"), settings=settings) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


def chat(client, messages=QUESTION, salt=None, **kwargs):
    extra = {"cache_salt": salt} if salt else None
    kwargs = {"temperature": 0, "max_tokens": 16, "logprobs": True, "top_logprobs": 3, **kwargs}
    return client.chat.completions.create(model="smollm2", messages=messages, extra_body=extra, **kwargs)


def as_tuples(tokens) -> list[tuple]:
    """Every field of each token, floats as they came (compared with ==)."""
    return [(t.token, t.logprob, list(t.bytes), [(a.token, a.logprob, list(a.bytes)) for a in t.top_logprobs])
            for t in tokens]


def test_chat_logprobs_spell_the_content_and_lead_their_top_logprobs(client):
    answer = chat(client)
    content, tokens = answer.choices[0].message.content, answer.choices[0].logprobs.content
    assert answer.choices[0].logprobs.refusal is None
    assert len(tokens) == answer.usage.completion_tokens == 16
    assert b"".join(bytes(t.bytes) for t in tokens).decode("utf-8") == content
    for token in tokens:  # greedy: the chosen token is the most likely one
        assert len(token.top_logprobs) == 3 and token.logprob < 0
        assert (token.top_logprobs[0].token, token.top_logprobs[0].logprob) == (token.token, token.logprob)
        assert token.top_logprobs[0].logprob >= token.top_logprobs[1].logprob >= token.top_logprobs[2].logprob
    plain = client.chat.completions.create(model="smollm2", messages=QUESTION, temperature=0, max_tokens=16)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == content


def test_chat_stream_chunks_carry_the_tokens_of_their_content(client):
    expected = chat(client).choices[0].logprobs.content
    streamed = []
    for chunk in chat(client, stream=True):
        choice = chunk.choices[0]
        if choice.delta.content:
            assert b"".join(bytes(t.bytes) for t in choice.logprobs.content).decode("utf-8") == choice.delta.content
            streamed += choice.logprobs.content
        else:
            assert choice.logprobs is None
    assert as_tuples(streamed) == as_tuples(expected)


def test_tool_call_tokens_are_not_content(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    answer = chat(client, [{"role": "user", "content": "Weather in Paris?"}], tools=tools, tool_choice="required",
                  max_tokens=40)
    assert answer.choices[0].message.tool_calls and answer.usage.completion_tokens > 0
    assert answer.choices[0].logprobs.content == []


def test_responses_logprobs_streamed_and_not(client):
    body = {"model": "smollm2", "input": QUESTION[0]["content"], "temperature": 0, "max_output_tokens": 16,
            "include": LOGPROBS, "top_logprobs": 3}
    response = client.responses.create(**body)
    part = response.output[0].content[0]
    assert b"".join(bytes(t.bytes) for t in part.logprobs).decode("utf-8") == part.text
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob == t.logprob for t in part.logprobs)
    chat_tokens = chat(client).choices[0].logprobs.content  # the same prompt through the other protocol
    assert as_tuples(part.logprobs) == as_tuples(chat_tokens)
    deltas, done = [], None
    for event in client.responses.create(**body, stream=True):
        if event.type == "response.output_text.delta":
            deltas += [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in event.logprobs]
        elif event.type == "response.output_text.done":
            done = event
    assert deltas == [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in part.logprobs]
    assert [(t.token, t.logprob) for t in done.logprobs] == [(t.token, t.logprob) for t in part.logprobs]
    plain = client.responses.create(**{**body, "include": []})
    assert plain.output[0].content[0].logprobs == [] and plain.output_text == part.text


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": QUESTION, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": QUESTION, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": QUESTION, "logprobs": "yes"}, "logprobs"),
    ("/v1/responses", {"input": "hi", "include": LOGPROBS, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/responses", {"input": "hi", "top_logprobs": -1}, "top_logprobs"),
])
def test_bad_logprobs_fields_are_400s_in_the_openai_shape(server, path, body, param):
    reply = httpx.post(server.base_url + path, json={"model": "smollm2", **body}, timeout=60)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_the_sdk_raises_bad_request_for_top_logprobs_21(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="smollm2", messages=QUESTION, logprobs=True, top_logprobs=21)
    assert info.value.status_code == 400


# --- exactness -----------------------------------------------------------------------------------

FACTS = " ".join(f"Box {i} is {['red', 'blue', 'green'][i % 3]} and holds {i * 7} marbles." for i in range(30))
FIRST = [{"role": "system", "content": "You answer questions about these boxes. " + FACTS},
         {"role": "user", "content": "Which boxes are green? Name three."}]


def served(client, messages, salt: str):
    """(the answer, every logprob field of its tokens, prompt tokens, cached prompt tokens)."""
    answer = chat(client, messages, salt, max_tokens=24)
    usage = answer.usage
    return (answer.choices[0].message.content, as_tuples(answer.choices[0].logprobs.content), usage.prompt_tokens,
            usage.prompt_tokens_details.cached_tokens)


def test_logprobs_are_bit_identical_cold_and_cached(client):
    text, cold, prompt, cached = served(client, FIRST, "exact-a")
    assert prompt > 300 and cached == 0 and len(cold) > 5
    _, again, _, cached = served(client, FIRST, "exact-a")
    assert cached >= prompt - 16  # the whole prompt (to the cache block) came from the device cache
    assert again == cold
    # a follow-up: the first exchange is a cached prefix of its longer prompt; against the same served cold
    follow = FIRST + [{"role": "assistant", "content": text}, {"role": "user", "content": "And which are red?"}]
    _, warm, longer, cached = served(client, follow, "exact-a")
    assert prompt // 16 * 16 <= cached < longer and longer > prompt + len(cold)
    _, fresh, _, cached = served(client, follow, "exact-b")
    assert cached == 0 and len(fresh) > 5
    assert warm == fresh
