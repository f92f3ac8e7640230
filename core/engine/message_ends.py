"""Where a tokenized prompt's messages end: the positions right after each end-of-turn token.

Every chat template closes a message with one of the model's end-of-turn tokens (``<|im_end|>`` in
ChatML, ``<|eot_id|>`` in Llama 3), the ids ``ModelInfo.eos_token_ids`` lists as stop tokens. The
positions after them are where a later request most likely parts from this one: a sibling
conversation after the shared system prompt and tools, an edited or regenerated last turn. The
engine hands them to the runtime (:meth:`kvgate.core.runtime.ModelRuntime.mark_boundaries`), which
may keep recurrent-state snapshots there, together with the positions of the marked prefixes the
cache will pin (a client's ``cache_control`` breakpoints: each pin is a fork of the session there).
Read from the ids, not the rendered text: they are exact whatever the template wrote around the
messages.
"""

from __future__ import annotations

from typing import Collection, Sequence


def message_ends(prompt: Sequence[int], end_of_turn: Collection[int], after: int = 0) -> list[int]:
    """Ascending positions in ``(after, len(prompt))`` right after an ``end_of_turn`` token; the
    prompt's own end is left out (its state is kept anyway, as the session's end)."""
    ends = frozenset(end_of_turn)
    return [i + 1 for i in range(after, len(prompt) - 1) if prompt[i] in ends]


def prompt_boundaries(prompt: Sequence[int], end_of_turn: Collection[int], after: int,
                      pinned: Sequence[tuple[int, str]] = ()) -> list[int]:
    """Ascending: the message ends in ``(after, len(prompt))`` and the positions inside it of the
    marks the cache will pin (``CachePlan.retained_marks``: ``(position, ttl)``)."""
    marks = {position for position, _ in pinned if after < position < len(prompt)}
    return sorted(marks.union(message_ends(prompt, end_of_turn, after)))
