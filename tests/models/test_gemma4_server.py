"""A tiny random Gemma 4 (the dense test model: sliding window 8, per-layer inputs, soft-capped
logits) served by the real server on the defaults: greedy answers equal transformers', the next turn
of the conversation is served from the cache, and after a restart from the SSD tier with the same
answer. A required tool call (Chat Completions, Messages, Responses) is fenced in the ``gemma4``
dialect, which the architecture selects with its chat format (the checkpoint has no template): it
parses and its arguments validate against the tool's schema.

The checkpoint is random (no real one fits this machine) and carries the SmolLM2 tokenizer with
Gemma 4's markup added as special tokens, ``<turn|>`` its end of turn.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.harness import ServerProcess
from tests.models.served import ask_greedy, transformers_answer
from tests.models.test_families_server import ASK, anthropic_calls, assert_valid, chat_calls, responses_calls
from tests.models.tiny_gemma4 import BASE, CONFIGS, randomise

pytestmark = pytest.mark.slow

MARKUP = ["<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>", "<tool_response|>",
          "<|channel>", "<channel|>", "<|tool>", "<tool|>"]
MAX_TOKENS = 12
NAME = "tiny-gemma4"


def write_checkpoint(directory):
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    tokenizer.add_special_tokens(MARKUP)
    eos = tokenizer.token_to_id("<turn|>")
    options = {**BASE, **CONFIGS["dense"], "vocab_size": tokenizer.get_vocab_size(),
               "vocab_size_per_layer_input": tokenizer.get_vocab_size(), "max_position_embeddings": 1024,
               "bos_token_id": None, "eos_token_id": eos, "pad_token_id": eos}
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gemma4_text", **options), dtype=torch.float32,
                                             attn_implementation="eager").eval()
    randomise(model)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<turn|>"}))
    return model, tokenizer, eos


def test_greedy_equals_transformers_a_fenced_call_validates_and_a_restart_serves_from_ssd(tmp_path):
    model, tokenizer, eos = write_checkpoint(tmp_path / "model")
    settings = {"model": {"path": str(tmp_path / "model"), "name": NAME, "dtype": "fp32", "max_context": 1024},
                "cache": {"chunk_tokens": 64}}
    text = " ".join(f"Line {i}: the tide comes in and the tide goes out." for i in range(8))
    first = [{"role": "user", "content": text + " Write a haiku about it."}]
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "server", settings=settings, state_dir=state) as server:
        reply, prompt = ask_greedy(server, NAME, first, MAX_TOKENS)
        answer = reply["choices"][0]["message"]["content"]
        assert reply["usage"]["completion_tokens"] > 3 and answer
        assert prompt[:3] == tokenizer.encode("<|turn>user\n").ids[:3]  # the gemma4 chat format
        assert answer == transformers_answer(model, tokenizer, eos, prompt, MAX_TOKENS)
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
        again, longer = ask_greedy(server, NAME, second, MAX_TOKENS)
        tail = 3 + len(tokenizer.encode("<|channel>thought\n<channel|>").ids)  # the generation prompt (its empty
        assert len(prompt) > 64 and longer[:len(prompt) - tail] == prompt[:len(prompt) - tail]  # thought: not history)
        expected = transformers_answer(model, tokenizer, eos, longer, MAX_TOKENS)
        assert again["choices"][0]["message"]["content"] == expected
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64, again["usage"]
        required, _ = chat_calls(server, "gemma4", ASK)
        anthropic, responses = anthropic_calls(server, "gemma4"), responses_calls(server, "gemma4")
        log = server.log()
    assert "with the gemma4 runtime" in log and "dialect gemma4" in log
    for made in (required, anthropic, responses):
        assert_valid(made)
    with ServerProcess(tmp_path / "restarted", settings=settings, state_dir=state) as server:
        restored, _ = ask_greedy(server, NAME, second, MAX_TOKENS)  # the state comes back from the SSD tier's chunks
    assert restored["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, restored["usage"]
    assert restored["choices"][0]["message"]["content"] == expected
