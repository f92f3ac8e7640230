"""A tiny random Qwen3.5, Qwen3.5-MoE and Qwen3-Next served by the real server: greedy answers equal
transformers', a second request that extends the first conversation is served from the cache (a
fork past the first prompt's end, which the runtime restores from its snapshots and a replay), again
equal to transformers, and after a restart the same request comes from the SSD tier with the same
answer. A conversation that branches off the first inside its prompt, at an unaligned token (87,
past one cache chunk; usage counts cached tokens exactly here, not in blocks), gets transformers'
answer from a device hit there (a snapshot before it and a replay) and again after the restart from
the SSD tier's chunks. Each family's tool call (``tool_choice`` required) is fenced and validates.
A tool call asked of the tiny Qwen3.5 (``tool_choice`` required or named; Chat Completions,
Messages, Responses) is fenced in ``qwen3_coder_xml``: it parses and its arguments validate against
the tool's schema.

The checkpoint is random (no real one fits this machine) and carries the SmolLM2 tokenizer and a
ChatML template; the Qwen3.5 architecture selects the ``qwen3_coder_xml`` dialect by itself.
"""

from __future__ import annotations

import json

import pytest
import torch

from kvgate.core.cache.namespace import common_prefix
from tests.harness import ServerProcess
from tests.models.served import ask_greedy, post, transformers_answer
from tests.models.test_families_server import (ASK, TOOL, anthropic_calls, assert_valid, chat_calls,
                                               responses_calls)
from tests.models.tiny_qwen3_5 import RUNTIMES, randomise, text_config

pytestmark = pytest.mark.slow

TEMPLATE = ("{%- for message in messages %}"
            "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
            "{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
MAX_TOKENS = 12
LINES = [f"Line {i}: the tide comes in and the tide goes out." for i in range(8)]
BRANCH = [{"role": "user", "content": " ".join(LINES[:6]) + " Then the wind rose. Write a haiku about it."}]


def write_checkpoint(directory, model_type: str):
    from transformers import AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    eos = tokenizer.token_to_id("<|im_end|>")
    config = text_config(vocab=tokenizer.get_vocab_size(), model_type=model_type, max_position_embeddings=1024)
    config.eos_token_id, config.bos_token_id = eos, None
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    randomise(model)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "eos_token": "<|im_end|>"}))
    return model, tokenizer, eos


@pytest.mark.parametrize("model_type", list(RUNTIMES))
def test_greedy_answers_equal_transformers_and_the_next_turn_hits_the_cache(tmp_path, model_type):
    model, tokenizer, eos = write_checkpoint(tmp_path / "model", model_type)
    runtime = RUNTIMES[model_type]
    settings = {"model": {"path": str(tmp_path / "model"), "name": "tiny-qwen3_5", "dtype": "fp32",
                          "max_context": 1024}, "cache": {"chunk_tokens": 64, "cached_tokens_granularity": 1}}
    text = " ".join(LINES)
    first = [{"role": "user", "content": text + " Write a haiku about it."}]  # over a delta-rule chunk (64)
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "server", settings=settings, state_dir=state) as server:
        reply, prompt = ask_greedy(server, "tiny-qwen3_5", first, MAX_TOKENS)
        answer = reply["choices"][0]["message"]["content"]
        assert reply["usage"]["completion_tokens"] > 3 and answer
        assert answer == transformers_answer(model, tokenizer, eos, prompt, MAX_TOKENS)
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
        again, longer = ask_greedy(server, "tiny-qwen3_5", second, MAX_TOKENS)
        assert len(prompt) > 64 and longer[:len(prompt)] == prompt
        expected = transformers_answer(model, tokenizer, eos, longer, MAX_TOKENS)
        assert again["choices"][0]["message"]["content"] == expected
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(prompt), again["usage"]
        branched, branch_prompt = ask_greedy(server, "tiny-qwen3_5", BRANCH, MAX_TOKENS)
        fork_at = branched["usage"]["kvgate"]["cached_tokens_device"]
        assert fork_at == common_prefix(prompt, branch_prompt) and fork_at % 64, branched["usage"]
        branch_answer = transformers_answer(model, tokenizer, eos, branch_prompt, MAX_TOKENS)
        assert branched["choices"][0]["message"]["content"] == branch_answer
        assert_valid(chat_calls(server, model_type, ASK)[0])
        log = server.log()
    assert f"with the {runtime} runtime" in log and "dialect qwen3_coder_xml" in log
    with ServerProcess(tmp_path / "restarted", settings=settings, state_dir=state) as server:
        branched, _ = ask_greedy(server, "tiny-qwen3_5", BRANCH, MAX_TOKENS)
        restored, _ = ask_greedy(server, "tiny-qwen3_5", second, MAX_TOKENS)  # the state comes back from the SSD tier's chunks
    assert restored["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, restored["usage"]
    assert restored["choices"][0]["message"]["content"] == expected
    assert branched["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, branched["usage"]
    assert branched["choices"][0]["message"]["content"] == branch_answer



NAMED = {"type": "function", "function": {"name": "get_forecast"}}


def test_a_tool_call_is_fenced_in_qwen3_coder_xml_in_three_protocols_and_validates(tmp_path):
    write_checkpoint(tmp_path / "model", "qwen3_5_text")  # random: what the fence forces is all there is
    settings = {"model": {"path": str(tmp_path / "model"), "name": "tiny-qwen3_5", "dtype": "fp32",
                          "max_context": 1024}}
    named = {"model": "tiny-qwen3_5", "messages": ASK, "tools": [TOOL], "tool_choice": NAMED, "max_tokens": 200,
             "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}
    with ServerProcess(tmp_path / "server", settings=settings, state_dir=tmp_path / "state") as server:
        required, _ = chat_calls(server, "qwen3_5", ASK)  # tool_choice required: finish_reason tool_calls
        reply = post(server, "/v1/chat/completions", named)
        anthropic, responses = anthropic_calls(server, "qwen3_5"), responses_calls(server, "qwen3_5")
        log = server.log()
    assert "dialect qwen3_coder_xml" in log
    assert reply["choices"][0]["finish_reason"] == "stop", reply  # a named choice answers stop, as OpenAI does
    calls = reply["choices"][0]["message"]["tool_calls"]
    forced = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    for made in (required, forced, anthropic, responses):
        assert_valid(made)
