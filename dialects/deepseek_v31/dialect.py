"""DeepSeek tool-call-token dialect: V3.1 / V3.2-Exp (``v31``) and V3 / R1 (``r1``).

Wire format (byte-exact; every ``<｜…｜>`` marker is one added token in DeepSeek's vocabulary,
``｜`` being U+FF5C and ``▁`` U+2581):

* An assistant turn is ``content + CALLS + '<｜end▁of▁sentence｜>'``; CALLS (empty without calls)
  is ``'<｜tool▁calls▁begin｜>' + SEP.join(CALL) + '<｜tool▁calls▁end｜>'``.
* v31: CALL = ``'<｜tool▁call▁begin｜>' + NAME + '<｜tool▁sep｜>' + ARGS + '<｜tool▁call▁end｜>'``,
  SEP = ``''``.
* r1: CALL = ``'<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + NAME + '\\n```json\\n' + ARGS +
  '\\n```<｜tool▁call▁end｜>'``, SEP = ``'\\n'``.
* ARGS is ``ToolCall.arguments`` verbatim (the JSON text the model generated; ``{}`` when empty),
  as both templates insert the client's arguments string.
* Reasoning: the model writes ``reasoning + '</think>'`` when the prompt opened ``<think>``; the
  templates drop reasoning from history. Tool definitions, user turns and tool results belong to
  the whole prompt: :mod:`kvgate.dialects.deepseek_v31.chat_format` (chat formats ``deepseek_v31`` /
  ``deepseek_r1``).

Parsing: text before ``<｜tool▁calls▁begin｜>`` is content, ``<think>``/``</think>`` delimit
reasoning, the end-of-sentence token is swallowed, whitespace around markers is lenient (r1: the
``'\\n```json\\n'`` fence and ``'\\n```'`` are read with any whitespace). Arguments stream as they
arrive; an unknown tool gives a ParseIssue and no call; arguments that are not a JSON object give one
and the started call no ``ToolCallEnd`` (``StreamParser``'s rule). At the end of output a call whose
arguments object is complete is completed, its missing end marker reported. Text inside the block
between calls is skipped (reported); text after the block stays content.

Fence grammar: ``auto`` lets text run until ``<｜tool▁calls▁begin｜>``; then one or more CALLs of
the request's tools with arguments as JSON valid against the tool's parameters (written the way
``json.dumps`` writes), then ``<｜tool▁calls▁end｜>``. Markers that the tokenizer holds as one
token are forced as that token.

Serves: templates that write ``<｜tool▁calls▁begin｜>`` (a ```json fence: r1, else v31),
best with a ``deepseek*`` architecture.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, TEMPLATE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, with_reasoning
from kvgate.core.fence.grammar import Lit, Node, TextThen, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, tool_parameters
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._jsoncall import JsonCallParser
from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects.deepseek_v31.chat_format import system_text, without_think
from kvgate.dialects.deepseek_v31.markers import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, EOS, SEP

VARIANTS = ("v31", "r1")
MARKUP = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, EOS)


class DeepseekV31(Dialect):
    name = "deepseek_v31"

    def __init__(self, variant: str = "v31"):
        if variant not in VARIANTS:
            raise ValueError(f"deepseek_v31 variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self.separator = "" if variant == "v31" else "\n"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if CALLS_BEGIN not in chat_template:
            return 0
        return ARCHITECTURE_MATCH + 10 if "deepseek" in architecture.lower() else TEMPLATE_MATCH

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        return "r1" if "```json" in chat_template else "v31"

    @property
    def literals(self) -> dict[str, str]:
        head, tail = ((CALL_BEGIN, SEP), ("", "")) if self.variant == "v31" else (
            (CALL_BEGIN + "function" + SEP, "\n```json\n"), ("\n```", ""))
        return {
            "trigger": CALLS_BEGIN, "calls_begin": CALLS_BEGIN, "calls_end": CALLS_END,
            "call_begin": CALL_BEGIN, "call_end": CALL_END, "tool_sep": SEP, "eos": EOS,
            "call_head": head[0], "name_end": head[1] or tail[0], "args_end": tail[0] + CALL_END,
            "call_separator": self.separator, "think_open": "<think>", "think_close": "</think>",
            "output_begin": "<｜tool▁output▁begin｜>", "output_end": "<｜tool▁output▁end｜>",
        }

    @property
    def closing_literals(self) -> list[str]:
        return [self.literals["args_end"], CALLS_END]

    # ---- rendering

    def render_tool_call(self, name: str, arguments: str) -> str:
        args = arguments if arguments.strip() else "{}"
        if self.variant == "v31":
            return CALL_BEGIN + name + SEP + args + CALL_END
        return CALL_BEGIN + "function" + SEP + name + "\n```json\n" + args + "\n```" + CALL_END

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        return CALLS_BEGIN + self.separator.join(
            self.render_tool_call(qualified(c), c.arguments) for c in calls) + CALLS_END

    def assistant_body(self, message: Message) -> str:
        """What the model generated for this turn (reasoning aside), end-of-sentence token included."""
        return message.content + self.render_calls(message.tool_calls) + EOS

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Role/content dicts for a Jinja template that writes the role markers itself (the official
        V3.1 template gives the bytes of the chat format then): the system texts joined by
        ``'\\n\\n'`` plus the tools, user text and tool results raw, an assistant turn's content and
        calls (no end-of-sentence token: templates write it). The whole prompt without a template is
        :mod:`kvgate.dialects.deepseek_v31.chat_format`."""
        system = system_text(messages, tools, self.variant)
        out = [{"role": "system", "content": system}] if system else []
        for message in messages:
            if message.role == "assistant":
                plain = without_think(message)
                out.append({"role": "assistant", "content": plain.content + self.render_calls(message.tool_calls)})
            elif message.role != "system":
                out.append({"role": message.role, "content": message.content})
        return out

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> "DeepseekCallParser":
        return DeepseekCallParser(tools, call_id, start_in, self.literals)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        markup = tuple(lit(k) for k in ("calls_begin", "calls_end", "call_begin", "call_end", "tool_sep", "eos"))

        def one(tool: Tool) -> Node:
            schema = exclude_markup(tool_parameters(tool), markup)
            head = Lit(lit("call_head") + tool.qualified_name + lit("name_end"))
            return seq(head, json_node(schema), Lit(lit("args_end")))

        trigger = lit("trigger")
        head_auto = TextThen(end=trigger, excludes=markup[1:])
        rest = compose(plan, Lit(trigger), head_auto, any_tool(plan, one), lit("call_separator"),
                       (trigger,), lit("calls_end"))
        return with_reasoning(self, plan, rest)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


