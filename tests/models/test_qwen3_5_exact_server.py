"""Exact on the hybrids (issues 30 and 28): tiny random Qwen3.5, Qwen3.5-MoE and Qwen3-Next
checkpoints written by transformers (test_qwen3_5_server.py's), served on the defaults (bf16,
``engine.deterministic`` on), give one conversation the same tokens and bit-identical logprobs in the
four cases of test_moe_exact_server.py, with its helpers: cold, after a fork, inside a batch of four,
restored from SSD after a restart.

The fork lands at an unaligned token (a multiple of neither the delta rule's chunk, the cache chunk
nor the state stride) inside the prompt of the conversation it forks from: the runtime restores the
nearest snapshot before it (the prompt's start, or a chunk end its SSD export kept) and replays the
tokens in between.

A server drafting with the n-gram drafter (``speculative_ngram = 4``) answers as a plain one, every
logprob included, a conversation built so that a draft is taken in part: its counters show drafts
both accepted and rejected (a rejected draft rolls the recurrent state back to an unaligned token).
The control (``deterministic = false``, Qwen3.5-MoE) shows the four cases tell the modes apart.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.adapters.exact_helpers import ask, difference
from tests.harness import ServerProcess
from tests.models.test_moe_exact_server import assert_bit_identical, client_of, four_ways, settings
from tests.models.test_qwen3_5_server import write_checkpoint
from tests.models.tiny_qwen3_5 import RUNTIMES

pytestmark = pytest.mark.slow
# fixed text (TEXTS come from the README, which changes): it shares 214 tokens with the conversation
# it forks from (test_moe_exact_server.forked_from)
PASSAGE = "\n".join(f"Step {i}: the gateway reads the request, looks up the cache and streams the answer back."
                    for i in range(10))
TARGET = [{"role": "user", "content": PASSAGE + "\n\nSummarize the passage above in one sentence."}]
ALIGNMENTS = (64, 32, 4096)  # the delta rule's chunk, the test servers' chunk_tokens, the state stride
# usage rounds cached tokens down to the 16-token block: a count that is a multiple of none of these
# leaves the fork point (in the block it starts) a multiple of none either


@pytest.fixture(scope="module", params=list(RUNTIMES))
def served(request, tmp_path_factory) -> tuple:
    """(model type, checkpoint directory, the four answers of test_moe_exact_server.four_ways)."""
    model_type, folder = request.param, tmp_path_factory.mktemp(request.param)
    write_checkpoint(folder / "model", model_type)
    return model_type, folder / "model", four_ways(folder, model_type, directory=folder / "model", target=TARGET)


def test_cold_fork_at_an_unaligned_token_batch_and_restore_are_bit_identical(served):
    fork_at = served[2]["fork"].device
    assert all(fork_at % alignment for alignment in ALIGNMENTS), f"the fork at {fork_at} is aligned"
    assert_bit_identical(served[2])


def counter(metrics: str, name: str) -> float:
    return float(re.search(rf"^vllm:spec_decode_num_{name}_tokens_total (\S+)$", metrics, re.M).group(1))


def asked_again(cold) -> list[dict]:
    """TARGET, the cold answer with its seventh token left out, and TARGET again: the n-gram drafter
    drafts the earlier answer, which the model takes in part and rejects where it parts from it."""
    tokens = [token[0] for token in cold.tokens]
    return [TARGET[0], {"role": "assistant", "content": "".join(tokens[:6] + tokens[7:])}, TARGET[0]]


def test_ngram_speculation_gives_the_plain_greedy_answer(served, tmp_path):
    model_type, directory, runs = served
    conversation, answers = asked_again(runs["cold"]), {}
    for draft in (0, 4):
        speculating = settings(directory, model_type)
        speculating["engine"]["speculative_ngram"] = draft
        with ServerProcess(tmp_path / str(draft), speculating, state_dir=tmp_path / str(draft)) as server:
            answers[draft] = ask(client_of(server), conversation, "again", max_tokens=12)
            metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
    drafted, accepted = counter(metrics, "draft"), counter(metrics, "accepted")
    assert drafted > accepted > 0, f"{drafted} drafted, {accepted} accepted: no draft was cut"
    assert answers[4].output() == answers[0].output(), difference(answers[4], answers[0])


def test_without_the_deterministic_mode_a_path_changes_the_logprobs(tmp_path):
    write_checkpoint(tmp_path / "model", "qwen3_5_moe_text")
    runs = four_ways(tmp_path, "qwen3_5_moe_text", deterministic=False, directory=tmp_path / "model", target=TARGET)
    assert any(runs[case].tokens != runs["cold"].tokens for case in ("fork", "batch", "restored"))
