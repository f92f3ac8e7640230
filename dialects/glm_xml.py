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
values are never stripped. Duplicate keys, unknown tools and unclosed calls give ParseIssues.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import CallIdFactory, Dialect
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import dumps, history_members, openai_tool, wire_value
from kvgate.dialects._glm_parser import GlmParser

VARIANTS = {"glm45": "\n", "glm46": "\n", "glm47": ""}
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
        """Per-turn text of :class:`GlmChatFormat` as role/content dicts (role markers excluded)."""
        return [{"role": role, "content": text}
                for role, text in self.turns(messages, tools, thinking)]

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


ROLE_MARKERS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>", "tool": ""}


class GlmChatFormat:
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


def _format_factory(variant: str):
    def build(runtime=None, dialect=None) -> GlmChatFormat:
        chosen = dialect if isinstance(dialect, GlmXml) and dialect.variant == variant else GlmXml(variant)
        return GlmChatFormat(chosen)
    return build


@hookimpl
def register_dialects(register):
    register("glm_xml", GlmXml)


@hookimpl
def register_chat_formats(register):
    register("glm45", _format_factory("glm45"))
    register("glm47", _format_factory("glm47"))
