"""A resent reply keeps the ids the model sampled (issue 34, item 4): real `kvgate serve`, SmolLM2.

Greedy SmolLM2 under a JSON-schema fence answers "Describe a cat in JSON." with ids that are not
the canonical tokenization of their text (48 sampled tokens where the tokenizer makes 47). Resent
as an assistant turn, that text used to be re-tokenized canonically, so the follow-up forked from
the prefix cache inside the previous answer. Now the follow-up's cached tokens cover the previous
prompt and answer, for the tenant that got the answer only.
"""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
KEYS = {"alice": "key-alice", "bob": "key-bob", "ops": "key-ops"}
QUESTIONS = [{"role": "user", "content": text} for text in (
    "Describe a cat in JSON.", "Describe a dog in JSON.", "Describe your best friend in JSON.",
    "Describe a famous painter in JSON.", "Describe a house cat named Tom in JSON.")]
THANKS = {"role": "user", "content": "Thanks."}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    keys = [{"tenant": who, "key": key, "admin": who == "ops"} for who, key in KEYS.items()]
    settings = {"server": {"keys": keys}, "cache": {"ssd_enabled": False, "cached_tokens_granularity": 1},
                "tokenizer_cache": {"reuse_output_ids": True}}
    with ServerProcess(tmp_path_factory.mktemp("output-ids"), settings) as running:
        yield running


def post(server, who: str, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, headers={"Authorization": f"Bearer {KEYS[who]}"},
                       timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def chat(server, who: str, messages: list[dict], **extra) -> dict:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 1, "temperature": 0, **extra}
    return post(server, who, "/v1/chat/completions", body)


def canonical_count(server, who: str, messages: list[dict]) -> int:
    return post(server, who, "/v1/tokenize", {"messages": messages})["count"]


def reused_tokens(server) -> float:
    metrics = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}, timeout=30)
    for line in metrics.text.splitlines():
        if line.startswith("kvgate_tokenizer_output_ids_reused_tokens_total "):
            return float(line.split()[-1])
    raise AssertionError("kvgate_tokenizer_output_ids_reused_tokens_total not in /metrics")


@pytest.fixture(scope="module")
def answer(server, smollm2_tokenizer) -> dict:
    return non_canonical_answer(server, smollm2_tokenizer)


def non_canonical_answer(server, smollm2_tokenizer) -> dict:
    """Alice's greedy fenced answer to the first question whose sampled ids are not the canonical
    tokenization of their text: the tests cannot pass by accident."""
    fence = {"type": "json_schema", "json_schema": {"name": "cat", "schema": SCHEMA}}
    tries = [(question, {}) for question in QUESTIONS] + [(QUESTIONS[0], {"temperature": 1.0, "seed": seed})
                                                          for seed in range(8)]  # sampled: splits vary more
    for question, sampling in tries:
        reply = chat(server, "alice", [question], max_tokens=64, logprobs=True, response_format=fence, **sampling)
        content = reply["choices"][0]["message"]["content"]
        sampled = [token["token"] for token in reply["choices"][0]["logprobs"]["content"]]
        canonical = [smollm2_tokenizer.decode([i]) for i in smollm2_tokenizer.encode(content, add_special_tokens=False).ids]
        assert "".join(sampled) == content
        if sampled != canonical:
            return {"question": question, "content": content, "usage": reply["usage"],
                    "extra_ids": len(sampled) - len(canonical)}
    raise AssertionError("no question gave a sampled answer that forks from its tokenization")


def test_a_resent_answer_hits_the_cache_through_the_whole_answer(server, answer):
    before = reused_tokens(server)
    conversation = [answer["question"], {"role": "assistant", "content": answer["content"]}, THANKS]
    follow_up = chat(server, "alice", conversation)["usage"]
    seen = answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
    assert follow_up["prompt_tokens_details"]["cached_tokens"] >= seen - 1
    assert follow_up["prompt_tokens"] == canonical_count(server, "alice", conversation) + answer["extra_ids"]
    assert reused_tokens(server) > before


def test_another_tenant_gets_the_canonical_tokens(server, answer):
    before = reused_tokens(server)
    conversation = [answer["question"], {"role": "assistant", "content": answer["content"]}, THANKS]
    usage = chat(server, "bob", conversation)["usage"]
    assert usage["prompt_tokens"] == canonical_count(server, "bob", conversation)
    assert reused_tokens(server) == before


def test_an_edited_answer_is_tokenized_canonically(server, answer):
    before = reused_tokens(server)
    conversation = [answer["question"], {"role": "assistant", "content": "Here: " + answer["content"]}, THANKS]
    usage = chat(server, "alice", conversation)["usage"]
    assert usage["prompt_tokens"] == canonical_count(server, "alice", conversation)
    assert usage["prompt_tokens_details"]["cached_tokens"] < answer["usage"]["prompt_tokens"] + 3
    assert reused_tokens(server) == before
