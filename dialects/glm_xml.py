"""GLM XML tool dialect and chat format: GLM-4.5 / 4.6 (``glm45``) and GLM-4.7 (``glm47``).

Wire format (byte-exact; ``N`` is ``'\\n'`` for glm45 and ``''`` for glm47):

* Prompt: ``'[gMASK]<sop>'`` + TOOLS (when tools) + turns + generation prompt.
  TOOLS = ``'<|system|>\\n# Tools\\n\\nYou may call one or more functions to assist with the user
  query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\\n'``
  + per tool ``json({"type": "function", "function": {...}}) + '\\n'`` + ``'</tools>\\n\\nFor each
  function call, output the function name and arguments within the following XML format:\\n'`` +
  the format example (``<tool_call>{function-name}N<arg_key>{arg-key-1}</arg_key>N<arg_value>...``,
  see ``FORMAT_EXAMPLE``).
* ``'<|system|>' + N + text``; ``'<|user|>' + N + text`` (glm45 with thinking off appends
  ``'/nothink'`` unless the text already ends with it).
* ``'<|assistant|>' + THINK + CONTENT + CALLS``. THINK for turns after the last user message that
  carry reasoning (glm47 with ``clear_thinking=False``: every turn) is ``N + '<think>' +
  reasoning.strip() + '</think>'``, otherwise ``'\\n<think></think>'`` (glm45) / ``'</think>'``
  (glm47). CONTENT = ``N + content.strip()`` when non-empty. Per call:
  ``N + '<tool_call>' + NAME + N`` (glm47: no ``N`` after the name) + per argument
  ``'<arg_key>' + K + '</arg_key>' + N + '<arg_value>' + V + '</arg_value>' + N`` + ``'</tool_call>'``
  (glm45 with no arguments: ``'<tool_call>NAME\\n</tool_call>'``). V is the raw string for string
  values and the raw JSON text the model generated otherwise: the wire carries no type, so the
  parser types values with the tool's JSON Schema (``"2"`` for a string parameter, ``2`` else).
* Tool results: ``'<|observation|>'`` once per run of tool messages, then per result
  ``N + '<tool_response>' + N + result + N + '</tool_response>'``.
* Generation prompt: glm45 ``'<|assistant|>'`` (thinking off: ``'<|assistant|>\\n<think></think>'``);
  glm47 ``'<|assistant|><think>'`` (thinking off: ``'<|assistant|></think>'``).

Parsing reads either variant leniently (whitespace between tags, name ended by newline or ``<``);
values are never stripped. Duplicate keys and unknown tools give ParseIssues; a call that is
malformed after its name or unclosed at the end of output gives one and no ``ToolCallEnd``
(``kvgate.core.dialect.StreamParser``). Variant read and reported: an array or object value written
with its quotes escaped (GLM-4.6, ``[{\\"a\\": 1}]``) is the JSON it spells when the parameter's schema
says array or object (:mod:`kvgate.dialects._typing`); one undeclared parameter ``arguments`` /
``input`` holding an object is the arguments; a literal backslash-n written as the separator between
tags (``get_weather\\n<arg_key>``, seen from GLM-4) reads as the newline.

Conventions where kvgate differs from vLLM's GLM-4.5 / 4.7 parsers on their cases
(tests/dialects/test_peer_cases_glm_xml.py): whitespace-only content before a call is sent as the
model wrote it (vLLM: no content); ``<tool_call>`` with no name before the end of output is reported,
not sent as content (vLLM: the text as content); variants read render back canonically.

Fence grammar: ``auto`` lets text run until ``N + '<tool_call>'``; a call is a tool's name + ``N``,
then its parameters in any order, each at most once and every required one before
``'</tool_call>'``: ``'<arg_key>' + K + '</arg_key>' + N + '<arg_value>'`` + the value +
``'</arg_value>' + N``. A string value is raw text without the markup, any other value compact JSON
valid against the parameter's schema.

Serves: architectures named ``glm*``, and templates that write ``<arg_key>``. Variant from the
template's format example (``{function-name}<arg_key>`` = glm47, with a newline = glm45).
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.chat_format import ChatFormat
from kvgate.core.dialect import ARCHITECTURE_MATCH, TEMPLATE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, tag_value, with_reasoning
from kvgate.core.fence.grammar import AnyOrder, Field, Lit, Node, TextThen, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import is_string_schema, properties
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import dumps, history_members, openai_tool, wire_value
from kvgate.dialects._formats import variant_format
from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser

VARIANTS = {"glm45": "\n", "glm46": "\n", "glm47": ""}
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
MARKUP_KEYS = ("trigger", "call_close", "key_open", "key_close", "value_open", "value_close")
TOOLS_HEAD = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_TAIL = ("</tools>\n\nFor each function call, output the function name and arguments within "
              "the following XML format:\n")
FORMAT_EXAMPLE = (
    "<tool_call>{function-name}N<arg_key>{arg-key-1}</arg_key>N<arg_value>{arg-value-1}</arg_value>N"
    "<arg_key>{arg-key-2}</arg_key>N<arg_value>{arg-value-2}</arg_value>N...N</tool_call>"
)


class GlmXml(Dialect):
    name = "glm_xml"

    def __init__(self, variant: str = "glm47", clear_thinking: bool = True):
        if variant not in VARIANTS:
            raise ValueError(f"glm_xml variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = "glm45" if variant == "glm46" else variant
        self.sep = VARIANTS[variant]
        self.clear_thinking = clear_thinking

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if architecture.lower().startswith("glm"):
            return ARCHITECTURE_MATCH
        return TEMPLATE_MATCH if KEY_OPEN in chat_template else 0

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        if "{function-name}" + KEY_OPEN in chat_template:
            return "glm47"
        if any("{function-name}" + sep + KEY_OPEN in chat_template for sep in ("\n", "\\n")):
            return "glm45"
        return ""

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": "<tool_call>", "call_open": "<tool_call>", "call_close": "</tool_call>",
            "key_open": "<arg_key>", "key_close": "</arg_key>", "value_open": "<arg_value>",
            "value_close": "</arg_value>", "separator": self.sep, "think_open": "<think>",
            "think_close": "</think>", "observation": "<|observation|>",
            "response_open": "<tool_response>", "response_close": "</tool_response>",
        }

    def tools_block(self, tools: list[Tool]) -> str:
        listed = "".join(dumps({"type": "function", "function": openai_tool(t)}) + "\n" for t in tools)
        return TOOLS_HEAD + listed + TOOLS_TAIL + FORMAT_EXAMPLE.replace("N", self.sep)

    def render_tool_call(self, name: str, arguments: str) -> str:
        pairs = "".join(
            "<arg_key>" + key + "</arg_key>" + self.sep + "<arg_value>" + wire_value(raw)[1]
            + "</arg_value>" + self.sep
            for key, raw in history_members(arguments, f"tool call {name!r}")
        )
        return "<tool_call>" + name + self.sep + pairs + "</tool_call>"

    def assistant_body(self, message: Message, keep_reasoning: bool = True) -> str:
        if keep_reasoning and message.reasoning:
            think = self.sep + "<think>" + message.reasoning.strip() + "</think>"
        else:
            think = "\n<think></think>" if self.sep else "</think>"
        content = message.content.strip()
        calls = "".join(self.sep + self.render_tool_call(qualified(c), c.arguments)
                        for c in message.tool_calls)
        return think + (self.sep + content if content else "") + calls

    def tool_result(self, content: str, first: bool) -> str:
        sep = self.sep
        block = sep + "<tool_response>" + sep + content + sep + "</tool_response>"
        return ("<|observation|>" if first else "") + block

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Per-turn text of :class:`GlmChatFormat` as role/content dicts (role markers excluded),
        for the model's own template; a tool result goes as its raw content, since GLM's templates
        write ``<|observation|>`` and the ``<tool_response>`` tags around it themselves."""
        turns = self.turns(messages, tools, thinking)
        head = len(turns) - len(messages)  # the tool list's system turn, when there are tools
        out = [{"role": role, "content": text} for role, text in turns[:head]]
        for (role, text), message in zip(turns[head:], messages):
            out.append({"role": role, "content": message.content if role == "tool" else text})
        return out

    def turns(self, messages: list[Message], tools: list[Tool],
              thinking: Optional[bool]) -> list[tuple[str, str]]:
        out = [("system", self.tools_block(tools)[len("<|system|>"):])] if tools else []
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        for index, message in enumerate(messages):
            if message.role == "assistant":
                keep = index > last_user or (self.variant == "glm47" and not self.clear_thinking)
                out.append(("assistant", self.assistant_body(message, keep)))
            elif message.role == "tool":
                first = index == 0 or messages[index - 1].role != "tool"
                out.append(("tool", self.tool_result(message.content, first)))
            else:
                out.append((message.role, self.sep + self.user_text(message, thinking)))
        return out

    def user_text(self, message: Message, thinking: Optional[bool]) -> str:
        nothink = (self.variant == "glm45" and message.role == "user" and thinking is False
                   and not message.content.endswith("/nothink"))
        return message.content + ("/nothink" if nothink else "")

    def generation_prompt(self, thinking: Optional[bool]) -> str:
        if self.variant == "glm45":
            return "<|assistant|>" + ("\n<think></think>" if thinking is False else "")
        return "<|assistant|>" + ("</think>" if thinking is False else "<think>")

    def parser_start(self, thinking: Optional[bool]) -> str:
        """Where the completion after :meth:`generation_prompt` starts, for :meth:`new_parser`."""
        if self.variant == "glm47":
            return "after_reasoning" if thinking is False else "reasoning"
        return "after_reasoning" if thinking is False else "content"

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> GlmParser:
        return GlmParser(tools, call_id, start_in=start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        sep, trigger = self.sep, lit("trigger")
        markup = tuple(lit(key) for key in MARKUP_KEYS)

        def field(key: str, schema: Any, required: bool) -> Field:
            head = Lit(lit("key_open") + key + lit("key_close") + sep + lit("value_open"))
            body = seq(head, tag_value(schema, is_string_schema(schema), lit("value_close"), markup), Lit(sep))
            return Field(body, required)

        def one(tool: Tool) -> Node:
            fields = tuple(field(k, s, r) for k, s, r in properties(tool))
            params = AnyOrder(fields) if fields else Lit("")
            return seq(Lit(tool.qualified_name + sep), params, Lit(lit("call_close")))

        head_auto = TextThen(end=sep + trigger, excludes=markup)
        rest = compose(plan, Lit(sep + trigger), head_auto, any_tool(plan, one), sep + trigger, (trigger,))
        return with_reasoning(self, plan, rest)


ROLE_MARKERS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>", "tool": ""}


class GlmChatFormat(ChatFormat):
    """Whole GLM prompt, byte-identical to the model's chat template."""

    def __init__(self, dialect: GlmXml):
        self.dialect = dialect
        self.name = dialect.variant

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        turns = self.dialect.turns(request.messages, request.tools, request.reasoning)
        text = "[gMASK]<sop>" + "".join(ROLE_MARKERS[role] + body for role, body in turns)
        return text + (self.dialect.generation_prompt(request.reasoning) if add_generation_prompt else "")

    def parser_start(self, request: ChatRequest) -> str:
        return self.dialect.parser_start(request.reasoning)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


# ---- parsing (incremental; the format is in the module docstring)

ESCAPED_NEWLINE = "\\n"  # a backslash and an n, as some GLM-4 outputs spell the separator


class GlmParser(TagCallParser):
    value_close = VALUE_CLOSE
    skip_until = CALL_CLOSE
    tool_states = ("call_name", "call_body", "arg_key", "arg_value_open", "value_text", "skip_call")
    escaped_in_call = -1  # the call whose literal '\\n' separators were reported

    def content(self) -> bool:
        head, tag = self.scan(["\n" + THINK_OPEN, THINK_OPEN, THINK_CLOSE, "\n" + CALL_OPEN, CALL_OPEN])
        self.text(head)
        if tag in ("\n" + THINK_OPEN, THINK_OPEN):
            return self.goto(self.reasoning_text)
        if tag == THINK_CLOSE:
            return self.goto(self.after_think)
        if tag is not None:
            self.raw = tag
            return self.goto(self.call_name)
        return bool(head)

    def after_think(self) -> bool:
        return self.optional("\n") is not NEED_MORE and self.goto(self.content)

    def call_name(self) -> bool:
        ends = [pos for pos in (self.buf.find("\n"), self.buf.find("<")) if pos >= 0]
        if not ends:
            if self.final:
                self.raw += self.take(len(self.buf))
                return self.malformed("unclosed tool call")
            return False
        name = self.take(min(ends))
        self.raw += name
        if self.buf.startswith("\n"):
            self.raw += self.take(1)
        name = name.strip()
        if name.endswith(ESCAPED_NEWLINE):
            name = name[: -len(ESCAPED_NEWLINE)].rstrip()
            self.escaped_newline()
        return self.begin_call(name, self.call_body)

    def escaped_newline(self) -> None:
        if self.escaped_in_call != self.index:  # once per call
            self.escaped_in_call = self.index
            self.issue("a literal '\\n' between tags read as a newline", self.raw)

    def skip_escaped_newlines(self) -> bool:
        """Drop literal ``\\n`` separators before the next tag (GLM-4 models write them); False
        while the buffer ends inside one."""
        stripped = self.buf.lstrip(" \t\r\n")
        if not stripped.startswith(ESCAPED_NEWLINE):
            return self.final or not ESCAPED_NEWLINE.startswith(stripped) or not stripped
        while stripped.startswith(ESCAPED_NEWLINE):
            stripped = stripped[len(ESCAPED_NEWLINE):].lstrip(" \t\r\n")
        self.raw += self.buf[: len(self.buf) - len(stripped)]
        self.buf = stripped
        self.escaped_newline()
        return True

    def call_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        if not self.skip_escaped_newlines():
            return False
        for literal, state in ((KEY_OPEN, self.arg_key), (CALL_CLOSE, None)):
            before = self.buf
            got = self.expect(literal)
            if got is NEED_MORE:
                return False
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                if state is None:
                    return self.end_call()
                self.key = ""
                return self.goto(state)
        return self.malformed("expected <arg_key> or </tool_call> in a tool call")

    def arg_key(self) -> bool:
        head, tag = self.scan([KEY_CLOSE])
        self.raw += head + (tag or "")
        self.key += head
        if tag is not None:
            return self.goto(self.arg_value_open)
        return bool(head)

    def arg_value_open(self) -> bool:
        if not self.skip_escaped_newlines():
            return False
        before = self.buf
        got = self.expect(VALUE_OPEN)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        if got is False:
            return self.malformed("expected <arg_value> after </arg_key>")
        return self.begin_value(self.key.strip(), None, self.call_body)


def _format_factory(variant: str):
    return variant_format(variant, GlmXml, GlmChatFormat)


@hookimpl
def register_dialects(register):
    register("glm_xml", GlmXml)


@hookimpl
def register_chat_formats(register):
    register("glm45", _format_factory("glm45"))
    register("glm47", _format_factory("glm47"))
