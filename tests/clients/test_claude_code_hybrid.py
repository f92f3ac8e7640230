"""Claude Code (the real npm client, as tests/clients/test_claude_code.py installs and runs it) against
kvgate serving a tiny random Qwen3.5, a hybrid, with the ChatML template and ``qwen3_coder_xml``
dialect tests/models/test_qwen3_5_server.py serves it with.

Two ``claude -p --bare`` runs in one folder with different prompts share Claude Code's system
prompt and tools (~1,400 tokens) and part in the first user message, as two sessions of one agent
do. Both exit 0, and the second is served from the first's cache: all but its last few prompt
tokens, with a replay from the recurrent-state snapshot at the end of the system prompt to where
the prompts part. That replay is Claude Code's first-message reminder (the date; ~90 tokens, the
same in every session of the day), which opens both user messages: no message ends inside it.

The checkpoint is random, with one answer planted so that Claude Code gets a well-formed short
turn (a random model rambles past any output cap, and Claude Code then ends with an error): the
embeddings are scaled up so that the last hidden state is mostly the last token's embedding, and
two rows of the output head follow it: after the assistant header's newline "Hello", after
"Hello" ``<|im_end|>``.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.clients.test_claude_code import claude_bin, prompt_token_counts, run_claude  # noqa: F401 (fixture)
from tests.harness import ServerProcess
from tests.models.test_qwen3_5_replay_server import metric
from tests.models.test_qwen3_5_server import TEMPLATE
from tests.models.tiny_qwen3_5 import randomise, text_config

pytestmark = pytest.mark.slow


def write_planted_checkpoint(directory) -> None:
    from transformers import AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    config = text_config(vocab=tokenizer.get_vocab_size(), max_position_embeddings=32768)
    config.eos_token_id, config.bos_token_id = tokenizer.token_to_id("<|im_end|>"), None
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    randomise(model)
    newline = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False).ids[-1]
    hello = tokenizer.token_to_id("Hello")
    with torch.no_grad():
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.mul_(100)
        model.model.norm.weight.zero_()  # zero-centred: a scale of 1
        head[hello] = 2.5 * embed[newline] / embed[newline].norm()
        head[config.eos_token_id] = 2.5 * embed[hello] / embed[hello].norm()
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "eos_token": "<|im_end|>"}))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("claude_code_hybrid")
    write_planted_checkpoint(root / "model")
    settings = {"model": {"path": str(root / "model"), "name": "tiny-qwen3_5", "dtype": "fp32"},
                "engine": {"default_max_tokens": 32}}
    with ServerProcess(root / "server", settings=settings) as proc:
        yield proc


def test_two_sessions_on_one_system_prompt_the_second_from_cache(claude_bin, server, tmp_path):  # noqa: F811
    code, first = run_claude(claude_bin, server, tmp_path, "Say hello", "--bare")
    assert code == 0 and first["is_error"] is False and first["result"] == "Hello", (first, server.log()[-3000:])
    assert "'tiny-qwen3_5': qwen3_5, dialect qwen3_coder_xml" in server.log()
    before, replayed = prompt_token_counts(server), metric(server, "kvgate_cache_replayed_tokens_total", tier="device")
    code, second = run_claude(claude_bin, server, tmp_path, "Say goodbye", "--bare")
    assert code == 0 and second["is_error"] is False and second["result"] == "Hello", (second, server.log()[-3000:])
    after = prompt_token_counts(server)
    cached = after.get("device", 0) - before.get("device", 0)
    total = sum(after.values()) - sum(before.values())
    print(f"second run: {cached:.0f} of {total:.0f} prompt tokens from cache, "
          f"{metric(server, 'kvgate_cache_replayed_tokens_total', tier='device') - replayed:.0f} replayed")
    assert total > 1000 and cached / total > 0.9, (cached, total)
    assert metric(server, "kvgate_cache_replayed_tokens_total", tier="device") - replayed < 128  # the reminder
    assert set(re.findall(r"POST /v1/messages\?beta=true (\d{3})", server.log())) == {"200"}
