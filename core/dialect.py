"""The contract of a tool dialect: one model's native tool-call syntax.

A dialect owns four operations that are exact inverses of each other:

1. tool instruction injection (tool definitions into the prompt),
2. tool-call history rendering (an assistant message's calls back into model text),
3. tool-result rendering,
4. incremental parsing of model output into canonical events.

Rendering a parsed call must give back exactly the text that was generated, otherwise the next
turn's prompt forks from the cached prefix at the tool call. The streaming parser never emits a
piece of text that could still become a tag: it holds such text back until it is decided.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Optional

from kvgate.core.types import Event, Message, Tool, ToolChoice

CallIdFactory = Callable[[int, str], str]
"""``call_id(index, name)`` -> the id of the index-th call in this response."""


class StreamParser(abc.ABC):
    """Per-response incremental parser. Feed decoded text as it arrives; events come out."""

    @abc.abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Consume the next piece of model output; return the events it decides.

        Emits TextDelta, ReasoningDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd and
        ParseIssue events, in order.
        """

    @abc.abstractmethod
    def finish(self) -> list[Event]:
        """End of output: flush held-back text and report unclosed blocks as ParseIssue."""

    @property
    def in_tool_region(self) -> bool:
        """True while the output is inside a tool-call structure (used by fences and guards)."""
        return False


class Dialect(abc.ABC):
    """One tool-call syntax. Instances are cheap and immutable; options select a variant."""

    name: str = ""

    @abc.abstractmethod
    def render_messages(
        self,
        messages: list[Message],
        tools: list[Tool],
        tool_choice: ToolChoice,
        *,
        thinking: Optional[bool] = None,
    ) -> list[dict[str, Any]]:
        """Turn canonical messages into ``{"role", "content"}`` dicts for the model's chat template.

        Tools are injected into the system turn, assistant tool calls rendered into the assistant
        content, tool results rendered as the turn the model expects. Tools stay rendered even when
        ``tool_choice`` is ``none`` (prefix stability).
        """

    @abc.abstractmethod
    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *, start_in: str = "content") -> StreamParser:
        """A fresh incremental parser for one response.

        ``start_in`` is where the prompt left the model: ``"content"``, ``"reasoning"`` (the prompt
        ended inside a thinking block) or ``"after_reasoning"``; chat formats say which through
        ``parser_start(request)``.
        """

    def render_tool_call(self, name: str, arguments: str) -> str:
        """The exact text of one call as the model writes it (used by tests and fences)."""
        raise NotImplementedError

    @property
    def literals(self) -> dict[str, str]:
        """Named literal strings of the syntax (trigger, open/close tags, separators)."""
        return {}

    @property
    def trigger(self) -> str:
        """The text whose appearance starts a tool call in ``auto`` mode."""
        return self.literals.get("trigger", "")
