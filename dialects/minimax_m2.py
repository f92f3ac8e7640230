"""MiniMax M2 tool dialect (MiniMax-M2 / M2.5 / M2.7): ``<minimax:tool_call>`` XML calls, and its
whole-prompt chat format ``minimax_m2``.

Wire format (byte-exact; Python ``repr`` literals), as MiniMax-M2's chat template writes it (the
copy in llama.cpp's ``models/templates/MiniMax-M2.jinja``, kept as
tests/dialects/templates/minimax_m2.jinja and rendered by transformers in the tests):

* Prompt: ``']~!b[]~b]system\\n' + SYS + TOOLS + '[e~[\\n'`` then the turns. SYS is the first
  message's text when it is a system message, else ``'You are a helpful assistant.'``. TOOLS (with
  tools) is ``'\\n\\n# Tools\\nYou may call one or more tools to assist with the user query.\\nHere are
  the tools available in JSONSchema format:\\n\\n<tools>\\n'`` + per tool ``'<tool>' + JSON + '</tool>\\n'``
  (JSON: the OpenAI function object, ``json.dumps`` default separators, non-ASCII kept) +
  ``'</tools>\\n\\n'`` + the instruction ``INSTRUCTION``.
* User turn: ``']~b]user\\n' + text + '[e~[\\n'``. A run of tool results: ``']~b]tool'`` + per result
  ``'\\n<response>' + text + '</response>'`` + ``'[e~[\\n'``. A later system message (which the
  template drops) is kept as ``']~b]system\\n' + text + '[e~[\\n'`` (kvgate's choice).
* Assistant turn: ``']~b]ai\\n' + THINK + content + CALLS + '[e~[\\n'``; THINK is ``'<think>\\n' +
  reasoning + '\\n</think>\\n\\n'`` for a turn with reasoning after the last user turn, else empty.
  CALLS (with calls) is ``'<minimax:tool_call>\\n'`` + per call ``'<invoke name="' + NAME + '">\\n'`` +
  per argument ``'<parameter name="' + KEY + '">' + VALUE + '</parameter>\\n'`` + ``'</invoke>\\n'``, then
  ``'</minimax:tool_call>'``. VALUE is a string's raw text, anything else the raw JSON text the model
  generated (the template writes ``tojson`` of it: the same text for JSON written with the default
  separators).
* Generation prompt: ``']~b]ai\\n<think>\\n'``: a completion starts inside reasoning and is
  ``reasoning + '\\n</think>\\n\\n' + content + CALLS``; ``'[e~['`` is the end-of-turn token.

Later MiniMax templates (M2.1 on) write a ``'\\n'`` before ``<minimax:tool_call>`` and honour
``enable_thinking``; a model shipping one renders through it (``render_messages`` hands the calls to
the template); this parser then reads that ``'\\n'`` as the end of the content.

Parsing: ``<minimax:tool_call>`` starts a block of invokes; ``'\\n</think>'`` / ``</think>`` ends
reasoning (one ``'\\n'`` or ``'\\n\\n'`` after it is syntax); whitespace between tags is lenient.
Values are the raw text up to ``</parameter>``, typed by the tool's schema: raw text for a string
parameter, JSON otherwise (a value that is not JSON stays a string); arguments are rebuilt as
``{"k": value, ...}`` (default JSON separators). Duplicate parameters and unknown tools give
ParseIssues; a malformed or unclosed call gives one and no ``ToolCallEnd``, an unclosed block one.

Fence grammar: ``auto`` lets text run until ``<minimax:tool_call>``; then ``'\\n'`` and one or more
invokes of the request's tools, each ``'<invoke name="NAME">\\n'`` + its parameters in any order,
each at most once, every required one present, + ``'</invoke>\\n'``; then ``</minimax:tool_call>``. A
string value is raw text that opens none of the markup tags, any other value compact JSON valid
against its schema. In reasoning mode the reasoning runs to ``</think>``, then ``'\\n\\n'``.

Serves: architectures named ``minimax*`` and templates that write ``<minimax:tool_call>``.
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
from kvgate.dialects._stream import NEED_MORE, NewlineThinkStates
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser

BLOCK_OPEN, BLOCK_CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE_OPEN, INVOKE_CLOSE = '<invoke name="', "</invoke>"
PARAM_OPEN, PARAM_CLOSE = '<parameter name="', "</parameter>"
MARKUP = (BLOCK_OPEN, BLOCK_CLOSE, INVOKE_OPEN, INVOKE_CLOSE, PARAM_OPEN, PARAM_CLOSE)
BEGIN, SYSTEM, USER, AI, TOOL, END = "]~!b[", "]~b]system\n", "]~b]user\n", "]~b]ai\n", "]~b]tool", "[e~[\n"
DEFAULT_SYSTEM = "You are a helpful assistant."
TOOLS_HEAD = ("\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
              "Here are the tools available in JSONSchema format:\n\n<tools>\n")
INSTRUCTION = (
    "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n"
    '<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">param-value-1'
    '</parameter>\n<parameter name="param-key-2">param-value-2</parameter>\n...\n</invoke>\n'
    "</minimax:tool_call>")


class MinimaxM2(Dialect):
    name = "minimax_m2"

    def __init__(self, variant: str = "m2"):
        if variant not in ("m2", ""):
            raise ValueError(f"minimax_m2 variant must be 'm2', got {variant!r}")
        self.variant = "m2"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        if "minimax" in architecture.lower():
            return ARCHITECTURE_MATCH
        return TEMPLATE_MATCH + 5 if BLOCK_OPEN in chat_template else 0

    def chat_format_without_template(self) -> str:
        return "minimax_m2"

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": BLOCK_OPEN, "block_open": BLOCK_OPEN, "block_close": BLOCK_CLOSE,
            "invoke_open": INVOKE_OPEN, "invoke_head_close": '">\n', "invoke_close": INVOKE_CLOSE,
            "param_open": PARAM_OPEN, "param_head_close": '">', "param_close": PARAM_CLOSE,
            "think_open": THINK_OPEN, "think_close": THINK_CLOSE, "eos": "[e~[",
        }

    # ---- rendering

    def render_tool_call(self, name: str, arguments: str) -> str:
        params = "".join(f'{PARAM_OPEN}{key}">{wire_value(raw)[1]}{PARAM_CLOSE}\n'
                         for key, raw in history_members(arguments, f"tool call {name!r}"))
        return f'{INVOKE_OPEN}{name}">\n{params}{INVOKE_CLOSE}\n'

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        invokes = "".join(self.render_tool_call(qualified(c), c.arguments) for c in calls)
        return BLOCK_OPEN + "\n" + invokes + BLOCK_CLOSE

    def assistant_body(self, message: Message, with_reasoning: bool) -> str:
        """The assistant turn's text after ``']~b]ai\\n'`` (the template's THINK + content + CALLS)."""
        think = f"{THINK_OPEN}\n{message.reasoning}\n{THINK_CLOSE}\n\n" if with_reasoning and message.reasoning else ""
        return think + message.content + self.render_calls(message.tool_calls)

    def template_tools(self, tools: list[Tool]) -> Optional[list[dict[str, Any]]]:
        return [{"type": "function", "function": openai_tool(t)} for t in tools]

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Messages for the model's own template, which writes the tools and the calls itself; each
        argument is handed over as the text to write, so the template writes what the model wrote."""
        return [template_message(m) for m in messages]

    # ---- parsing and fences

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> "MinimaxParser":
        return MinimaxParser(tools, call_id, start_in=start_in)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        markup = tuple(lit(k) for k in ("block_open", "block_close", "invoke_open", "invoke_close",
                                        "param_open", "param_close"))

        def field(key: str, schema: Any, required: bool) -> Field:
            head = Lit(lit("param_open") + key + lit("param_head_close"))
            value = tag_value(schema, is_string_schema(schema), lit("param_close"), markup)
            return Field(seq(head, value, Lit("\n")), required)

        def one(tool: Tool) -> Node:
            fields = tuple(field(k, s, r) for k, s, r in properties(tool))
            params = AnyOrder(fields) if fields else Lit("")
            head = Lit(lit("invoke_open") + tool.qualified_name + lit("invoke_head_close"))
            return seq(head, params, Lit(lit("invoke_close") + "\n"))

        trigger = lit("trigger")
        head_auto = seq(TextThen(end=trigger, excludes=markup[1:]), Lit("\n"))
        rest = compose(plan, Lit(trigger + "\n"), head_auto, any_tool(plan, one), "", (trigger,),
                       lit("block_close"))
        return with_reasoning(self, plan, rest, "\n\n")


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


