"""Message ends of a ChatML prompt tokenized by SmolLM2's real tokenizer: right after each
``<|im_end|>``, the prompt's own end and the part already in state left out; with them, the
positions of the marks the cache will pin."""

from __future__ import annotations

from kvgate.core.engine.message_ends import message_ends, prompt_boundaries
from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

MESSAGES = [("system", "You are terse. Tools: read, write."), ("user", "Hello there."),
            ("assistant", "Hi.")]


def chatml(messages) -> str:
    return "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)


def test_positions_right_after_each_end_of_turn_token():
    tokenizer = smollm2_from_gguf()
    end = tokenizer.token_to_id("<|im_end|>")
    prompt = tokenizer.encode(chatml(MESSAGES[:3]) + "<|im_start|>assistant\n", add_special_tokens=False).ids
    ends = message_ends(prompt, [end, tokenizer.token_to_id("<|endoftext|>")])
    expected = [len(tokenizer.encode(chatml(MESSAGES[:n]), add_special_tokens=False).ids) - 1 for n in (1, 2, 3)]
    assert ends == expected and all(prompt[p - 1] == end for p in ends)  # before each "\n" that follows
    assert message_ends(prompt, [end], after=ends[0]) == ends[1:]  # the cached part is not prefilled again
    assert message_ends(prompt[:ends[-1]], [end]) == ends[:-1]  # the prompt's end is kept anyway
    assert message_ends(prompt, []) == [] and message_ends([], [end]) == []



def test_pinned_marks_join_the_message_ends_inside_the_part_to_prefill():
    tokenizer = smollm2_from_gguf()
    end = tokenizer.token_to_id("<|im_end|>")
    prompt = tokenizer.encode(chatml(MESSAGES) + "<|im_start|>assistant\n", add_special_tokens=False).ids
    ends = message_ends(prompt, [end])
    marks = [(ends[0] - 1, "5m"), (ends[1], "1h"), (3, "5m"), (len(prompt), "5m")]
    assert prompt_boundaries(prompt, [end], 0, marks) == [3, ends[0] - 1, *ends]  # once each, ascending
    assert prompt_boundaries(prompt, [end], ends[0], marks) == ends[1:]  # the prompt's end is no boundary
