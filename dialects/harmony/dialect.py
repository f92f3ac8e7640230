"""Harmony tool dialect (gpt-oss): channels, recipients and ``<|constrain|>json`` calls.

Wire format (byte-exact, as openai-harmony 0.0.8 renders it; every ``<|…|>`` marker is a special
token of the o200k_harmony vocabulary). A message is
``'<|start|>' + AUTHOR + [' to=' + RECIPIENT] + '<|channel|>' + CHANNEL + [' ' + TYPE] +
'<|message|>' + TEXT`` ended by ``'<|end|>'`` (``'<|call|>'`` for a tool call). An assistant turn
(``assistant_body``: the text after the generation prompt ``'<|start|>assistant'``) is its
messages joined by ``'<|start|>assistant'``:

* reasoning: ``'<|channel|>analysis<|message|>' + reasoning + '<|end|>'`` (left out where the
  chat format drops it, see :mod:`kvgate.dialects.harmony.chat_format`);
* with calls: the content, when there is any, as a preamble
  ``'<|channel|>commentary<|message|>' + content + '<|end|>'``, then per call
  ``' to=functions.' + NAME + '<|channel|>commentary <|constrain|>json<|message|>' + ARGS +
  '<|call|>'`` (ARGS: the JSON text the model generated, ``{}`` when empty);
* without calls: ``'<|channel|>final<|message|>' + content + '<|end|>'``.

The model ends its output with the stop token ``<|call|>`` after a call and ``<|return|>`` after
the answer; the engine keeps stop tokens out of the text, so a completion is the turn without its
last end marker. The model may also write the recipient after the channel
(``'<|channel|>commentary to=functions.NAME <|constrain|>json'``, the harmony guide's spelling):
the parser then ends the call's id with ``-ch`` and the history writes that call so. Parsing: see
:mod:`kvgate.dialects.harmony.parser`. Tool results: ``'<|start|>functions.' + NAME +
' to=assistant<|channel|>commentary<|message|>' + TEXT + '<|end|>'`` (the chat format).

Fence grammar: at most one ``analysis`` message (``TEXT<|end|><|start|>assistant``), then
``required`` / named: one call of the request's tools with arguments JSON valid against its
parameters; ``auto``: that call (after an optional commentary preamble) or a ``final`` message;
``none``: the ``final`` message. Text never contains a marker. Gpt-oss stops after one call. The
call's header may take either spelling (the id says which one the history writes back).

Serves: architectures named ``gpt_oss`` / ``GptOss…`` and templates that write ``<|channel|>``.
The chat format is ``harmony`` even for a checkpoint that ships gpt-oss's Jinja template: as
published (not available offline here, so untested) it writes a call's history as
``…<|channel|>commentary json<|message|>`` (no ``<|constrain|>``) and a date that changes daily.
``[model] chat_format = "jinja"`` renders that template instead (``render_messages`` hands it
``thinking`` and decoded arguments).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, TEMPLATE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import answer_part, any_tool
from kvgate.core.fence.grammar import Lit, Node, TextThen, alt, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, tool_parameters
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import openai_tool
from kvgate.dialects.harmony.parser import (AFTER_CHANNEL, ASSISTANT, CALL, CALL_TYPE, CHANNEL, CONSTRAIN, END,
                                            MESSAGE, RETURN, START, HarmonyParser)

MARKERS = (START, END, MESSAGE, CHANNEL, CALL, RETURN, CONSTRAIN)


class Harmony(Dialect):
    name = "harmony"

    def __init__(self, variant: str = "gpt_oss"):
        if variant not in ("gpt_oss", ""):
            raise ValueError(f"harmony variant must be 'gpt_oss', got {variant!r}")
        self.variant = "gpt_oss"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if "gpt_oss" in architecture.lower() or "gptoss" in architecture.lower():
            return ARCHITECTURE_MATCH
        return TEMPLATE_MATCH + 5 if CHANNEL in chat_template else 0

    def chat_format_without_template(self) -> str:
        return "harmony"

    def chat_format_over_template(self) -> str:
        return "harmony"  # the exact rendering, whatever template the checkpoint ships (see above)

    @property
    def literals(self) -> dict[str, str]:
        return {"trigger": " to=functions.", "start": START, "end": END, "message": MESSAGE,
                "channel": CHANNEL, "call_close": CALL, "return": RETURN, "constrain": CONSTRAIN,
                "assistant": ASSISTANT}

    @property
    def closing_literals(self) -> list[str]:
        return [END]

    # ---- rendering

    def render_tool_call(self, name: str, arguments: str, after_channel: bool = False) -> str:
        args = arguments if arguments.strip() else "{}"
        if after_channel:
            return f"{CHANNEL}commentary to=functions.{name}{CALL_TYPE}{MESSAGE}{args}{CALL}"
        return f" to=functions.{name}{CHANNEL}commentary{CALL_TYPE}{MESSAGE}{args}{CALL}"

    def render_call(self, call: ToolCall) -> str:
        return self.render_tool_call(qualified(call), call.arguments, call.id.endswith(AFTER_CHANNEL))

    def assistant_messages(self, message: Message, keep_reasoning: bool = True) -> list[str]:
        """The turn's messages, each without its ``<|start|>assistant``."""
        parts = [f"{CHANNEL}analysis{MESSAGE}{message.reasoning}{END}"] if keep_reasoning and message.reasoning else []
        if not message.tool_calls:
            return parts + [f"{CHANNEL}final{MESSAGE}{message.content}{END}"]
        parts += [f"{CHANNEL}commentary{MESSAGE}{message.content}{END}"] if message.content else []
        return parts + [self.render_call(c) for c in message.tool_calls]

    def assistant_body(self, message: Message, keep_reasoning: bool = True) -> str:
        """The turn after ``<|start|>assistant``, its last end marker included."""
        return ASSISTANT.join(self.assistant_messages(message, keep_reasoning))

    def render_calls(self, calls: list[ToolCall]) -> str:
        return ASSISTANT.join(self.render_call(c) for c in calls)

    def template_tools(self, tools: list[Tool]) -> Optional[list[dict[str, Any]]]:
        return [{"type": "function", "function": openai_tool(t)} for t in tools]

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Messages for gpt-oss's own Jinja template (``thinking``, decoded call arguments); the
        ``harmony`` chat format is the exact rendering."""
        return [template_message(m) for m in messages]

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *, start_in: str = "content") -> HarmonyParser:
        return HarmonyParser(tools, call_id, start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        text_end = tuple(m for m in MARKERS if m != END)
        reasoning_body = seq(TextThen(end=END, excludes=text_end), Lit(ASSISTANT))
        reasoning = alt(Lit(""), seq(Lit(f"{CHANNEL}analysis{MESSAGE}"), reasoning_body))
        if plan.start_in == "reasoning":
            reasoning = reasoning_body
        final = seq(Lit(f"{CHANNEL}final{MESSAGE}"), answer_part(plan, MARKERS))
        if plan.mode == "none" or not plan.tools:
            return seq(reasoning, final)

        def one(tool: Tool) -> Node:
            name = tool.qualified_name
            heads = alt(Lit(f" to=functions.{name}{CHANNEL}commentary{CALL_TYPE}{MESSAGE}"),
                        Lit(f"{CHANNEL}commentary to=functions.{name}{CALL_TYPE}{MESSAGE}"))
            return seq(heads, json_node(exclude_markup(tool_parameters(tool), MARKERS)))

        call = any_tool(plan, one)
        if plan.mode == "required":
            return seq(reasoning, call)
        preamble = seq(Lit(f"{CHANNEL}commentary{MESSAGE}"), TextThen(end=END, excludes=text_end), Lit(ASSISTANT))
        return seq(reasoning, alt(final, seq(alt(Lit(""), preamble), call)))


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


def template_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.reasoning:
        out["thinking"] = message.reasoning
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": qualified(c), "arguments": decoded(c.arguments)}} for c in message.tool_calls]
    if message.role == "tool" and message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def decoded(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments
