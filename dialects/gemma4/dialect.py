"""Gemma 4 tool dialect: ``<|tool_call>`` calls with ``<|"|>`` string delimiters.

Wire format (byte-exact; Python ``repr`` literals), as Gemma 4's chat template writes it:

* A call: ``'<|tool_call>call:' + NAME + '{' + ARGS + '}<tool_call|>'``; several calls follow each
  other with nothing between. ARGS is ``KEY + ':' + VALUE`` per argument, joined by ``','``, keys
  bare and in the template's ``dictsort`` order; VALUE a string's raw text between ``'<|"|>'`` and
  ``'<|"|>'`` (no escaping), ``true`` / ``false``, ``None`` for null, a number as Python's ``str``, an
  object ``'{' + KEY:VALUE,... + '}'`` (bare keys, sorted the same way), an array
  ``'[' + VALUE,... + ']'`` (:mod:`.values`): byte for byte what the official template writes for
  the call's arguments as a mapping.
* After its calls the model writes ``'<|tool_response>'``; a result is
  ``'<|tool_response>response:' + NAME + '{value:<|"|>' + TEXT + '<|"|>}<tool_response|>'``.
* Thinking: ``'<|channel>thought\\n' + reasoning + '<channel|>'`` (the template writes the
  reasoning of a turn with calls after the last user turn with ``'\\n'`` before ``'<channel|>'``).
* Turns: ``'<|turn>' + ROLE + '\\n' + text + '<turn|>\\n'`` (ROLE ``system``, ``user``, ``model``);
  the whole prompt is :mod:`.chat_format`.

Parsing (:mod:`.parser`): the inverse of the above (render -> parse -> render gives the same
bytes); inside values JSON's ``"``-quoted strings and keys and ``null`` are read too.

Fence grammar (:mod:`.fence`): ``auto`` lets text run until ``<|tool_call>``; then ``'call:'`` and one
or more calls of the request's tools, each ``NAME + '{'`` + its arguments in key order, every
required one present, each optional one at most once, ``','`` between, + ``'}<tool_call|>'``; values,
nested ones included, in the syntax above, valid against their schema, a string opening none of the
call markup; a value whose schema declares no structure as the template writes it back
(:mod:`.free_values`). In reasoning mode the thought runs to ``<channel|>`` first.

Serves: architectures named ``gemma4*`` and templates that write ``<|tool_call>call:``.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, TEMPLATE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, with_reasoning
from kvgate.core.fence.grammar import Lit, Node, TextThen, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import openai_tool
from kvgate.dialects.gemma4.fence import one_call
from kvgate.dialects.gemma4.parser import (CALL_CLOSE, CALL_OPEN, CALL_PREFIX, CHANNEL_CLOSE, CHANNEL_OPEN,
                                           RESPONSE_OPEN, THOUGHT, Gemma4Parser)
from kvgate.dialects.gemma4.values import QUOTE, render_arguments


class Gemma4(Dialect):
    name = "gemma4"

    def __init__(self, variant: str = "gemma4"):
        if variant not in ("gemma4", ""):
            raise ValueError(f"gemma4 variant must be 'gemma4', got {variant!r}")
        self.variant = "gemma4"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if architecture.lower().startswith("gemma4"):
            return ARCHITECTURE_MATCH
        return TEMPLATE_MATCH + 5 if CALL_OPEN + CALL_PREFIX in chat_template else 0

    def chat_format_without_template(self) -> str:
        return "gemma4"

    @property
    def literals(self) -> dict[str, str]:
        return {"trigger": CALL_OPEN, "call_open": CALL_OPEN + CALL_PREFIX, "call_close": CALL_CLOSE,
                "string_quote": QUOTE, "think_open": CHANNEL_OPEN + THOUGHT, "think_close": CHANNEL_CLOSE,
                "eos": "<turn|>"}

    @property
    def closing_literals(self) -> list[str]:
        """A raw string's closing quote first (inside one a JSON closer is text), the call's end last."""
        return [QUOTE, CALL_CLOSE]

    # ---- rendering

    def render_tool_call(self, name: str, arguments: str) -> str:
        return f"{CALL_OPEN}{CALL_PREFIX}{name}{{{render_arguments(name, arguments)}}}{CALL_CLOSE}"

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(self.render_tool_call(qualified(c), c.arguments) for c in calls)

    def template_tools(self, tools: list[Tool]) -> Optional[list[dict[str, Any]]]:
        return [{"type": "function", "function": openai_tool(t)} for t in tools]

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Messages for the model's own template; a call's arguments go as their wire text (the
        template writes a string argument list as it is), so it writes what the model wrote."""
        return [template_message(m) for m in messages]

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *, start_in: str = "content") -> Gemma4Parser:
        return Gemma4Parser(tools, call_id, start_in=start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        head_auto = seq(TextThen(end=CALL_OPEN, excludes=(CALL_CLOSE, RESPONSE_OPEN)), Lit(CALL_PREFIX))
        rest = compose(plan, Lit(CALL_OPEN + CALL_PREFIX), head_auto, any_tool(plan, one_call),
                       CALL_OPEN + CALL_PREFIX, (CALL_OPEN,))
        return with_reasoning(self, plan, rest)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


def template_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        out.update({k: v for k, v in (("tool_call_id", message.tool_call_id), ("name", message.name)) if v})
    if message.role != "assistant":
        return out
    if message.reasoning:
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": qualified(c), "arguments": render_arguments(qualified(c), c.arguments)}}
                             for c in message.tool_calls]
    return out
