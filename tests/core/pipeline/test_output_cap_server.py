"""A model that declares no output clamp (a tiny random checkpoint written by transformers) runs a
request's cap as asked on the real server, unless ``[model] max_output_tokens`` sets one."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
CHATML = ("{%- for message in messages %}"
          "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
ASK = [{"role": "user", "content": "Tell me everything."}]
RUN_ON = 150  # tokens asked for with ignore_eos: the random model cannot stop early


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = smollm2_from_gguf()
    config = AutoConfig.for_model("llama", vocab_size=tokenizer.get_vocab_size(), hidden_size=64,
                                  intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=None,
                                  eos_token_id=tokenizer.token_to_id("<|im_end|>"))
    torch.manual_seed(7)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    return directory


def serve(tmp_path, checkpoint, **model) -> ServerProcess:
    return ServerProcess(tmp_path, {"model": {"path": str(checkpoint), "name": "tiny", "dtype": "fp32", **model}})


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json={"model": "tiny", **body}, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def run_on(server) -> dict:
    return post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": RUN_ON, "ignore_eos": True})


def test_no_clamp_unless_configured(tmp_path, checkpoint):
    with serve(tmp_path / "plain", checkpoint) as plain:
        assert run_on(plain)["usage"]["completion_tokens"] == RUN_ON
        small = post(plain, "/v1/responses", {"input": "Hi", "max_output_tokens": 3, "store": False})
        assert small["max_output_tokens"] == 3
        sent_none = httpx.stream("POST", plain.base_url + "/v1/responses",
                                 json={"model": "tiny", "input": "Hi", "stream": True, "store": False}, timeout=300)
        with sent_none as stream:
            created = json.loads(next(line for line in stream.iter_lines() if line.startswith("data:"))[5:])
        assert created["response"]["max_output_tokens"] == 4096  # [engine] default_max_tokens, unclamped
        assert "output clamp" not in plain.log()
    with serve(tmp_path / "clamped", checkpoint, max_output_tokens=40) as clamped:
        choice = run_on(clamped)
        assert (choice["choices"][0]["finish_reason"], choice["usage"]["completion_tokens"]) == ("length", 40)
        assert "no reply runs past 40 tokens ([model] max_output_tokens)" in clamped.log()
