"""When the loop guard ends a reply: its interventions crowd the recent output.

The loop guard's exclusions (:mod:`kvgate.plugins.loop_guard`) only vary a repetition; a model
that is circling writes the next variation and comes back to the loop. :class:`LoopEnd` keeps the
output positions at which a loop rule (a run of one token, a repeated pattern) had to exclude a
token. Once ``stop_after`` of them fall within the last ``window`` output tokens, the loop is
clear and the reply ends: continuing it only writes more of the same.
"""

from __future__ import annotations

from collections import deque


class LoopEnd:
    """The stop criterion: ``stop_after`` interventions within ``window`` tokens (0: never)."""

    def __init__(self, stop_after: int, window: int):
        self.stop_after = stop_after
        self.window = window
        self.positions: deque[int] = deque()  # output positions where a loop rule excluded a token

    def clone(self) -> "LoopEnd":
        twin = LoopEnd(self.stop_after, self.window)
        twin.positions = deque(self.positions)
        return twin

    def record(self, position: int) -> None:
        """A loop rule excluded a token at output ``position``."""
        self.positions.append(position)
        while self.positions and self.positions[0] <= position - self.window:
            self.positions.popleft()

    def reached(self) -> bool:
        return self.stop_after > 0 and len(self.positions) >= self.stop_after

    def forget(self) -> None:
        """Start counting afresh (the reasoning was closed: the answer gets its own count)."""
        self.positions.clear()