class DeepseekCallParser(JsonCallParser):
    """The call block of either variant (format in the module docstring)."""

    def __init__(self, tools, call_id, start_in: str, lit: dict[str, str]):
        super().__init__(tools, call_id, start_in, block_open=lit["calls_begin"], block_close=lit["calls_end"],
                         call_open=lit["call_begin"], call_close=lit["call_end"], eos=lit["eos"])
        self.type_word = lit["call_head"][len(lit["call_begin"]):-len(lit["tool_sep"])]
        self.sep, self.fenced = lit["tool_sep"], lit["name_end"] != lit["tool_sep"]

    def head_steps(self):
        steps = []
        if self.type_word:
            steps.append(lambda: self.literals_step([self.type_word, self.sep], f"expected 'function{self.sep}'"))
        steps.append(self.name_step)
        if self.fenced:
            steps.append(lambda: self.literals_step(["```json"], "expected a ```json block after the tool name"))
            steps.append(self.newline_step)
        steps.append(lambda: self.begin_call(self.written))
        return steps

    def literals_step(self, texts: list[str], problem: str) -> object:
        got = self.consume(texts)
        return problem if got is False else got

    def name_step(self) -> object:
        name = self.upto("\n" if self.fenced else self.sep)
        if name is None:
            return "tool name too long" if self.too_long() else NEED_MORE
        self.written = name.strip()
        return True

    def newline_step(self) -> object:
        got = self.optional("\n")
        if got is True:
            self.raw += "\n"
        return NEED_MORE if got is NEED_MORE else True

    def args_end(self) -> list[str]:
        return ["\n```" + self.call_close, "```" + self.call_close] if self.fenced else [self.call_close]
