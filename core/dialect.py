"""The contract of a tool dialect: one model's native tool-call syntax.

A dialect owns four operations that are exact inverses of each other:

1. tool instruction injection (tool definitions into the prompt),
2. tool-call history rendering (an assistant message's calls back into model text),
3. tool-result rendering,
4. incremental parsing of model output into canonical events;

and a fifth that follows from them: the fence grammar (``fence_grammar``), which only lets the
model write what the parser reads as a valid call. It also says which models it serves
(``serves``) and which of its variants fits a model (``variant_for``), so the host names no dialect.

Rendering a parsed call must give back exactly the text that was generated, otherwise the next
turn's prompt forks from the cached prefix at the tool call. The streaming parser never emits a
piece of text that could still become a tag: it holds such text back until it is decided.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Callable, Optional

from kvgate.core.types import Event, Message, Tool, ToolCall, ToolChoice

if TYPE_CHECKING:
    from kvgate.core.fence.grammar import Node
    from kvgate.core.fence.plan import FencePlan

CallIdFactory = Callable[[int, str], str]
"""``call_id(index, name)`` -> the id of the index-th call in this response."""

FALLBACK = 1
"""``serves`` score of a dialect that takes any model no other dialect claims."""
TEMPLATE_MATCH = 50
"""``serves`` score of a dialect whose markup appears in the model's chat template."""
ARCHITECTURE_MATCH = 100
"""``serves`` score of a dialect made for the model's architecture."""


CLOSING_LITERAL_KEYS = ("value_close", "param_close", "call_close", "invoke_close", "block_close")


def named_closing_literals(literals: dict[str, str]) -> list[str]:
    """The literals named in ``CLOSING_LITERAL_KEYS``, in that order."""
    return [literals[key] for key in CLOSING_LITERAL_KEYS if literals.get(key)]

class StreamParser(abc.ABC):
    """Per-response incremental parser. Feed decoded text as it arrives; events come out.

    A call's life: ``ToolCallStart`` once its tool name is known, ``ToolCallArgsDelta`` pieces as
    its arguments arrive, then exactly one ending. ``ToolCallEnd`` ends a *completed* call: its
    arguments are one JSON object, each value typed by the tool's schema, and a client may run it.
    A started call that cannot be completed (the output ends inside it, or its text cannot be read
    as a JSON object) gets a ParseIssue saying why and **no** ``ToolCallEnd``; the deltas already
    sent stand, and the next call takes the next index. The pipeline then ends the response with
    an error (with ``length`` when the output limit cut the call), so no protocol presents an
    unfinished call as one to run. The start is not held back: arguments stream as they arrive.

    ParseIssues also report text that was not read as a call (an unknown tool: nothing is started)
    and variants that were read into a completed call (arguments written as a JSON string, an
    escaped or mis-flagged value typed by the schema): those calls end normally.
    """

    @abc.abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Consume the next piece of model output; return the events it decides.

        Emits TextDelta, ReasoningDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd and
        ParseIssue events, in order. A TextDelta should say where its text starts (``at``, in
        characters of all text fed so far): that is how logprobs find the tokens of answer text.
        """

    @abc.abstractmethod
    def finish(self) -> list[Event]:
        """End of output: flush held-back text and report unclosed blocks as ParseIssue."""

    @property
    def in_tool_region(self) -> bool:
        """True while the output is inside a tool-call structure (used by fences and guards)."""
        return False


class Dialect(abc.ABC):
    """One tool-call syntax. Instances are cheap and immutable; options select a variant.

    The registered factory is normally the subclass itself, called as ``factory()`` or
    ``factory(variant=...)`` (``[model] dialect_variant``).
    """

    name: str = ""
    variant: str = ""
    """The variant this instance renders ("" for a dialect without variants)."""

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        """How well this dialect fits a model: 0 = not at all, higher = better (see ``FALLBACK``,
        ``TEMPLATE_MATCH``, ``ARCHITECTURE_MATCH``). ``architecture`` is the runtime's architecture
        name, ``chat_template`` the model's Jinja template ("" when it has none). When ``[model]
        dialect`` is empty the best score serves; a dialect that only answers 0 must be configured."""
        return 0

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        """The variant to build for this model when ``[model] dialect_variant`` is empty; "" = the
        factory's default."""
        return ""

    def chat_format_without_template(self) -> str:
        """The registered chat format that renders this dialect's prompts for a model that ships
        no Jinja template (used when ``[model] chat_format`` is empty); "" = none."""
        return ""

    def chat_format_over_template(self) -> str:
        """The registered chat format that renders this dialect's prompts even for a model that
        ships a Jinja template, when that template cannot write back what the model generates
        (gpt-oss: ``harmony``); "" = the template.
        ``[model] chat_format = "jinja"`` still picks the template."""
        return ""

    def template_tools(self, tools: list[Tool]) -> Optional[list[dict[str, Any]]]:
        """The ``tools`` variable for the model's Jinja template, for a dialect whose template
        declares the tools itself (``render_messages`` then leaves them out); None = the template
        gets no ``tools`` (the default: the dialect writes them into the system turn)."""
        return None

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

        Tools are injected into the system turn (unless ``template_tools`` hands them to the
        template), assistant tool calls rendered into the assistant content, tool results rendered as the turn the model expects. Tools stay rendered even when
        ``tool_choice`` is ``none`` (prefix stability).
        """

    @abc.abstractmethod
    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *, start_in: str = "content") -> StreamParser:
        """A fresh incremental parser for one response.

        ``start_in`` is where the prompt left the model: ``"content"``, ``"reasoning"`` (the prompt
        ended inside a thinking block) or ``"after_reasoning"``; chat formats say which through
        ``parser_start(request)``.
        """

    @abc.abstractmethod
    def fence_grammar(self, plan: "FencePlan") -> "Node":
        """The grammar of every output ``plan`` allows, in this dialect's syntax.

        Called per request with tools or a response format (a constraining plan). Returns a
        :mod:`kvgate.core.fence.grammar` node built from this dialect's own literals, usually with
        :func:`kvgate.core.fence.compose.compose`: the answer part, the calls part (each call a
        ``Json`` of the tool's parameters, or one value per argument) and, when
        ``plan.start_in == "reasoning"``, the reasoning before them (``with_reasoning``). Every text
        the grammar accepts must parse, with :meth:`new_parser`, into valid calls. Raises
        ``FenceError`` when the dialect lacks a literal the grammar needs.
        """

    def render_tool_call(self, name: str, arguments: str) -> str:
        """The exact text of one call as the model writes it (used by tests and fences)."""
        raise NotImplementedError

    def render_calls(self, calls: list[ToolCall]) -> str:
        """The exact text of an assistant turn's calls, with any block the syntax puts around
        them; "" for a dialect that writes each call alone (``render_tool_call``)."""
        return ""

    @property
    def literals(self) -> dict[str, str]:
        """Named literal strings of the syntax (trigger, open/close tags, separators)."""
        return {}

    @property
    def closing_literals(self) -> list[str]:
        """Literals that end an open structure, in the order the fence tries them when a call must
        close before the token budget runs out (a raw value's end tag first, the block's end
        last). The default takes the literals named in ``CLOSING_LITERAL_KEYS``; a dialect whose
        names differ lists its own. A literal missing here can leave the fence without a way to
        close a call in time, so it cannot promise a complete call at ``max_tokens``."""
        return named_closing_literals(self.literals)

    @property
    def trigger(self) -> str:
        """The text whose appearance starts a tool call in ``auto`` mode."""
        return self.literals.get("trigger", "")
