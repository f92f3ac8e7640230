"""A tiny random gpt-oss served by the real server: greedy answers equal transformers' (eager
attention, sinks and a 5-token sliding window over prompts of hundreds of tokens), the next turn
hits the device cache, and after a restart the same turn comes from the SSD tier with the same answer.

The checkpoint is random (no real one fits this machine) and carries the SmolLM2 tokenizer and a
ChatML-like template, so the test names the ``chatml_json`` dialect: the gpt-oss architecture
itself selects ``harmony`` (tested with that dialect's own module).
"""

from __future__ import annotations

import pytest

from tests.harness import ServerProcess
from tests.models.served import ask_greedy, transformers_answer
from tests.models.tiny_gpt_oss import write_tiny_gpt_oss

pytestmark = pytest.mark.slow

MAX_TOKENS = 12


def test_greedy_answers_equal_transformers_and_the_next_turn_comes_from_ssd_after_a_restart(tmp_path):
    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    model = write_tiny_gpt_oss(tmp_path / "model", tokenizer)
    eos = tokenizer.token_to_id("<|im_end|>")
    settings = {"model": {"path": str(tmp_path / "model"), "name": "tiny-gpt-oss", "dtype": "fp32",
                          "max_context": 1024, "dialect": "chatml_json"}, "cache": {"chunk_tokens": 64}}
    text = " ".join(f"Line {i}: the tide comes in and the tide goes out." for i in range(8))
    first = [{"role": "user", "content": text + " Write a haiku about it."}]
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "server", settings=settings, state_dir=state) as server:
        reply, prompt = ask_greedy(server, "tiny-gpt-oss", first, MAX_TOKENS)
        answer = reply["choices"][0]["message"]["content"]
        assert reply["usage"]["completion_tokens"] > 3 and answer
        assert answer == transformers_answer(model, tokenizer, eos, prompt, MAX_TOKENS)
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
        again, longer = ask_greedy(server, "tiny-gpt-oss", second, MAX_TOKENS)
        assert len(prompt) > 64 and longer[:len(prompt)] == prompt
        expected = transformers_answer(model, tokenizer, eos, longer, MAX_TOKENS)
        assert again["choices"][0]["message"]["content"] == expected
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(prompt) - 1, again["usage"]
        log = server.log()
    assert "with the gpt_oss runtime" in log and "dialect chatml_json" in log
    with ServerProcess(tmp_path / "restarted", settings=settings, state_dir=state) as server:
        restored, _ = ask_greedy(server, "tiny-gpt-oss", second, MAX_TOKENS)  # the state comes back from the SSD tier's chunks
    assert restored["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, restored["usage"]
    assert restored["choices"][0]["message"]["content"] == expected
