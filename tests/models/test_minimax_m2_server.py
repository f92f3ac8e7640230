"""A tiny random MiniMax M2 served by a real server on the defaults: the architecture selects the
``minimax_m2`` runtime, dialect and (the checkpoint has no template) chat format, and the greedy
answer equals transformers' greedy output; a required tool call (Chat Completions, Messages,
Responses) is fenced in the ``minimax_m2`` dialect and validates against the tool's schema; after a
restart the next turn is served from the SSD tier.

The checkpoint is random (no real one fits this machine) and carries the SmolLM2 tokenizer with
MiniMax's role tokens added. MiniMax M2's own prompt opens ``<think>`` and never closes it, and the
fence does not close reasoning to fit ``max_tokens``, so a random model would reason until the
budget ends; the tool-call server therefore carries M2's official template with a generation prompt
that honours ``enable_thinking`` (as the dialect reads later MiniMax templates to do), and the
requests turn thinking off. They also ask for one call (``parallel_tool_calls`` false): the fence
does not yet keep a MiniMax block of several calls within ``max_tokens`` (a random model writes calls
until the budget cuts one).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_families_server import ASK, PARAMETERS, TOOL, assert_valid
from tests.models.tiny_minimax_m2 import minimax_config, randomise

pytestmark = pytest.mark.slow

ROLE_TOKENS = ["]~!b[", "]~b]", "[e~["]  # begin of prompt, begin of turn, end of turn
MAX_TOKENS = 12
OFFICIAL = (Path(__file__).parents[1] / "dialects" / "templates" / "minimax_m2.jinja").read_text(encoding="utf-8")
GENERATION = "{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ '\\n' }}"
THINKING_SWITCH = GENERATION + "{%- if enable_thinking is defined and enable_thinking is false -%}" \
                               "{{- '\\n</think>\\n\\n' }}{%- endif -%}"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(directory, transformers model, tokenizer, end-of-turn id) of a tiny MiniMax M2 without a template."""
    directory = tmp_path_factory.mktemp("minimax_m2")
    return (directory, *write_checkpoint(directory))


def write_checkpoint(directory) -> tuple:
    """Write a tiny MiniMax M2 without a template; (transformers model, tokenizer, end-of-turn id)."""
    from transformers import AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    tokenizer.add_special_tokens(ROLE_TOKENS)
    eos = tokenizer.token_to_id("[e~[")
    config = minimax_config("partial_rotary", vocab=tokenizer.get_vocab_size(), max_position_embeddings=1024,
                            bos_token_id=None, eos_token_id=eos)
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    randomise(model)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "[e~["}))
    return model, tokenizer, eos


def settings(directory) -> dict:
    return {"model": {"path": str(directory), "name": "tiny-minimax_m2", "dtype": "fp32", "max_context": 1024},
            "cache": {"chunk_tokens": 64}}


def required_calls(server, protocol: str, messages: list) -> tuple[list, dict]:
    """(name, arguments) of the calls a ``tool_choice`` required (any) request for one call answered, and the reply."""
    common = {"model": "tiny-minimax_m2", "temperature": 0}
    if protocol == "chat":
        reply = post(server, "/v1/chat/completions", {
            **common, "messages": messages, "tools": [TOOL], "tool_choice": "required", "max_tokens": 200,
            "parallel_tool_calls": False, "chat_template_kwargs": {"enable_thinking": False}})
        assert reply["choices"][0]["finish_reason"] == "tool_calls", reply
        calls = reply["choices"][0]["message"]["tool_calls"]
        return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls], reply
    if protocol == "anthropic":
        tool = {"name": "get_forecast", "description": "Weather forecast", "input_schema": PARAMETERS}
        reply = post(server, "/v1/messages", {
            **common, "max_tokens": 200, "messages": messages, "tools": [tool], "thinking": {"type": "disabled"},
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
        assert reply["stop_reason"] == "tool_use", reply
        return [(b["name"], b["input"]) for b in reply["content"] if b["type"] == "tool_use"], reply
    tool = {"type": "function", **TOOL["function"]}
    reply = post(server, "/v1/responses", {
        **common, "max_output_tokens": 200, "input": messages, "tools": [tool], "tool_choice": "required",
        "parallel_tool_calls": False, "reasoning": {"effort": "none"}})
    return [(i["name"], json.loads(i["arguments"])) for i in reply["output"] if i["type"] == "function_call"], reply


def test_greedy_answer_equals_transformers_with_the_dialects_own_chat_format(checkpoint, tmp_path):
    directory, model, tokenizer, eos = checkpoint
    messages = [{"role": "user", "content": "Write a haiku about the tide."}]
    with ServerProcess(tmp_path / "server", settings=settings(directory), state_dir=tmp_path / "state") as server:
        prompt = post(server, "/v1/tokenize", {"messages": messages, "add_generation_prompt": True})["tokens"]
        reply = post(server, "/v1/chat/completions", {"model": "tiny-minimax_m2", "messages": messages,
                                                      "max_tokens": MAX_TOKENS, "temperature": 0})
        log = server.log()
    assert "with the minimax_m2 runtime" in log and "dialect minimax_m2" in log
    assert tokenizer.decode(prompt, skip_special_tokens=False).endswith("]~b]user\nWrite a haiku about the tide."
                                                                         "[e~[\n]~b]ai\n<think>\n")
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos)[0, len(prompt):].tolist()
    expected = tokenizer.decode([t for t in out if t != eos], skip_special_tokens=False)
    message = reply["choices"][0]["message"]
    assert reply["usage"]["completion_tokens"] == len(out) > 3 and "</think>" not in expected
    assert message.get("reasoning_content", "") + (message.get("content") or "") == expected  # all reasoning


@pytest.fixture(scope="module")
def templated(checkpoint, tmp_path_factory):
    """The checkpoint with M2's template, its generation prompt switched by ``enable_thinking``."""
    directory = tmp_path_factory.mktemp("minimax_m2_template")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(checkpoint[0] / name, directory / name)
    assert OFFICIAL.count(GENERATION) == 1
    template = OFFICIAL.replace(GENERATION, THINKING_SWITCH)
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "[e~[", "chat_template": template}))
    return directory


def test_required_tool_calls_are_fenced_in_minimax_m2_and_the_next_turn_comes_from_ssd(templated, tmp_path):
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "one", settings=settings(templated), state_dir=state) as server:
        for protocol in ("anthropic", "responses", "chat"):
            calls, reply = required_calls(server, protocol, ASK)
            assert_valid(calls)
            assert len(calls) == 1, protocol
        log = server.log()
    assert "with the minimax_m2 runtime" in log and "dialect minimax_m2" in log
    message = reply["choices"][0]["message"]
    second = ASK + [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "Sunny"}]
    with ServerProcess(tmp_path / "two", settings=settings(templated), state_dir=state) as server:
        calls, again = required_calls(server, "chat", second)
    assert_valid(calls)
    assert again["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, again["usage"]
