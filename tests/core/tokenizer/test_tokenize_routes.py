"""POST /v1/tokenize and /v1/detokenize on a real `kvgate serve` (embedded SmolLM2) over 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("tokenize"), {"cache": {"ssd_enabled": False}, "model": {"strict_model_name": True}}) as running:
        yield running


def post(server, path: str, body) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=60)


def metric(server, name: str, **labels) -> float:
    wanted = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in httpx.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{wanted} not in /metrics")


def test_tokenize_prompt_matches_the_tokenizer_and_detokenize_inverts_it(server, smollm2_tokenizer):
    prompt = "<|im_start|>user\nhéllo 中文 😀 12345<|im_end|>\n<|im_start|>assistant\n"
    expected = smollm2_tokenizer.encode(prompt, add_special_tokens=False).ids
    for prefix in ("/v1", ""):
        answer = post(server, prefix + "/tokenize", {"prompt": prompt, "return_token_strs": True})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["tokens"] == expected and body["count"] == len(expected)
        assert body["max_model_len"] > 0 and body["token_strs"][0] == "<|im_start|>"
        back = post(server, prefix + "/detokenize", {"tokens": body["tokens"]})
        assert back.status_code == 200 and back.json() == {"prompt": prompt}


def test_tokenize_messages_renders_the_chat_template(server, smollm2_tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    body = post(server, "/v1/tokenize", {"messages": messages}).json()
    text = smollm2_tokenizer.decode(body["tokens"], skip_special_tokens=False)
    assert "<|im_start|>user\nHi there<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    plain = post(server, "/v1/tokenize", {"messages": messages, "add_generation_prompt": False}).json()
    assert body["tokens"][: plain["count"]] == plain["tokens"] and plain["count"] < body["count"]


def test_repeated_prompts_hit_the_tokenizer_caches(server):
    before = metric(server, "smg_tokenizer_cache_lookups_total", layer="l0", result="hit")
    history = "<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nstep one<|im_end|>\n"
    post(server, "/v1/tokenize", {"prompt": history})
    post(server, "/v1/tokenize", {"prompt": history})
    l1_before = metric(server, "smg_tokenizer_cache_lookups_total", layer="l1", result="hit")
    post(server, "/v1/tokenize", {"prompt": history + "<|im_start|>assistant\nok<|im_end|>\n"})
    assert metric(server, "smg_tokenizer_cache_lookups_total", layer="l0", result="hit") == before + 1
    assert metric(server, "smg_tokenizer_cache_lookups_total", layer="l1", result="hit") == l1_before + 1
    assert metric(server, "smg_tokenizer_cache_reused_bytes_total", layer="l1") > 0


@pytest.mark.parametrize("path, body, param", [
    ("/v1/tokenize", {}, "prompt"),
    ("/v1/tokenize", {"prompt": "a", "messages": []}, "messages"),
    ("/v1/tokenize", {"prompt": 5}, "prompt"),
    ("/v1/tokenize", {"messages": [{"role": "wizard", "content": "x"}]}, None),
    ("/v1/detokenize", {"tokens": [1, "two"]}, "tokens[1]"),
    ("/v1/detokenize", {"tokens": [10**9]}, "tokens"),
    ("/v1/detokenize", {"tokens": [-1]}, "tokens"),
    ("/v1/detokenize", {}, "tokens"),
    ("/v1/detokenize", [1, 2], None),
])
def test_bad_input_is_a_400_in_openai_shape(server, path, body, param):
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


def test_unknown_model_is_a_404(server):
    answer = post(server, "/v1/tokenize", {"model": "no-such-model", "prompt": "x"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"
