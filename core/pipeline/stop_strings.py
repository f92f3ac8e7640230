"""Stop strings over streamed text: hold back what could still begin a stop string.

Every token's text is checked against every stop string on the event loop, so a request carries at
most :data:`MAX_STOP_STRINGS` of them, each at most :data:`MAX_STOP_CHARS` characters
(:func:`check_stop_strings`, called by each adapter that takes them): a request can never make
the scan cost more than that per token.
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.errors import InvalidRequest

MAX_STOP_STRINGS = 32
MAX_STOP_CHARS = 512


def check_stop_strings(stops: list[str], param: str) -> list[str]:
    """``stops`` when within the limits, else InvalidRequest naming ``param``."""
    if len(stops) > MAX_STOP_STRINGS:
        raise InvalidRequest(f"'{param}' has {len(stops)} stop strings; at most {MAX_STOP_STRINGS} are allowed.",
                             param=param)
    longest = max((len(stop) for stop in stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise InvalidRequest(f"A stop string in '{param}' has {longest} characters; at most {MAX_STOP_CHARS} "
                             "are allowed.", param=param)
    return stops


class StopStringScanner:
    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def _held_suffix(self) -> int:
        """Length of the longest suffix of pending text that is a proper prefix of a stop string."""
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(self.pending)), longest, -1):
                if self.pending.endswith(stop[:size]):
                    longest = size
                    break
        return longest

    def push(self, text: str) -> tuple[str, Optional[str]]:
        """Returns (text safe to emit, the stop string hit or None). After a hit, emit nothing more."""
        if not self.stops:
            return text, None
        self.pending += text
        hits = [(self.pending.find(stop), stop) for stop in self.stops if stop in self.pending]
        if hits:
            index, stop = min(hits)
            out, self.pending = self.pending[:index], ""
            return out, stop
        cut = len(self.pending) - self._held_suffix()
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, None

    def flush(self, text: str = "") -> str:
        """End of output: everything held back is text after all (unless a stop string completes)."""
        out, hit = self.push(text)
        rest, self.pending = ("" if hit else self.pending), ""
        return out + rest
