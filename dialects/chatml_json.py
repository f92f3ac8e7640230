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
end of output, arguments given as a JSON string (its decoded text becomes the arguments).
Malformed JSON, an unknown tool name or an unclosed call give a ParseIssue with the raw text.
Namespaced tools are written ``namespace__name``; ToolCallStart carries the inner name and the
namespace. ``call_id(index, written_name)`` names the calls.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.core.dialect import CallIdFactory, Dialect
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import dumps, openai_tool
from kvgate.dialects._chatml_parser import ChatmlParser

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


@attrs.frozen
class ArgsRegion:
    """Text forced before and after the JSON arguments of one call (what a grammar constrains)."""

    prefix: str
    suffix: str


class ChatmlJson(Dialect):
    name = "chatml_json"

    def __init__(self, variant: str = "qwen3"):
        if variant not in VARIANTS:
            raise ValueError(f"chatml_json variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant

    # ---- literals and grammar boundaries

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": "<tool_call>", "call_open": "<tool_call>", "call_close": "</tool_call>",
            "call_prefix": CALL_PREFIX, "args_prefix": ARGS_PREFIX, "call_suffix": CALL_SUFFIX,
            "call_separator": "\n", "think_open": "<think>", "think_close": "</think>",
            "response_open": "<tool_response>", "response_close": "</tool_response>",
        }

    def args_region(self, name: str) -> ArgsRegion:
        return ArgsRegion(prefix=CALL_PREFIX + name + ARGS_PREFIX, suffix=CALL_SUFFIX)

    def render_tool_call(self, name: str, arguments: str) -> str:
        region = self.args_region(name)
        return region.prefix + (arguments if arguments.strip() else "{}") + region.suffix

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


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


@hookimpl
def register_dialects(register):
    register("chatml_json", ChatmlJson)
