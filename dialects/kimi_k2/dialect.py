"""Kimi K2 tool dialect: K2-Instruct (``instruct``) and K2-Thinking (``thinking``).

Wire format (byte-exact; every ``<|…|>`` marker is a special token in Kimi's vocabulary):

* An assistant turn is ``THINK + content + CALLS``; CALLS (empty without calls) is
  ``'<|tool_calls_section_begin|>' + ''.join(CALL) + '<|tool_calls_section_end|>'`` and CALL is
  ``'<|tool_call_begin|>' + ID + '<|tool_call_argument_begin|>' + ARGS + '<|tool_call_end|>'``.
  ARGS is ``ToolCall.arguments`` verbatim (the JSON text the model generated; ``{}`` when empty).
  ID is ``'functions.' + NAME + ':' + IDX``, IDX counting the calls of the conversation from 0:
  the client's id when it already has that shape, else derived from the call's position (tool
  results name the same ID). THINK (thinking only) is ``'<think>' + reasoning + '</think>'`` for
  turns after the last assistant turn without calls, ``'<think></think>'`` before it.
* Tool definitions, turns and tool results belong to the whole prompt. On the defaults the
  checkpoint's own Jinja template writes them: it gets the tools as its ``tools`` variable
  (``template_tools``), each tool result's ID as ``tool_call_id`` and each assistant turn's body
  as content (see ``chat_format.template_messages``). Without a template, chat format ``kimi_k2``
  (:mod:`kvgate.dialects.kimi_k2.chat_format`) writes the same layout itself.

Template source: checked against a published copy of the Kimi K2 chat template (role markers,
``tool_declare`` turn, default system turn, ``## Return of`` + ID, the call syntax). Published
versions differ in the tool declaration (a ``# Tools`` heading and ``tojson`` spacing in one,
compact JSON in the other); the template path renders whichever the checkpoint ships.

Parsing: text before ``<|tool_calls_section_begin|>`` is content, ``<think>``/``</think>`` delimit
reasoning, ``<|im_end|>`` is swallowed; the call's name is ID without ``functions.`` and ``:IDX``.
Arguments stream as they arrive; an unknown tool gives a ParseIssue and no call; arguments that are
not a JSON object give one and the started call no ``ToolCallEnd`` (``StreamParser``'s rule). At the
end of output a call whose arguments object is complete is completed, its missing end reported.
Variants read (each reported): text inside the section between calls is skipped; a bare counter
ID (``0``) names the only tool when one is offered (with several, no tool: unknown). Text after
the section stays content.

Fence grammar: ``auto`` lets text run until ``<|tool_calls_section_begin|>``; then one or more
CALLs of the request's tools (at most 16 in parallel), each ID numbered as the history will render
it (the calls earlier in the conversation + its position), with arguments as JSON valid against the
tool's parameters (``json.dumps`` spacing), then ``<|tool_calls_section_end|>``.
Markers the tokenizer holds as one token are forced as that token.

Serves: templates that write ``<|tool_calls_section_begin|>``, above any architecture match (K2 is
a DeepSeek V3 architecture); variant ``thinking`` when the template writes ``<think>``.
"""

from __future__ import annotations

import re

import attrs
from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, with_reasoning
from kvgate.core.fence.grammar import Lit, Node, TextThen, alt, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, tool_parameters
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._jsoncall import JsonCallParser
from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects.kimi_k2.chat_format import template_messages, tool_list

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARG_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
EOT = "<|im_end|>"
VARIANTS = ("instruct", "thinking")
KIMI_ID = re.compile(r"^functions\.(.+):(\d+)$")
MAX_NUMBERED_CALLS = 16  # parallel calls the fence numbers (and allows) in one turn


def call_name(written_id: str) -> str:
    """The tool name inside a written call id (``functions.NAME:IDX``; lenient without either part)."""
    text = written_id.strip()
    text = text[len("functions."):] if text.startswith("functions.") else text
    head, colon, tail = text.rpartition(":")
    return head if colon and tail.isdigit() else text