def template_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role != "assistant":
        return out
    if message.reasoning:
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [template_call(c) for c in message.tool_calls]
    return out


def template_call(call: ToolCall) -> dict[str, Any]:
    name = qualified(call)
    wire = {key: wire_value(raw)[1] for key, raw in history_members(call.arguments, f"tool call {name!r}")}
    return {"id": call.id, "type": "function", "name": name, "function": {"name": name, "arguments": wire}}


# ---- the whole prompt (chat format ``minimax_m2``), byte-identical to the template

class MinimaxChatFormat(ChatFormat):
    name = "minimax_m2"

    def __init__(self, dialect: Optional[MinimaxM2] = None):
        self.dialect = dialect if isinstance(dialect, MinimaxM2) else MinimaxM2()

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        messages = list(request.messages)
        first = messages.pop(0).content if messages and messages[0].role == "system" else ""
        text = BEGIN + SYSTEM + (first or DEFAULT_SYSTEM) + self.tools_text(request.tools) + END
        text += "".join(self.turns(messages))
        return text + (AI + THINK_OPEN + "\n" if add_generation_prompt else "")

    def parser_start(self, request: ChatRequest) -> str:
        return "reasoning"

    def tools_text(self, tools: list[Tool]) -> str:
        if not tools:
            return ""
        listed = "".join(f"<tool>{dumps(openai_tool(t))}</tool>\n" for t in tools)
        return TOOLS_HEAD + listed + INSTRUCTION

    def turns(self, messages: list[Message]) -> list[str]:
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        out = []
        for index, message in enumerate(messages):
            if message.role == "assistant":
                out.append(AI + self.dialect.assistant_body(message, index > last_user) + END)
            elif message.role == "tool":
                first = index == 0 or messages[index - 1].role != "tool"
                last = index + 1 == len(messages) or messages[index + 1].role != "tool"
                out.append((TOOL if first else "") + f"\n<response>{message.content}</response>"
                           + (END if last else ""))
            else:
                out.append((USER if message.role == "user" else SYSTEM) + message.content + END)
        return out


