"""Shared streaming machinery for the dialect parsers.

A parser is a state machine over a text buffer. Each state method looks at the undecided text,
consumes what it can decide, emits events, and returns False when it must wait for more input.
Waiting is the hold-back rule: text that could still become a tag is never emitted early, so a
stream split at any position yields the same events (after merging deltas) as the whole text.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from kvgate.core.dialect import StreamParser
from kvgate.core.types import Event, ParseIssue, ReasoningDelta, TextDelta

NEED_MORE = object()
"""Returned by readers that cannot decide yet."""


def partial_suffix_len(text: str, literals: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``literals``."""
    best = 0
    for literal in literals:
        for size in range(min(len(literal) - 1, len(text)), best, -1):
            if text.endswith(literal[:size]):
                best = size
                break
    return best


def find_first(text: str, literals: Sequence[str], start: int = 0) -> tuple[int, Optional[str]]:
    """Earliest occurrence of any literal (the longest one wins a tie): (position, literal)."""
    found, which = -1, None
    for literal in literals:
        pos = text.find(literal, start)
        if pos < 0:
            continue
        if found < 0 or pos < found or (pos == found and len(literal) > len(which)):
            found, which = pos, literal
    return found, which


class StateParser(StreamParser):
    """Base of the dialect parsers: a buffer, an event list and the current state method."""

    tool_states: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.buf = ""
        self.fed = 0  # characters fed so far: ``buf`` starts at ``fed - len(buf)``
        self.scanned_at = 0  # where the head of the last scan started
        self.final = False
        self.events: list[Event] = []
        self.state: Callable[[], bool] = self.start_state()

    def start_state(self) -> Callable[[], bool]:
        raise NotImplementedError

    def skip_block(self) -> bool:
        """State: skip the rest of a tool-calls block that cannot be read and report it as
        ``self.problem`` (for parsers with a ``block_close`` literal, ``raw`` text, an ``in_block``
        flag and a ``content`` state)."""
        head, tag = self.scan([self.block_close])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        self.issue(self.problem, self.raw)
        self.in_block, self.raw = False, ""
        return self.goto(self.content)

    def feed(self, text: str) -> list[Event]:
        self.buf += text
        self.fed += len(text)
        self._run()
        return self._take()

    def finish(self) -> list[Event]:
        self.final = True
        self._run()
        self.at_end()
        return self._take()

    def at_end(self) -> None:
        """Called once after the final run; report what was left open."""

    @property
    def in_tool_region(self) -> bool:
        return getattr(self.state, "__name__", "") in self.tool_states

    def _run(self) -> None:
        while self.state():
            pass

    def _take(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    # ---- helpers for states

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def issue(self, message: str, raw: str = "") -> None:
        self.events.append(ParseIssue(message=message, raw=raw))

    def text(self, text: str) -> None:
        """Emit the head of the last :meth:`scan` as answer text (with where it starts)."""
        if text:
            self.events.append(TextDelta(text, at=self.scanned_at))

    def reasoning(self, text: str) -> None:
        if text:
            self.events.append(ReasoningDelta(text))

    def goto(self, state: Callable[[], bool]) -> bool:
        self.state = state
        return True

    def take(self, size: int) -> str:
        head, self.buf = self.buf[:size], self.buf[size:]
        return head

    def scan(self, literals: Sequence[str]) -> tuple[str, Optional[str]]:
        """Consume text up to the first literal (and the literal itself).

        Returns (decided text, literal) or, with no literal found, the text that can no longer
        begin one and None. At the end of output everything is decided.
        """
        pos, literal = find_first(self.buf, literals)
        self.scanned_at = self.fed - len(self.buf)
        if literal is not None:
            head = self.take(pos)
            self.take(len(literal))
            return head, literal
        keep = 0 if self.final else partial_suffix_len(self.buf, literals)
        return self.take(len(self.buf) - keep), None

    def expect(self, literal: str, skip_space: bool = True) -> object:
        """Consume ``literal`` (after optional whitespace): True, False (mismatch) or NEED_MORE."""
        stripped = self.buf.lstrip(" \t\r\n") if skip_space else self.buf
        if stripped.startswith(literal):
            self.buf = stripped[len(literal):]
            return True
        if literal.startswith(stripped) and not self.final:
            return NEED_MORE
        return False

    def optional(self, literal: str) -> object:
        """Consume ``literal`` if the buffer starts with it: True/False, or NEED_MORE."""
        if self.buf.startswith(literal):
            self.take(len(literal))
            return True
        if literal.startswith(self.buf) and not self.final:
            return NEED_MORE
        return False


class NewlineThinkStates:
    """Reasoning states for the Qwen layout, ``'<think>' ['\\n'] reasoning ['\\n'] '</think>'``
    then ``'\\n\\n'`` (or ``'\\n'``) before the text, for a :class:`StateParser` entering
    :meth:`think_open` right after ``<think>``; text resumes in the state :meth:`text_state` names."""

    def text_state(self) -> Callable[[], bool]:
        raise NotImplementedError

    def think_open(self) -> bool:
        return self.optional("\n") is not NEED_MORE and self.goto(self.reasoning_text)

    def reasoning_text(self) -> bool:
        head, tag = self.scan(["\n</think>", "</think>"])
        self.reasoning(head)
        if tag is not None:
            return self.goto(self.after_think)
        return bool(head)

    def after_think(self) -> bool:
        got = self.optional("\n\n")
        if got is NEED_MORE or (got is False and self.optional("\n") is NEED_MORE):
            return False
        return self.goto(self.text_state())
