"""DeepSeek DSML tool dialect: V3.2 (``v32``, ``function_calls`` block) and V4 (``v4``, ``tool_calls``).

Wire format (byte-exact; ``D`` is ``'｜DSML｜'``, fullwidth bars; BLOCK is ``function_calls`` for
v32 and ``tool_calls`` for v4):

* An assistant turn is ``THINK + content + CALLS + '<｜end▁of▁sentence｜>'`` where
  CALLS = ``'\\n\\n<' + D + BLOCK + '>\\n' + '\\n'.join(INVOKES) + '\\n</' + D + BLOCK + '>'``
  (empty without calls), INVOKE = ``'<' + D + 'invoke name="' + NAME + '">\\n' + '\\n'.join(PARAMS)
  + '\\n</' + D + 'invoke>'`` and PARAM = ``'<' + D + 'parameter name="' + KEY + '" string="' +
  ('true' | 'false') + '">' + VALUE + '</' + D + 'parameter>'``. String values are written raw
  (``string="true"``); every other value is the raw JSON text the model generated. THINK is
  ``reasoning + '</think>'`` in thinking mode for turns after the last user message.
* v4 only: inside a string value ``</｜DSML｜parameter>`` is written ``&lt;/｜DSML｜parameter>`` (and
  text already spelled ``&(amp;)*lt;/｜DSML｜parameter>`` gains one ``amp;``, so reading inverts
  writing). v32 has no escaping: such a value cannot be represented.
* Tool definitions, user turns and tool results belong to the whole prompt: see
  :mod:`kvgate.dialects.deepseek_format` (chat formats ``deepseek_v32`` / ``deepseek_v4``).

Parsing: text before the block is content (the ``'\\n\\n'`` before it is syntax; one or no newline
is read too), ``<think>``/``</think>`` delimit reasoning, whitespace between tags is lenient, the
end-of-sentence token is swallowed. Arguments are rebuilt as ``{"k": value, ...}`` (default JSON
separators), string values streamed as they arrive. Duplicate parameters, an unknown tool, a
``string="false"`` value that is not JSON and an unclosed block give ParseIssues; an invoke that is
malformed or unclosed gives one and no ``ToolCallEnd`` (``kvgate.core.dialect.StreamParser``).
Values are typed by the parameter's schema, which wins over the flag when the text reads as the
schema's type: ``string="true"`` ``42`` for an integer is ``42``, ``string="false"`` ``20240116``
for a string is ``"20240116"`` (:mod:`kvgate.dialects._typing`). Variants read and reported: those
two, a JSON object as the invoke's body (no parameter tags) is the arguments, and one undeclared
parameter ``arguments`` / ``input`` holding an object is the arguments (as vLLM reads them). The
peers' cases are in tests/dialects/test_peer_cases_deepseek_dsml.py; kvgate agrees with vLLM on
each, and reports the variants it read. A variant read renders back canonically.

Fence grammar: ``auto`` lets text run until ``'\n\n<' + D + BLOCK + '>\n'``; then one or more
INVOKEs of the request's tools, their PARAMs in any order, each at most once, every required one
before the invoke closes. A string value is raw text that opens no tag (``<｜DSML｜`` or
``</｜DSML｜``), any other value compact JSON valid against the parameter's schema; a parameter
without a declared type may take either flag.

Serves: architectures named ``deepseek*``. Variant: ``v4`` for a V4 architecture, else ``v32``.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, tag_value, with_reasoning
from kvgate.core.fence.grammar import AnyOrder, Field, Lit, Node, TextThen, alt, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import is_string_schema, properties
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import history_members, wire_value
from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser
from kvgate.dialects._typing import json_object

VARIANTS = {"v32": "function_calls", "v4": "tool_calls"}
DSML = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
INVOKE_OPEN, INVOKE_CLOSE = f'<{DSML}invoke name="', f"</{DSML}invoke>"
PARAM_OPEN, PARAM_CLOSE = f'<{DSML}parameter name="', f"</{DSML}parameter>"
PARAM_HEAD = re.compile(r'^(.*)" string="(true|false)$', re.DOTALL)
ESCAPED_CLOSE = "lt;/" + PARAM_CLOSE[2:]
ESCAPE = re.compile(r"&((?:amp;)*)" + re.escape(ESCAPED_CLOSE))


def escape_value(text: str) -> str:
    """V4: a closing parameter tag inside a string value is written ``&lt;/｜DSML｜parameter>``;
    text that already reads like that escape gains one ``amp;`` so the mapping stays invertible."""
    bumped = ESCAPE.sub(lambda m: "&amp;" + m.group(1) + ESCAPED_CLOSE, text)
    return bumped.replace(PARAM_CLOSE, "&" + ESCAPED_CLOSE)


def unescape_value(text: str) -> str:
    return ESCAPE.sub(lambda m: ("&" + m.group(1)[4:] + ESCAPED_CLOSE) if m.group(1) else PARAM_CLOSE, text)


class DeepseekDsml(Dialect):
    name = "deepseek_dsml"

    def __init__(self, variant: str = "v32"):
        if variant not in VARIANTS:
            raise ValueError(f"deepseek_dsml variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.block = VARIANTS[variant]

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        return ARCHITECTURE_MATCH if "deepseek" in architecture.lower() else 0

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        return "v4" if "v4" in architecture.lower() else ""

    def chat_format_without_template(self) -> str:
        return "deepseek_" + self.variant  # V3.2 and V4 ship their prompt encoding as Python

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": f"<{DSML}{self.block}>", "block_open": f"\n\n<{DSML}{self.block}>\n",
            "block_close": f"</{DSML}{self.block}>", "invoke_open": f'<{DSML}invoke name="',
            "invoke_head_close": '">\n', "invoke_close": f"</{DSML}invoke>",
            "param_open": f'<{DSML}parameter name="', "param_string_true": '" string="true">',
            "param_string_false": '" string="false">', "param_close": f"</{DSML}parameter>",
            "think_open": "<think>", "think_close": "</think>", "eos": EOS, "dsml": DSML,
        }

    def render_param(self, key: str, raw: str) -> str:
        is_string, value = wire_value(raw)
        if is_string and self.variant == "v4":
            value = escape_value(value)
        flag = "true" if is_string else "false"
        return f'<{DSML}parameter name="{key}" string="{flag}">{value}</{DSML}parameter>'

    def render_tool_call(self, name: str, arguments: str) -> str:
        params = [self.render_param(k, raw) for k, raw in history_members(arguments, f"tool call {name!r}")]
        return f'<{DSML}invoke name="{name}">\n' + "\n".join(params) + f"\n</{DSML}invoke>"

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        invokes = "\n".join(self.render_tool_call(qualified(c), c.arguments) for c in calls)
        return f"\n\n<{DSML}{self.block}>\n" + invokes + f"\n</{DSML}{self.block}>"

    def assistant_body(self, message: Message, with_reasoning: bool) -> str:
        """What the model generated for this turn, end-of-sentence token included."""
        think = (message.reasoning or "") + "</think>" if with_reasoning else ""
        return think + message.content + self.render_calls(message.tool_calls) + EOS

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Per-message text of the chat format as role/content dicts (see deepseek_format)."""
        from kvgate.dialects.deepseek_format import DeepseekChatFormat

        return DeepseekChatFormat(self).message_texts(messages, tools, bool(thinking))

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> DsmlParser:
        return DsmlParser(tools, call_id, start_in=start_in, block=self.block,
                          escaping=self.variant == "v4")

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        # every tag opens with one of these: a value may not start any tag, in any token split
        markup = ("<" + DSML, "</" + DSML)
        flags = {True: lit("param_string_true"), False: lit("param_string_false")}

        def field(key: str, schema: Any, required: bool) -> Field:
            string = is_string_schema(schema)
            kinds = [string] if (schema and "type" in schema) or string else [True, False]
            bodies = [seq(Lit(lit("param_open") + key + flags[kind]),
                          tag_value(schema, kind, lit("param_close"), markup), Lit("\n")) for kind in kinds]
            return Field(alt(*bodies), required)

        def one(tool: Tool) -> Node:
            head = Lit(lit("invoke_open") + tool.qualified_name + lit("invoke_head_close"))
            fields = tuple(field(k, s, r) for k, s, r in properties(tool))
            params = AnyOrder(fields, empty="\n") if fields else Lit("\n")
            return seq(head, params, Lit(lit("invoke_close")))

        block_open, block_close = lit("block_open"), lit("block_close")
        head_auto = seq(TextThen(end=block_open.rstrip("\n"), excludes=markup), Lit("\n"))
        rest = compose(plan, Lit(block_open), head_auto, any_tool(plan, one), "\n", (lit("trigger"),),
                       "\n" + block_close)
        return with_reasoning(self, plan, rest)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


