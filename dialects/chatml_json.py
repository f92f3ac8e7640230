"""ChatML JSON tool dialect (Hermes / Qwen2.5 / Qwen3 ``<tool_call>`` JSON).

Wire format (byte-exact; Python ``repr`` literals):

* Tools go into the first system message (one is created when there is none):
  ``SYS + '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
  'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>'``
  + per tool ``'\\n' + json({"type": "function", "function": {"name", "description", "parameters"}})``
  + ``'\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments
  within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments":
  <args-json-object>}\\n</tool_call>'``. ``SYS`` is the system text + ``'\\n\\n'``, or empty (qwen3) /
  the Qwen default system prompt + ``'\\n\\n'`` (qwen25). JSON keeps non-ASCII, default separators.
* One call: ``'<tool_call>\\n{"name": "' + NAME + '", "arguments": ' + ARGS + '}\\n</tool_call>'``,
  ARGS being ``ToolCall.arguments`` verbatim (the JSON text the model generated; ``{}`` if empty).
* An assistant turn's content: ``THINK + content + calls``; each call is preceded by ``'\\n'``
  unless it is the first one and the content is empty. ``THINK`` (qwen3, turns after the last user
  message that carry reasoning) is ``'<think>\\n' + reasoning + '\\n</think>\\n\\n'``.
* Consecutive tool results form one user turn:
  ``'\\n'.join('<tool_response>\\n' + result + '\\n</tool_response>')``.

Parsing (incremental): text before ``<tool_call>`` is content, and a ``'\\n'`` right before a
call belongs to the call. ``<think>``/``</think>`` delimit reasoning (one ``'\\n'`` after the
opening tag, one before the closing tag and up to two after it are syntax). Lenient reading:
any whitespace between JSON tokens and around the tags, a missing final ``</tool_call>`` at the
end of output. Variants read into a completed call, each reported as a ParseIssue: arguments given
as a JSON string that holds an object (Granite; its decoded text becomes the arguments; an empty
string is ``{}``), the envelope's ``}`` missing before ``</tool_call>`` or the end of output (the
arguments object is complete). An unknown tool name gives a ParseIssue with the raw text and no
call. Arguments that are not one JSON object (malformed, unclosed, ``[...]``, a JSON string holding
anything else) give a ParseIssue and the started call no ``ToolCallEnd`` (``StreamParser``'s rule).
Namespaced tools are written ``namespace__name``; ToolCallStart carries the inner name and the
namespace. ``call_id(index, written_name)`` names the calls.

Fence grammar: ``auto`` lets text run until ``<tool_call>`` (a ``'\n'`` before it when text came
first), then forces ``'\n{"name": "'`` + one of the tools' names + ``'", "arguments": '`` + JSON valid
against that tool's parameters + ``'}\n</tool_call>'``; more calls follow after ``'\n'``.

Serves: any model no other dialect claims (the fallback), a ChatML template more strongly. Variant:
``qwen25`` when the template carries the Qwen2.5 default system prompt, else ``qwen3``.

Conventions where kvgate differs from vLLM's Hermes parser on its cases
(tests/dialects/test_peer_cases_chatml_json.py):

* ``"arguments": "hello"`` (a string holding no object): vLLM returns the arguments ``"hello"``;
  kvgate never completes the call, so the response ends with an error.
* The arguments object complete, the envelope's ``}`` missing at the end of output: vLLM drops the
  call; kvgate completes it and reports the variant.
* A variant read renders back canonically (``"arguments": {...}``, the ``}`` written), so the next
  prompt differs from the generated text from that call on.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from kvgate.core.dialect import FALLBACK, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, with_reasoning
from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.grammar import Lit, Node, TextThen, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, tool_parameters
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import Message, Tool, ToolCall, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, ToolChoice
from kvgate.dialects._args import ToolIndex, dumps, openai_tool
from kvgate.dialects._stream import NEED_MORE, NewlineThinkStates, StateParser
from kvgate.dialects._typing import json_object

QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
CALL_PREFIX = '<tool_call>\n{"name": "'
ARGS_PREFIX = '", "arguments": '
CALL_SUFFIX = "}\n</tool_call>"
VARIANTS = ("qwen3", "qwen25")
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CHATML_MARKERS = ("<|im_start|>", "<tool_call>")
JSON_OUTSIDE_STRING = set("{}[],:0123456789-+.eE \t\r\ntruefalsn")


class ChatmlJson(Dialect):
    name = "chatml_json"

    def __init__(self, variant: str = "qwen3"):
        if variant not in VARIANTS:
            raise ValueError(f"chatml_json variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        return FALLBACK + (9 if any(marker in chat_template for marker in CHATML_MARKERS) else 0)

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        return "qwen25" if QWEN_DEFAULT_SYSTEM in chat_template else "qwen3"

    # ---- literals and grammar boundaries

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": "<tool_call>", "call_open": "<tool_call>", "call_close": "</tool_call>",
            "call_prefix": CALL_PREFIX, "args_prefix": ARGS_PREFIX, "call_suffix": CALL_SUFFIX,
            "call_separator": "\n", "think_open": "<think>", "think_close": "</think>",
            "response_open": "<tool_response>", "response_close": "</tool_response>",
        }

    def render_tool_call(self, name: str, arguments: str) -> str:
        return CALL_PREFIX + name + ARGS_PREFIX + (arguments if arguments.strip() else "{}") + CALL_SUFFIX

    def tools_block(self, tools: list[Tool]) -> str:
        listed = "".join("\n" + dumps({"type": "function", "function": openai_tool(t)}) for t in tools)
        return TOOLS_HEAD + listed + TOOLS_TAIL

    # ---- rendering

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        out = self._system_turns(messages, tools)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        for index, message in enumerate(messages):
            if message.role == "system" and out and out[0].get("_from") == index:
                continue
            if message.role == "tool":
                self._add_tool_result(out, message)
            elif message.role == "assistant":
                keep = self.variant == "qwen3" and index > last_user
                out.append({"role": "assistant", "content": self.assistant_content(message, keep)})
            else:
                out.append({"role": message.role, "content": message.content})
        for turn in out:
            turn.pop("_from", None)
            turn.pop("_tool", None)
        return out

    def _system_turns(self, messages: list[Message], tools: list[Tool]) -> list[dict[str, Any]]:
        first = next((i for i, m in enumerate(messages) if m.role == "system"), None)
        if first is not None and first != 0:
            first = None
        default = QWEN_DEFAULT_SYSTEM if self.variant == "qwen25" else None
        system = messages[0].content if first == 0 else default
        if not tools:
            return [{"role": "system", "content": system, "_from": first}] if system is not None else []
        sys_text = system + "\n\n" if system is not None else ""
        return [{"role": "system", "content": sys_text + self.tools_block(tools), "_from": first}]

    def assistant_content(self, message: Message, keep_reasoning: bool = True) -> str:
        think = ""
        if keep_reasoning and message.reasoning:
            think = "<think>\n" + message.reasoning + "\n</think>\n\n"
        calls = [
            ("\n" if i or message.content else "") + self.render_tool_call(qualified(c), c.arguments)
            for i, c in enumerate(message.tool_calls)
        ]
        return think + message.content + "".join(calls)

    def _add_tool_result(self, out: list[dict[str, Any]], message: Message) -> None:
        block = "<tool_response>\n" + message.content + "\n</tool_response>"
        if out and out[-1].get("_tool"):
            out[-1]["content"] += "\n" + block
        else:
            out.append({"role": "user", "content": block, "_tool": True})

    # ---- parsing

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> ChatmlParser:
        """``start_in``: "content", "reasoning" (the prompt ended inside ``<think>``) or
        "after_reasoning" (the prompt ended with a closed think block)."""
        return ChatmlParser(tools, call_id, start_in=start_in)

    # ---- fence grammar

    def fence_grammar(self, plan: FencePlan) -> Node:
        trigger = literal(self, "trigger")
        prefix, args_prefix = literal(self, "call_prefix"), literal(self, "args_prefix")
        suffix, separator = literal(self, "call_suffix"), literal(self, "call_separator")
        if not prefix.startswith(trigger):
            raise FenceError(f"chatml_json: call prefix {prefix!r} does not start with the trigger {trigger!r}")
        markup = (literal(self, "call_open"), literal(self, "call_close"))

        def one(tool: Tool) -> Node:
            schema = exclude_markup(tool_parameters(tool), markup)
            return seq(Lit(prefix[len(trigger):] + tool.qualified_name + args_prefix), json_node(schema),
                       Lit(suffix))

        head_auto = TextThen(end=trigger, excludes=markup[1:], lead=separator)
        rest = compose(plan, Lit(trigger), head_auto, any_tool(plan, one), separator + trigger, (trigger,))
        return with_reasoning(self, plan, rest, "\n\n")


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


# ---- parsing (incremental; the format is in the module docstring)

class ChatmlParser(NewlineThinkStates, StateParser):
    tool_states = ("call_head", "call_expect", "call_name", "call_args", "json_args", "string_args",
                   "call_tail", "call_close", "skip_call")

    def __init__(self, tools: list[Tool], call_id: CallIdFactory, start_in: str = "content"):
        self.index_of_tools = ToolIndex(tools)
        self.call_id = call_id
        self.start_in = start_in
        self.index = 0
        super().__init__()

    def start_state(self):
        return {"content": self.plain_text, "reasoning": self.reasoning_text,
                "after_reasoning": self.after_think}[self.start_in]

    # ---- text and reasoning

    def plain_text(self) -> bool:
        head, tag = self.scan(["\n" + CALL_OPEN, CALL_OPEN, THINK_OPEN])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.think_open)
        if tag is not None:
            self.raw, self.name, self.args, self.unknown = tag, None, "", None
            return self.goto(self.call_head)
        return bool(head)

    def text_state(self):
        return self.plain_text

    # ---- one call: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>

    def expect_then(self, literals: list[str], next_state) -> bool:
        self.pending, self.after = list(literals), next_state
        return self.goto(self.call_expect)

    def call_expect(self) -> bool:
        while self.pending:
            before = self.buf
            got = self.expect(self.pending[0])
            if got is NEED_MORE:
                return False
            self.raw += before[: len(before) - len(self.buf)]
            if got is False:
                return self.malformed(f"expected {self.pending[0]!r} in a tool call")
            self.pending.pop(0)
        return self.goto(self.after)

    def call_head(self) -> bool:
        return self.expect_then(["{", '"name"', ":"], self.call_name)

    def call_name(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped:
            return self.final and self.malformed("tool call without a name")
        if not stripped.startswith('"'):
            return self.malformed("tool name is not a JSON string")
        try:
            name, end = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            if self.final or CALL_CLOSE in stripped:
                return self.malformed("unterminated tool name")
            return False
        self.raw += self.take(len(self.buf) - len(stripped) + end)
        return self.start_call(name)

    def start_call(self, written: str) -> bool:
        known, tool = self.index_of_tools.resolve(written)
        if not known:
            self.unknown = written
            return self.goto(self.skip_call)
        name, namespace = (tool.name, tool.namespace) if tool else (written, None)
        self.name = written
        self.emit(ToolCallStart(self.index, self.call_id(self.index, written), name, namespace))
        return self.expect_then([",", '"arguments"', ":"], self.call_args)

    def call_args(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped:
            return self.final and self.malformed("tool call without arguments")
        self.raw += self.take(len(self.buf) - len(stripped))
        if stripped[0] == "{":
            self.depth, self.in_string, self.escaped = 0, False, False
            return self.goto(self.json_args)
        if stripped[0] == '"':
            return self.goto(self.string_args)
        return self.malformed("arguments are not a JSON object")

    def json_args(self) -> bool:
        taken = 0
        for char in self.buf:
            if not self._json_char(char):
                self._args_delta(self.take(taken))
                return self.malformed("invalid character in arguments")
            taken += 1
            if self.depth == 0:
                self._args_delta(self.take(taken))
                return self.goto(self.call_tail)
        self._args_delta(self.take(taken))
        if self.final:
            return self.malformed("unclosed arguments")
        return False

    def _json_char(self, char: str) -> bool:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == '"':
                self.in_string = False
            return True
        if char == '"':
            self.in_string = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
        return char in JSON_OUTSIDE_STRING or char == '"'

    def _args_delta(self, text: str) -> None:
        if text:
            self.raw += text
            self.args += text
            self.emit(ToolCallArgsDelta(self.index, text))

    def string_args(self) -> bool:
        try:
            value, end = json.JSONDecoder().raw_decode(self.buf)
        except ValueError:
            if self.final or CALL_CLOSE in self.buf:
                return self.malformed("unterminated arguments string")
            return False
        self.raw += self.take(end)
        value = value if value.strip() else "{}"  # an empty string: no arguments
        if not json_object(value):
            return self.malformed("arguments are a JSON string that does not hold a JSON object")
        self.issue("arguments written as a JSON string holding the object", self.raw)
        self.args = value  # the decoded text is the arguments; the raw text keeps the model's spelling
        self.emit(ToolCallArgsDelta(self.index, value))
        return self.goto(self.call_tail)

    def call_tail(self) -> bool:
        rest = self.buf.lstrip()
        if not self.final and CALL_CLOSE.startswith(rest):
            return False
        if rest.startswith(CALL_CLOSE) or not rest:  # the arguments are complete: the call is too
            self.issue("tool call closed without the '}' that ends its JSON", self.raw)
            return self.goto(self.call_close)
        return self.expect_then(["}"], self.call_close)

    def call_close(self) -> bool:
        before = self.buf
        got = self.expect(CALL_CLOSE)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        if got is False and not (self.final and not self.buf.strip()):
            return self.malformed("expected '</tool_call>' after the arguments")
        self.buf = "" if got is False else self.buf
        return self.end_call()

    def end_call(self) -> bool:
        if json_object(self.args):
            self.emit(ToolCallEnd(self.index, self.args))
        else:  # a started call that cannot complete ends without ToolCallEnd
            self.issue("tool call arguments are not a JSON object", self.raw)
        self.index += 1
        return self.goto(self.plain_text)

    # ---- malformed blocks are reported, never dropped silently

    def malformed(self, message: str) -> bool:
        self.problem = message
        return self.goto(self.skip_call)

    def skip_call(self) -> bool:
        head, tag = self.scan([CALL_CLOSE])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        if self.unknown is not None:
            self.issue(f"unknown tool {self.unknown!r}", self.raw)
        else:
            self.issue(self.problem, self.raw)
            if self.name is not None:  # started: it ends without ToolCallEnd
                self.index += 1
        return self.goto(self.plain_text)


@hookimpl
def register_dialects(register):
    register("chatml_json", ChatmlJson)
