"""Exact on the Qwen3, MoE and MLA runtimes (issue 30): tiny random Qwen3, Qwen3-MoE, GLM-4.5, DeepSeek V3 and V3.2
(whose indexer keeps 32 of the prompt's tokens) checkpoints written by transformers, served on the defaults (bf16, ``engine.deterministic`` on), give
one conversation the same tokens and bit-identical logprobs (every field, floats compared with ==)
in four cases:

1. cold, in a cache namespace of its own;
2. after a conversation it forks from (a device hit on the shared passage);
3. inside a batch with three other requests sent at once;
4. restored from the SSD tier after a restart.

The control (``deterministic = false``) shows the prompts tell the modes apart: there the batch or
the fork changes at least one logprob.
"""

from __future__ import annotations

import threading
from typing import Optional

import openai
import pytest

from tests.adapters.exact_helpers import ask, difference, prompts
from tests.harness import ServerProcess
from tests.models.test_families_server import CHAT_FORMATS, write_checkpoint

pytestmark = pytest.mark.slow
TEXTS = prompts()[:4]
OTHER_QUESTION = "Name one tool this passage mentions."


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


def settings(directory, model_type: str, deterministic: bool = True, model_options: Optional[dict] = None) -> dict:
    """The server's settings; ``model_options``: more ``[model]`` keys (a dialect the checkpoint needs)."""
    model = {"path": str(directory), "name": f"tiny-{model_type}", "max_context": 1024, **(model_options or {})}
    if model_type in CHAT_FORMATS:
        model["chat_format"] = CHAT_FORMATS[model_type]
    return {"model": model, "cache": {"chunk_tokens": 32}, "engine": {"deterministic": deterministic}}


def forked_from(messages: list[dict]) -> list[dict]:
    """The same passage with another question: the conversation ``messages`` forks from."""
    passage = messages[0]["content"].rsplit("\n\n", 1)[0]
    return [{"role": "user", "content": passage + "\n\n" + OTHER_QUESTION}]


def batched(client, target: list[dict], salt: str):
    """``target`` answered inside a batch of four requests sent at once."""
    answers: dict[int, object] = {}
    conversations = [target, *[text for text in TEXTS if text is not target][:3]]

    def one(index: int) -> None:
        answers[index] = ask(client, conversations[index], salt, max_tokens=12)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(conversations))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers[0]


def four_ways(tmp_path, model_type: str, deterministic: bool = True, directory=None, target=None,
              model_options: Optional[dict] = None) -> dict:
    """The four answers of one conversation (``target``, else the first of ``TEXTS``); ``directory``:
    a checkpoint already written (else transformers writes ``model_type``'s); ``model_options``: see
    :func:`settings`."""
    directory = directory or write_checkpoint(tmp_path / model_type, model_type)
    state, target = tmp_path / "state", target or TEXTS[0]
    config = settings(directory, model_type, deterministic, model_options)
    with ServerProcess(tmp_path / "one", config, state_dir=state) as server:
        client = client_of(server)
        cold = ask(client, target, "cold", max_tokens=12)
        ask(client, forked_from(target), "fork", max_tokens=12)
        fork = ask(client, target, "fork", max_tokens=12)
        batch = batched(client, target, "batch")
    with ServerProcess(tmp_path / "two", config, state_dir=state) as server:
        restored = ask(client_of(server), target, "cold", max_tokens=12)
    return {"cold": cold, "fork": fork, "batch": batch, "restored": restored}


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_moe", "glm4_moe", "deepseek_v3", "deepseek_v32"])
def test_cold_fork_batch_and_restore_are_bit_identical(tmp_path, model_type):
    assert_bit_identical(four_ways(tmp_path, model_type))


def assert_bit_identical(runs: dict) -> None:
    """The fork, batch and restored runs give the cold run's tokens and logprobs, and reused the
    cache as their case says."""
    cold = runs["cold"]
    assert len(cold.tokens) == 12 and cold.device == cold.ssd == 0
    assert runs["fork"].device > 32, "the fork reused the shared passage"
    assert runs["restored"].ssd > 32, "the restart restored the prompt from SSD"
    for case in ("fork", "batch", "restored"):
        assert runs[case].output() == cold.output(), f"{case}: {difference(runs[case], cold)}"


def test_without_the_deterministic_mode_a_path_changes_the_logprobs(tmp_path):
    runs = four_ways(tmp_path, "qwen3_moe", deterministic=False)
    assert any(runs[case].tokens != runs["cold"].tokens for case in ("fork", "batch", "restored"))