# ---- parsing (incremental; the format is in the module docstring)

class DsmlParser(TagCallParser):
    value_close = PARAM_CLOSE
    skip_until = INVOKE_CLOSE
    tool_states = ("block_body", "invoke_name", "invoke_body", "json_body", "param_head", "value_text",
                   "skip_call", "skip_block")

    def __init__(self, tools, call_id, start_in="content", block="function_calls", escaping=False):
        self.block_open, self.block_close = f"<{DSML}{block}>", f"</{DSML}{block}>"
        self.escaping = escaping
        self.in_block = False
        super().__init__(tools, call_id, start_in)

    def content(self) -> bool:
        opens = ["\n\n" + self.block_open, "\n" + self.block_open, self.block_open]
        head, tag = self.scan(opens + [THINK_OPEN, THINK_CLOSE, EOS])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.reasoning_text)
        if tag in opens:
            self.in_block, self.raw = True, tag
            return self.goto(self.block_body)
        return bool(head) or tag is not None

    def after_think(self) -> bool:
        return self.goto(self.content)

    def after_call(self):
        return self.block_body

    def _expect_any(self, options) -> object:
        for literal, state in options:
            before = self.buf
            got = self.expect(literal)
            if got is NEED_MORE:
                return NEED_MORE
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                return state
        return None

    def block_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self._expect_any([(INVOKE_OPEN, self.invoke_name), (self.block_close, self.content)])
        if state is NEED_MORE:
            return False
        if state is None:
            self.problem = f"expected an invoke or {self.block_close} in the tool calls block"
            return self.goto(self.skip_block)
        if state == self.content:
            self.in_block, self.raw = False, ""
        return self.goto(state)

    def invoke_name(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        name = self.take(pos)
        self.raw += name + self.take(2)
        return self.begin_call(name, self.invoke_body)

    def _unclosed_head(self) -> bool:
        self.raw += self.take(len(self.buf))
        return False

    def invoke_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self._expect_any([(PARAM_OPEN, self.param_head), (INVOKE_CLOSE, "end")])
        if state is NEED_MORE:
            return False
        if state is None:
            if not self.args.keys and self.buf.lstrip().startswith("{"):
                self.body = ""
                return self.goto(self.json_body)
            return self.malformed(f"expected a parameter or {INVOKE_CLOSE}")
        return self.end_call() if state == "end" else self.goto(state)

    def json_body(self) -> bool:
        """State: the arguments written as one JSON object between the invoke's tags (a variant)."""
        head, tag = self.scan([INVOKE_CLOSE])
        self.raw += head + (tag or "")
        self.body += head
        if tag is None:
            return bool(head)
        if not json_object(self.body):
            self.issue("the invoke's body is neither parameters nor a JSON object", self.raw)
            self.fail_call()
            self.raw = ""
            return self.goto(self.block_body)
        self.issue("arguments written as a JSON object in the invoke's body", self.raw)
        self._delta(self.args.whole(self.body.strip()))
        return self.end_call()

    def param_head(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        head = self.take(pos)
        self.raw += head + self.take(2)
        match = PARAM_HEAD.match(head)
        if not match:
            return self.malformed("malformed parameter tag")
        return self.begin_value(match.group(1), match.group(2) == "true", self.invoke_body)

    def decided(self, raw: str) -> str:
        if not self.escaping:
            return raw
        amp = raw.rfind("&")
        if amp < 0:
            return raw
        rest = raw[amp + 1:]
        while rest.startswith("amp;"):
            rest = rest[4:]
        pending = "amp;".startswith(rest) or (ESCAPED_CLOSE.startswith(rest) and rest != ESCAPED_CLOSE)
        return raw[:amp] if pending else raw

    def unescape(self, text: str) -> str:
        return unescape_value(text) if self.escaping else text

    def at_end(self) -> None:
        was_open = self.call_open
        super().at_end()
        if self.in_block and not was_open:
            self.issue(f"unclosed {self.block_open} block", self.raw)


@hookimpl
def register_dialects(register):
    register("deepseek_dsml", DeepseekDsml)


@hookimpl
def register_chat_formats(register):
    from kvgate.dialects.deepseek_format import format_factory

    register("deepseek_v32", format_factory("v32"))
    register("deepseek_v4", format_factory("v4"))
