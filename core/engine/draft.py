"""How a draft is cut to what the fence allows.

:func:`draft_for` puts the tokens the fence forces first (they need no logit work: the grammar
allows nothing else), asks a :class:`kvgate.core.drafter.Drafter` for the rest and cuts the draft
at the first token a clone of the fence refuses, or at a stop token.
"""

from __future__ import annotations

from kvgate.core.drafter import Drafter
from kvgate.core.engine.sequence import Sequence


def draft_for(seq: Sequence, max_draft: int, room: int, source: Drafter) -> tuple[list[int], int]:
    """(draft, how many of its first tokens the fence forces), checked against a fence clone."""
    limit = min(max_draft, room)
    if limit <= 0:
        return [], 0
    fence = seq.fence
    forced = list(fence.forced_tokens()[:limit]) if fence is not None else []
    draft = forced + source.propose(seq, forced, limit - len(forced))
    if len(draft) == len(forced):
        return draft, len(forced)
    check = fence.clone() if fence is not None else None
    for token in forced:
        check.advance(token)
    for index in range(len(forced), len(draft)):
        if draft[index] in seq.stop_token_ids:
            return draft[:index], len(forced)
        if check is not None:
            check.set_budget(seq.budget_left() - index)
            if not check.allows(draft[index]):
                return draft[:index], len(forced)
            check.advance(draft[index])
    return draft, len(forced)