class KimiK2(Dialect):
    name = "kimi_k2"

    def __init__(self, variant: str = "instruct"):
        if variant not in VARIANTS:
            raise ValueError(f"kimi_k2 variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        # Kimi K2 runs the DeepSeek V3 architecture: its own template marker outranks that name
        return ARCHITECTURE_MATCH + 20 if SECTION_BEGIN in chat_template else 0

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        return "thinking" if "<think>" in chat_template else "instruct"

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": SECTION_BEGIN, "section_begin": SECTION_BEGIN, "section_end": SECTION_END,
            "call_begin": CALL_BEGIN, "argument_begin": ARG_BEGIN, "call_end": CALL_END, "eot": EOT,
            "id_prefix": "functions.", "think_open": "<think>", "think_close": "</think>",
        }

    @property
    def closing_literals(self) -> list[str]:
        return [CALL_END, SECTION_END]

    # ---- rendering

    def call_id_text(self, call: ToolCall, index: int) -> str:
        """The ID written for ``call``, the ``index``-th call of the conversation."""
        return call.id if call.id and KIMI_ID.match(call.id) else f"functions.{qualified(call)}:{index}"

    def render_tool_call(self, name: str, arguments: str, index: int = 0) -> str:
        args = arguments if arguments.strip() else "{}"
        return CALL_BEGIN + f"functions.{name}:{index}" + ARG_BEGIN + args + CALL_END

    def render_calls(self, calls: list[ToolCall], first_index: int = 0) -> str:
        if not calls:
            return ""
        body = "".join(CALL_BEGIN + self.call_id_text(c, first_index + i) + ARG_BEGIN
                       + (c.arguments if c.arguments.strip() else "{}") + CALL_END for i, c in enumerate(calls))
        return SECTION_BEGIN + body + SECTION_END

    def assistant_body(self, message: Message, first_index: int = 0, keep_reasoning: bool = True) -> str:
        """What the model generated for this turn (end-of-turn token aside)."""
        think = ""
        if self.variant == "thinking":
            think = "<think>" + ((message.reasoning or "") if keep_reasoning else "") + "</think>"
        return think + message.content + self.render_calls(message.tool_calls, first_index)

    def template_tools(self, tools: list[Tool]) -> list[dict[str, Any]]:
        return tool_list(tools)

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """The messages for the model's own Jinja template (see ``chat_format.template_messages``;
        the tools reach it through ``template_tools``)."""
        return template_messages(self, messages)

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *, start_in: str = "content") -> "KimiParser":
        return KimiParser(tools, call_id, start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        markup = tuple(lit(k) for k in ("section_begin", "section_end", "call_begin", "argument_begin",
                                        "call_end", "eot"))

        def one(tool: Tool, index: int) -> Node:
            schema = exclude_markup(tool_parameters(tool), markup)
            head = Lit(lit("call_begin") + lit("id_prefix") + tool.qualified_name + ":" + str(index)
                       + lit("argument_begin"))
            return seq(head, json_node(schema), Lit(lit("call_end")))

        def chain(position: int, limit: int) -> Node:
            """Calls from ``position`` on, each numbered as the history will number it."""
            call = any_tool(plan, lambda tool: one(tool, plan.call_offset + position))
            return call if position + 1 >= limit else seq(call, alt(Lit(""), chain(position + 1, limit)))

        trigger = lit("trigger")
        head_auto = TextThen(end=trigger, excludes=markup[1:])
        body = chain(0, plan.max_calls or MAX_NUMBERED_CALLS)
        single = attrs.evolve(plan, max_calls=1)  # the chain numbers the calls itself: compose adds none
        rest = compose(single, Lit(trigger), head_auto, body, "", (trigger,), lit("section_end"))
        return with_reasoning(self, plan, rest)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


class KimiParser(JsonCallParser):
    """The tool-calls section (format in the module docstring)."""

    def __init__(self, tools, call_id, start_in: str = "content"):
        super().__init__(tools, call_id, start_in, block_open=SECTION_BEGIN, block_close=SECTION_END,
                         call_open=CALL_BEGIN, call_close=CALL_END, eos=EOT)

    def head_steps(self):
        return [self.id_step]

    def id_step(self) -> object:
        written = self.upto(ARG_BEGIN)
        if written is None:
            return "tool call id too long" if self.too_long() else NEED_MORE
        name, offered = call_name(written), list(self.index_of_tools.tools)
        if name.isdigit() and len(offered) == 1:  # a bare counter: the one tool there is
            self.issue(f"a bare call id {name!r} read as the only tool {offered[0]!r}", self.raw)
            name = offered[0]
        return self.begin_call(name)
