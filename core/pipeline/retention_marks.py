"""Where a request's retention hints fall in its prompt, and what usage reports they wrote.

A hint names the conversation up to its marked block (:class:`kvgate.core.types.RetentionHint`).
That conversation is rendered without a generation prompt and tokenized; its common prefix with
the prompt's tokens is the marked position: whatever a template appends after a turn, and any
token merged across the boundary, is left out, so a position never claims more than the prompt
holds. A hint whose partial conversation the template cannot render is ignored (logged).
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import attrs

from kvgate.core.cache.namespace import common_prefix
from kvgate.core.cache.retention import Retention, RetentionMark
from kvgate.core.types import ChatRequest, RetentionHint

log = logging.getLogger("kvgate")


def retention_of(pipeline: Any, request: ChatRequest, prompt: list[int]) -> Optional[Retention]:
    """The request's marks as token positions (blocking: call it on a worker thread)."""
    marks = []
    for hint in request.retention:
        position = len(prompt) if hint.messages is None else marked_position(pipeline, request, hint, prompt)
        if position:
            marks.append(RetentionMark(position, hint.ttl, hint.ttl_seconds))
    return Retention(request.tenant.name, tuple(marks)) if marks else None


def marked_position(pipeline: Any, request: ChatRequest, hint: RetentionHint, prompt: list[int]) -> int:
    partial = attrs.evolve(request, messages=hint.messages, tools=hint.tools, retention=[])
    try:
        text = pipeline.chat_format.render(partial, add_generation_prompt=False)
    except Exception as exc:  # e.g. a template that wants a user turn: the hint cannot be placed
        log.info("retention hint ignored: the template cannot render the prefix it marks (%s)", exc)
        return 0
    return common_prefix(pipeline.tokenizer.encode_prompt(text, pipeline.namespace_of(request)), prompt)


def written_by_ttl(retained: Sequence[tuple[int, str]], cached: int) -> dict[str, int]:
    """Prompt tokens the kept marks wrote, by TTL: each mark from where the cache read or the
    previous mark ended, to its position."""
    written: dict[str, int] = {}
    start = cached
    for position, ttl in sorted(retained):
        if position > start:
            written[ttl] = written.get(ttl, 0) + position - start
            start = position
    return written