def format_factory(runtime=None, dialect=None) -> MinimaxChatFormat:
    return MinimaxChatFormat(dialect)


# ---- parsing (incremental; the format is in the module docstring)

class MinimaxParser(NewlineThinkStates, TagCallParser):
    value_close = PARAM_CLOSE
    skip_until = INVOKE_CLOSE
    tool_states = ("block_body", "invoke_name", "invoke_body", "param_key", "value_text", "skip_call",
                   "skip_block")

    def __init__(self, tools, call_id, start_in="content"):
        self.block_close = BLOCK_CLOSE
        self.in_block = False
        super().__init__(tools, call_id, start_in)

    def content(self) -> bool:
        head, tag = self.scan([BLOCK_OPEN, THINK_OPEN, THINK_CLOSE])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.think_open)
        if tag == THINK_CLOSE:
            return self.goto(self.after_think)
        if tag is not None:
            self.in_block, self.raw = True, tag
            return self.goto(self.block_body)
        return bool(head)

    def text_state(self):
        return self.content

    def after_call(self):
        return self.block_body

    def block_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self.expect_any([(INVOKE_OPEN, self.invoke_name), (BLOCK_CLOSE, self.content)])
        if state is NEED_MORE:
            return False
        if state is None:
            self.problem = f"expected an invoke or {BLOCK_CLOSE} in the tool call block"
            return self.goto(self.skip_block)
        if state == self.content:
            self.in_block, self.raw = False, ""
        return self.goto(state)

    def _head(self) -> Optional[str]:
        """The name up to ``">`` of an invoke or parameter tag (the tag's end consumed)."""
        pos = self.buf.find('">')
        if pos < 0:
            if self.final:
                self.raw += self.take(len(self.buf))
            return None
        name = self.take(pos)
        self.raw += name + self.take(2)
        return name

    def invoke_name(self) -> bool:
        name = self._head()
        return False if name is None else self.begin_call(name, self.invoke_body)

    def invoke_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self.expect_any([(PARAM_OPEN, self.param_key), (INVOKE_CLOSE, "end")])
        if state is NEED_MORE:
            return False
        if state is None:
            return self.malformed(f"expected a parameter or {INVOKE_CLOSE}")
        return self.end_call() if state == "end" else self.goto(state)

    def param_key(self) -> bool:
        key = self._head()
        return False if key is None else self.begin_value(key, None, self.invoke_body)

    def at_end(self) -> None:
        was_open = self.call_open
        super().at_end()
        if self.in_block and not was_open:
            self.issue(f"unclosed {BLOCK_OPEN} block", self.raw)


@hookimpl
def register_dialects(register):
    register("minimax_m2", MinimaxM2)


@hookimpl
def register_chat_formats(register):
    register("minimax_m2", format_factory)
