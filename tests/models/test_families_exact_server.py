"""Exact on MiniMax M2, gpt-oss and Gemma 4 (issue 30): each family's tiny random checkpoint of its
server test, served on the defaults (bf16, ``engine.deterministic`` on), gives one conversation the
same tokens and bit-identical logprobs cold, after a conversation it forks from, in a batch of four
and restored from SSD after a restart -- the four cases of test_moe_exact_server.py, with its helpers.

Logprobs cover the answer, not the reasoning, and a random model's reasoning never closes, so the
checkpoints answer without it: MiniMax M2 carries its official template with the thinking block
closed unless a request turns thinking on; gpt-oss carries test_gpt_oss_server.py's ChatML template
and ``chatml_json`` dialect (under harmony, its own, a random model's answer is all analysis);
Gemma 4's chat format already opens with an empty thought.

The control (``deterministic = false``) shows the prompts tell the modes apart on MiniMax M2 and
Gemma 4. On gpt-oss it cannot: there the fast path too gives all four answers bit-identical on CPU
(as the runtime's own prefill split and batched decode do at this checkpoint's size and wider ones).

On these and on Qwen3, Qwen3-MoE, DeepSeek V3 and V3.2 (GLM-4.5: test_mtp_server.py), a server drafting with the n-gram drafter (``speculative_ngram``) makes the same required tool call
as one that does not, the drafter reading the call an earlier turn made (its draft counter shows it
drafted; a random model's plain answers repeat no earlier token, so they give it nothing to draft).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_families_server import ASK, TOOL
from tests.models.test_moe_exact_server import assert_bit_identical, four_ways, settings

pytestmark = pytest.mark.slow

THINKING_OFF = ("{%- if enable_thinking is not defined or enable_thinking is false -%}"
                "{{- '\\n</think>\\n\\n' }}{%- endif -%}")


def minimax_m2(directory) -> dict:
    from tests.models.test_minimax_m2_server import GENERATION, OFFICIAL, write_checkpoint

    write_checkpoint(directory)
    template = OFFICIAL.replace(GENERATION, GENERATION + THINKING_OFF)
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "[e~[", "chat_template": template}))
    return {}


def gpt_oss(directory) -> dict:
    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf
    from tests.models.tiny_gpt_oss import write_tiny_gpt_oss

    write_tiny_gpt_oss(directory, smollm2_from_gguf())
    return {"dialect": "chatml_json"}


def gemma4(directory) -> dict:
    from tests.models.test_gemma4_server import write_checkpoint

    write_checkpoint(directory)
    return {}


# an earlier call in the history: the n-gram drafter finds the call's syntax and values in the prompt
EARLIER = {"id": "call_1", "type": "function", "function": {"name": "get_forecast",
                                                            "arguments": json.dumps({"city": "Lyon", "days": 3})}}
CALLED_BEFORE = ASK + [{"role": "assistant", "content": "", "tool_calls": [EARLIER]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
                       {"role": "user", "content": "And for Oslo, 2 days?"}]


def families_server(model_type: str):
    """test_families_server.py's checkpoint of ``model_type`` (its chat format comes with ``settings``)."""
    def write(directory) -> dict:
        from tests.models.test_families_server import write_checkpoint

        write_checkpoint(directory, model_type)
        return {}
    return write


NEWEST = {"minimax_m2": minimax_m2, "gpt_oss": gpt_oss, "gemma4": gemma4}  # checkpoint -> [model] keys it needs
# the four-way test of these is test_moe_exact_server.py's; their speculation is checked here (GLM-4.5's
# by test_mtp_server.py with its own draft layer: on this checkpoint the n-gram drafter proposes nothing)
WRITERS = {**NEWEST, **{t: families_server(t) for t in ("qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v32")}}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """model type -> (checkpoint directory, the [model] keys it is served with), each written once."""
    checkpoints: dict[str, tuple] = {}

    def of(model_type: str) -> tuple:
        if model_type not in checkpoints:
            directory = tmp_path_factory.mktemp(model_type) / "model"
            checkpoints[model_type] = directory, WRITERS[model_type](directory)
        return checkpoints[model_type]
    return of


@pytest.mark.parametrize("model_type", sorted(NEWEST))
def test_cold_fork_batch_and_restore_are_bit_identical(written, tmp_path, model_type):
    directory, options = written(model_type)
    assert_bit_identical(four_ways(tmp_path, model_type, directory=directory, model_options=options))


@pytest.mark.parametrize("model_type", ["gemma4", "minimax_m2"])  # gpt-oss: see the module's docstring
def test_without_the_deterministic_mode_a_path_changes_the_logprobs(written, tmp_path, model_type):
    directory, options = written(model_type)
    runs = four_ways(tmp_path, model_type, deterministic=False, directory=directory, model_options=options)
    assert any(runs[case].output() != runs["cold"].output() for case in ("fork", "batch", "restored"))


def required_call(server, model_type: str) -> tuple:
    """The greedy required call after :data:`CALLED_BEFORE`: (function, completion tokens)."""
    reply = post(server, "/v1/chat/completions", {
        "model": f"tiny-{model_type}", "messages": CALLED_BEFORE, "tools": [TOOL], "tool_choice": "required",
        "parallel_tool_calls": False, "max_tokens": 200, "temperature": 0})
    assert reply["choices"][0]["finish_reason"] == "tool_calls", reply
    return reply["choices"][0]["message"]["tool_calls"][0]["function"], reply["usage"]["completion_tokens"]


def draft_counters(server) -> tuple[float, float]:
    """(tokens drafted, tokens accepted) on the server's /metrics."""
    metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
    return tuple(float(re.search(rf"^vllm:spec_decode_num_{name}_tokens_total (\S+)$", metrics, re.M).group(1))
                 for name in ("draft", "accepted"))


@pytest.mark.parametrize("model_type", sorted(WRITERS))
def test_ngram_speculation_answers_as_plain_decoding(written, tmp_path, model_type):
    directory, options = written(model_type)
    results = {}
    for draft in (0, 4):
        config = settings(directory, model_type, model_options=options)
        config["engine"]["speculative_ngram"] = draft
        with ServerProcess(tmp_path / f"draft{draft}", config, state_dir=tmp_path / f"state{draft}") as server:
            results[draft] = required_call(server, model_type)
            drafted, accepted = draft_counters(server)
        assert (drafted > 0) == (draft > 0), (drafted, accepted)
    assert results[4] == results[0]
    assert results[0][0]["name"] == "get_forecast"
