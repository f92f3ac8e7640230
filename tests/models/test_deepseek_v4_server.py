"""A tiny random DeepSeek V4 model served by a real server: the ``deepseek_v4`` runtime, the
``deepseek_dsml`` dialect's ``v4`` variant and its ``deepseek_v4`` chat format, all chosen from the
architecture (the checkpoint has no chat template); Chat Completions, Anthropic Messages and
Responses each force a schema-valid tool call, and a second turn after a restart is served from the
SSD tier, so V4's K=V rows, compressed entries and raw tails travel as chunks.
With the checkpoint's MTP layer and ``[engine] speculative = "mtp"`` a server answers at temperature
0 as one without speculation, and its draft counter shows the layer drafted.

The checkpoint is random (no real V4 checkpoint fits this machine) and carries the SmolLM2
tokenizer with DeepSeek's role tokens added, so what the fence forces is all there is.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.harness import ServerProcess
from tests.models.test_families_server import (ASK, ROLE_TOKENS, TOOL, anthropic_calls, assert_valid, chat_calls,
                                               post, responses_calls)
from tests.models.tiny_deepseek_v4 import add_mtp_layer, build_tiny_v4

pytestmark = pytest.mark.slow


def write_checkpoint(directory):
    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    added, eos = ROLE_TOKENS["deepseek_v3"]
    tokenizer.add_special_tokens(added)
    directory.mkdir(parents=True)
    build_tiny_v4(directory, vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=1024,
                  bos_token_id=None, eos_token_id=tokenizer.token_to_id(eos))
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    return directory


def test_three_protocols_give_v4_tool_calls_and_a_restart_restores_from_ssd(tmp_path):
    directory = write_checkpoint(tmp_path / "deepseek_v4")
    model = {"path": str(directory), "name": "tiny-deepseek_v4", "dtype": "fp32", "max_context": 1024}
    settings = {"model": model, "cache": {"chunk_tokens": 64}}
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "one", settings=settings, state_dir=state) as server:
        calls, reply = chat_calls(server, "deepseek_v4", ASK)
        assert_valid(calls)
        assert_valid(anthropic_calls(server, "deepseek_v4"))
        assert_valid(responses_calls(server, "deepseek_v4"))
        log = server.log()
        assert "with the deepseek_v4 runtime" in log and "dialect deepseek_dsml" in log
    assert reply["usage"]["prompt_tokens"] > 128  # past the HCA and sliding windows many times over
    call = reply["choices"][0]["message"]["tool_calls"][0]
    second = ASK + [reply["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "Sunny"}]
    with ServerProcess(tmp_path / "two", settings=settings, state_dir=state) as server:
        calls, again = chat_calls(server, "deepseek_v4", second)
    assert_valid(calls)
    assert again["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, again["usage"]


def test_a_server_speculating_with_the_mtp_layer_answers_as_one_that_does_not(tmp_path):
    directory = write_checkpoint(tmp_path / "deepseek_v4")
    add_mtp_layer(directory)
    model = {"path": str(directory), "name": "tiny-v4", "dtype": "fp32", "max_context": 1024}
    results = {}
    for mode in ("", "mtp"):
        settings = {"model": model, "engine": {"speculative": mode}, "cache": {"enabled": False}}
        with ServerProcess(tmp_path / (mode or "plain"), settings=settings, state_dir=tmp_path / "state") as server:
            text = post(server, "/v1/chat/completions", {"model": "tiny-v4", "messages": ASK, "max_tokens": 40,
                                                         "temperature": 0})
            call = post(server, "/v1/chat/completions", {"model": "tiny-v4", "messages": ASK, "tools": [TOOL],
                                                         "tool_choice": "required", "max_tokens": 200,
                                                         "temperature": 0})
            results[mode] = [text["choices"][0]["message"], call["choices"][0]["message"]["tool_calls"][0]["function"]]
            metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
        drafted = re.search(r"^vllm:spec_decode_num_draft_tokens_total (\S+)$", metrics, re.M)
        assert (float(drafted.group(1)) > 0) == (mode == "mtp"), metrics
    assert results["mtp"] == results[""]
    assert results[""][0]["content"] and results[""][1]["name"] == "get_forecast"
