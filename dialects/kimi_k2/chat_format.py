"""Whole-prompt chat format for Kimi K2 (``kimi_k2``), as the Kimi-K2 chat templates render it.

Prompt = TOOLS (with tools: ``'<|im_system|>tool_declare<|im_middle|>' + json(tools) + '<|im_end|>'``,
the OpenAI tool list as compact JSON, ``separators=(',', ':')``, non-ASCII kept) + the default
system turn when the first message is not a system message (``'<|im_system|>system<|im_middle|>You
are Kimi, an AI assistant created by Moonshot AI.<|im_end|>'``) + per message
``MARKER + ROLE + '<|im_middle|>' + TEXT + '<|im_end|>'`` + the generation prompt
``'<|im_assistant|>assistant<|im_middle|>'``. MARKER is ``<|im_user|>`` (user), ``<|im_assistant|>``
(assistant) or ``<|im_system|>`` (system, tool); TEXT of an assistant turn is the dialect's body, of
a tool result ``'## Return of ' + ID + '\\n' + result`` (ID as the call was rendered).

The layout of Kimi's published template in its compact-JSON version (see the dialect's docstring);
a checkpoint that ships a template is rendered by that template instead (the default).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from kvgate.core.chat_format import ChatFormat
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall
from kvgate.dialects._args import openai_tool

DEFAULT_SYSTEM = "You are Kimi, an AI assistant created by Moonshot AI."
MARKERS = {"user": "<|im_user|>", "assistant": "<|im_assistant|>", "system": "<|im_system|>",
           "tool": "<|im_system|>"}
GENERATION = "<|im_assistant|>assistant<|im_middle|>"


class KimiBodies(Protocol):
    """What the chat format takes from the Kimi K2 dialect: call ids and assistant turns."""

    def call_id_text(self, call: ToolCall, index: int) -> str:
        """The ID written for ``call``, the ``index``-th call of the conversation."""

    def assistant_body(self, message: Message, first_index: int = 0, keep_reasoning: bool = True) -> str:
        """What the model generated for this turn (end-of-turn token aside)."""


def tool_list(tools: list[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": openai_tool(t)} for t in tools]


def tool_declare(tools: list[Tool]) -> str:
    return json.dumps(tool_list(tools), ensure_ascii=False, separators=(",", ":"))


def bodies(dialect: KimiBodies, messages: list[Message]) -> list[tuple[Message, str, str]]:
    """(message, its text, the ID its tool result answers) for every message: an assistant turn's
    text is the dialect's body (calls included), a tool result's is its content."""
    last_plain = max((i for i, m in enumerate(messages) if m.role == "assistant" and not m.tool_calls), default=-1)
    ids: dict[str, str] = {}
    count = 0
    out = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for offset, call in enumerate(message.tool_calls):
                ids[call.id] = dialect.call_id_text(call, count + offset)
            out.append((message, dialect.assistant_body(message, count, keep_reasoning=index > last_plain), ""))
            count += len(message.tool_calls)
        elif message.role == "tool":
            out.append((message, message.content, ids.get(message.tool_call_id or "", message.tool_call_id or "")))
        else:
            out.append((message, message.content, ""))
    return out


def turns(dialect: KimiBodies, messages: list[Message], tools: list[Tool]) -> list[tuple[str, str, str]]:
    """(role, role name, text) of every turn, the tool declaration and default system included."""
    out = [("system", "tool_declare", tool_declare(tools))] if tools else []
    if not messages or messages[0].role != "system":
        out.append(("system", "system", DEFAULT_SYSTEM))
    for message, text, answered in bodies(dialect, messages):
        if message.role == "tool":
            text = "## Return of " + answered + "\n" + text
        out.append((message.role, message.role, text))
    return out


def template_messages(dialect: KimiBodies, messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as Kimi's own chat template reads them: it declares the tools (from its
    ``tools`` variable), adds the default system turn and writes ``## Return of`` + ``tool_call_id``
    itself; an assistant turn's calls are already in its content, as the template would write them."""
    out: list[dict[str, Any]] = []
    for message, text, answered in bodies(dialect, messages):
        turn: dict[str, Any] = {"role": message.role, "content": text}
        if message.role == "tool":
            turn["tool_call_id"] = answered
        out.append(turn)
    return out


class KimiChatFormat(ChatFormat):
    def __init__(self, dialect: KimiBodies):
        self.dialect = dialect
        self.name = "kimi_k2"

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        text = "".join(MARKERS[role] + name + "<|im_middle|>" + body + "<|im_end|>"
                       for role, name, body in turns(self.dialect, request.messages, request.tools))
        return text + (GENERATION if add_generation_prompt else "")

    def parser_start(self, request: ChatRequest) -> str:
        return "content"
