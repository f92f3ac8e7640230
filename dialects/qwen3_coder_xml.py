"""Qwen3-Coder XML tool dialect (Qwen3-Coder, the Qwen3.5 coders): ChatML turns, XML calls.

Wire format (byte-exact; Python ``repr`` literals). The turns are ChatML
(``'<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'``); this dialect writes their content:

* System turn: ``SYS + TOOLS`` where SYS is the system text, or (tools and no system message)
  ``'You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.'``.
  TOOLS = ``'\\n\\n# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>'`` + per tool
  ``'\\n<function>\\n<name>NAME</name>'`` + ``'\\n<description>' + description.strip() +
  '</description>'`` (when any) + ``'\\n<parameters>'`` + per property ``'\\n<parameter>\\n<name>K
  </name>'`` + ``'\\n<type>T</type>'`` + ``'\\n<description>D</description>'`` + each other key
  ``'\\n<KEY>VALUE</KEY>'`` + ``'\\n</parameter>'``; then the other keys of ``parameters`` (e.g.
  ``'\\n<required>["city"]</required>'``) + ``'\\n</parameters>\\n</function>'``; then
  ``'\\n</tools>'`` + the instruction paragraph ``INSTRUCTIONS``. VALUE is ``tojson`` for a mapping
  or a list, Python ``str()`` otherwise (``False``, ``None``), as the template's ``| string`` does.
* Assistant turn with calls: ``content.strip() + '\\n\\n'`` (when not blank) + the calls joined by
  ``'\\n'``; one call is ``'<tool_call>\\n<function=NAME>\\n'`` + per argument
  ``'<parameter=KEY>\\n' + VALUE + '\\n</parameter>\\n'`` + ``'</function>\\n</tool_call>'``.
  VALUE is the raw text of a string, the raw JSON text the model generated for anything else.
  Convention: the template writes Python ``str()`` for booleans and null (``True``, ``None``)
  while the model writes JSON (``true``); kvgate writes back what the model wrote (JSON), so a
  parsed call re-renders byte for byte. Reasoning is not rendered (the template has no field).
* Tool results: one user turn per run of tool messages, each ``'<tool_response>\\n' + result +
  '\\n</tool_response>\\n'``.

Template source: the Qwen3-Coder chat template (Qwen3-Coder-480B-A35B-Instruct), known here through
the reference notes (dialects.md C.3, whose call and result bytes the tests check) and the
template text as recalled; the instruction paragraph is not byte-verified against a copy.

Parsing: ``'\\n\\n<tool_call>'`` (or one / no newline) starts a call; ``<think>``/``</think>``
delimit reasoning. Values end at ``'\\n</parameter>'`` (or ``</parameter>``); one ``'\\n'`` after ``<parameter=KEY>`` is
syntax; a value whose closing tag is missing ends at the next ``'\n<parameter='`` or
``'\n</function>'`` (reported: "parameter 'K' was not closed before ..."). Values are typed by the tool's schema: raw text for a string parameter (``"123"`` stays a
string), JSON otherwise (Python ``True``/``False``/``None`` read as JSON for a non-string
parameter); a value that is not JSON stays a string, one with escaped quotes that spells the
array or object its schema wants is read as that JSON (reported, :mod:`kvgate.dialects._typing`).
Duplicate keys and unknown tools give ParseIssues; a malformed or unclosed call gives one and no
``ToolCallEnd`` (``kvgate.core.dialect.StreamParser``).

Fence grammar: ``auto`` lets text run until ``<tool_call>`` (after ``'\\n\\n'`` when text came
first); a call is ``'\\n<function=NAME>\\n'`` + its parameters in any order, each at most once,
every required one present, + ``'</function>\\n</tool_call>'``. A string value is raw text that
opens none of the markup tags (``</parameter>`` included), any other value compact JSON valid
against its schema (an integer parameter takes only an integer). Calls are joined by ``'\\n'``.

Serves: the Qwen3.5 and Qwen3-Next architectures (``qwen3_5``, ``qwen3_5_moe``, ``qwen3_next``), and templates that write ``<function=`` and ``<parameter=``.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import ARCHITECTURE_MATCH, TEMPLATE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, tag_value, with_reasoning
from kvgate.core.fence.grammar import AnyOrder, Field, Lit, Node, TextThen, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import is_string_schema, properties
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import history_members, wire_value
from kvgate.dialects._qwen_tools import DEFAULT_SYSTEM, tools_block
from kvgate.dialects._stream import NEED_MORE, NewlineThinkStates
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
VALUE_CLOSE = "\n" + PARAM_CLOSE
MARKUP = (CALL_OPEN, CALL_CLOSE, FUNCTION_OPEN, FUNCTION_CLOSE, PARAM_OPEN, PARAM_CLOSE)
ARCHITECTURES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")  # runtimes' architecture names whose models call tools in this dialect
PYTHON_SCALARS = {"True": "true", "False": "false", "None": "null"}


class Qwen3CoderXml(Dialect):
    name = "qwen3_coder_xml"

    def __init__(self, variant: str = "qwen3_coder"):
        if variant not in ("qwen3_coder", ""):
            raise ValueError(f"qwen3_coder_xml variant must be 'qwen3_coder', got {variant!r}")
        self.variant = "qwen3_coder"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if architecture in ARCHITECTURES:
            return ARCHITECTURE_MATCH
        return TEMPLATE_MATCH + 5 if FUNCTION_OPEN in chat_template and PARAM_OPEN in chat_template else 0

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": CALL_OPEN, "call_open": CALL_OPEN, "call_close": CALL_CLOSE,
            "function_open": FUNCTION_OPEN, "function_close": FUNCTION_CLOSE, "param_open": PARAM_OPEN,
            "param_close": PARAM_CLOSE, "call_separator": "\n", "content_separator": "\n\n",
            "think_open": THINK_OPEN, "think_close": THINK_CLOSE,
            "response_open": "<tool_response>", "response_close": "</tool_response>",
        }

    @property
    def closing_literals(self) -> list[str]:
        return [VALUE_CLOSE, FUNCTION_CLOSE + "\n" + CALL_CLOSE]

    # ---- rendering

    def render_tool_call(self, name: str, arguments: str) -> str:
        params = "".join(
            PARAM_OPEN + key + ">\n" + wire_value(raw)[1] + VALUE_CLOSE + "\n"
            for key, raw in history_members(arguments, f"tool call {name!r}"))
        return CALL_OPEN + "\n" + FUNCTION_OPEN + name + ">\n" + params + FUNCTION_CLOSE + "\n" + CALL_CLOSE

    def assistant_content(self, message: Message) -> str:
        """The content of an assistant turn (what the model wrote after ``'<|im_start|>assistant\\n'``)."""
        if not message.tool_calls:
            return message.content
        content = message.content.strip()
        calls = "\n".join(self.render_tool_call(qualified(c), c.arguments) for c in message.tool_calls)
        return (content + "\n\n" if content else "") + calls

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        rest = list(messages)
        if rest and rest[0].role == "system":
            out.append({"role": "system", "content": rest.pop(0).content + tools_block(tools)})
        elif tools:
            out.append({"role": "system", "content": DEFAULT_SYSTEM + tools_block(tools)})
        for index, message in enumerate(rest):
            if message.role == "tool":
                block = "<tool_response>\n" + message.content + "\n</tool_response>\n"
                if index and rest[index - 1].role == "tool":
                    out[-1]["content"] += block
                else:
                    out.append({"role": "user", "content": block})
            elif message.role == "assistant":
                out.append({"role": "assistant", "content": self.assistant_content(message)})
            else:
                out.append({"role": message.role, "content": message.content})
        return out

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> "Qwen3CoderParser":
        return Qwen3CoderParser(tools, call_id, start_in=start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        markup = tuple(lit(k) for k in ("call_open", "call_close", "function_open", "function_close",
                                        "param_open", "param_close"))
        close = "\n" + lit("param_close")

        def field(key: str, schema: Any, required: bool) -> Field:
            head = Lit(lit("param_open") + key + ">\n")
            return Field(seq(head, tag_value(schema, is_string_schema(schema), close, markup), Lit("\n")), required)

        def one(tool: Tool) -> Node:
            fields = tuple(field(k, s, r) for k, s, r in properties(tool))
            params = AnyOrder(fields) if fields else Lit("")
            head = Lit("\n" + lit("function_open") + tool.qualified_name + ">\n")
            return seq(head, params, Lit(lit("function_close") + "\n" + lit("call_close")))

        trigger = lit("trigger")
        head_auto = TextThen(end=trigger, excludes=markup[1:], lead=lit("content_separator"))
        rest = compose(plan, Lit(trigger), head_auto, any_tool(plan, one), lit("call_separator") + trigger,
                       (trigger,))
        return with_reasoning(self, plan, rest, "\n\n")


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


# ---- parsing (incremental; the format is in the module docstring)

class Qwen3CoderParser(NewlineThinkStates, TagCallParser):
    value_close = VALUE_CLOSE
    value_closes = (PARAM_CLOSE,)
    value_interrupts = {"\n" + PARAM_OPEN: "the next parameter", "\n" + FUNCTION_CLOSE: "the end of the call"}
    skip_until = CALL_CLOSE
    tool_states = ("call_head", "call_name", "call_body", "param_key", "value_text", "call_end", "skip_call")

    def content(self) -> bool:
        head, tag = self.scan(["\n\n" + CALL_OPEN, "\n" + CALL_OPEN, CALL_OPEN, THINK_OPEN, THINK_CLOSE])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.think_open)
        if tag == THINK_CLOSE:
            return self.goto(self.after_think)
        if tag is not None:
            self.raw = tag
            return self.goto(self.call_head)
        return bool(head)

    def text_state(self):
        return self.content

    def _literal(self, text: str, state, problem: str) -> bool:
        before = self.buf
        got = self.expect(text)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        return self.goto(state) if got else self.malformed(problem)

    def call_head(self) -> bool:
        return self._literal(FUNCTION_OPEN, self.call_name, "expected <function=NAME> in a tool call")

    def _header(self) -> Optional[str]:
        """The text up to ``>`` of a ``<function=`` / ``<parameter=`` tag and one newline after it."""
        pos = self.buf.find(">")
        if pos < 0 or (pos == len(self.buf) - 1 and not self.final):
            return None
        name = self.take(pos)
        self.raw += name + self.take(1)
        if self.buf.startswith("\n"):
            self.raw += self.take(1)
        return name

    def call_name(self) -> bool:
        name = self._header()
        if name is None:
            return self._unclosed() if self.final else False
        return self.begin_call(name.strip(), self.call_body)

    def _unclosed(self) -> bool:
        self.raw += self.take(len(self.buf))
        return self.malformed("unclosed tool call")

    def call_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        for text, state in ((PARAM_OPEN, self.param_key), (FUNCTION_CLOSE, self.call_end)):
            before = self.buf
            got = self.expect(text)
            if got is NEED_MORE:
                return False
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                return self.goto(state)
        return self.malformed("expected <parameter=KEY> or </function> in a tool call")

    def param_key(self) -> bool:
        key = self._header()
        if key is None:
            return self._unclosed() if self.final else False
        return self.begin_value(key.strip(), None, self.call_body)

    def close_value(self) -> None:
        if self.value_mode == "typed" and self.value_raw in PYTHON_SCALARS:
            self.value_raw = PYTHON_SCALARS[self.value_raw]
        super().close_value()

    def call_end(self) -> bool:
        before = self.buf
        got = self.expect(CALL_CLOSE)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        if got is False and not (self.final and not self.buf.strip()):
            return self.malformed("expected </tool_call> after </function>")
        return self.end_call()


@hookimpl
def register_dialects(register):
    register("qwen3_coder_xml", Qwen3CoderXml)
