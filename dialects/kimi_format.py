"""Whole-prompt chat format for Kimi K2 (``kimi_k2``), as the Kimi-K2 chat templates render it.

Prompt = TOOLS (with tools: ``'<|im_system|>tool_declare<|im_middle|>' + json(tools) + '<|im_end|>'``,
the OpenAI tool list as compact JSON, ``separators=(',', ':')``, non-ASCII kept) + the default
system turn when the first message is not a system message (``'<|im_system|>system<|im_middle|>You
are Kimi, an AI assistant created by Moonshot AI.<|im_end|>'``) + per message
``MARKER + ROLE + '<|im_middle|>' + TEXT + '<|im_end|>'`` + the generation prompt
``'<|im_assistant|>assistant<|im_middle|>'``. MARKER is ``<|im_user|>`` (user), ``<|im_assistant|>``
(assistant) or ``<|im_system|>`` (system, tool); TEXT of an assistant turn is the dialect's body, of
a tool result ``'## Return of ' + ID + '\\n' + result`` (ID as the call was rendered).

Not verified against a copy of the official template (none could be read here): the layout is
the Kimi-K2-Instruct / K2-Thinking template as recalled.
"""

from __future__ import annotations

import json

from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects._args import openai_tool
from kvgate.dialects.kimi_k2 import KimiK2

DEFAULT_SYSTEM = "You are Kimi, an AI assistant created by Moonshot AI."
MARKERS = {"user": "<|im_user|>", "assistant": "<|im_assistant|>", "system": "<|im_system|>",
           "tool": "<|im_system|>"}
GENERATION = "<|im_assistant|>assistant<|im_middle|>"


def tool_declare(tools: list[Tool]) -> str:
    listed = [{"type": "function", "function": openai_tool(t)} for t in tools]
    return json.dumps(listed, ensure_ascii=False, separators=(",", ":"))


def turns(dialect: KimiK2, messages: list[Message], tools: list[Tool]) -> list[tuple[str, str, str]]:
    """(role, role name, text) of every turn, the tool declaration and default system included."""
    out = [("system", "tool_declare", tool_declare(tools))] if tools else []
    if not messages or messages[0].role != "system":
        out.append(("system", "system", DEFAULT_SYSTEM))
    last_plain = max((i for i, m in enumerate(messages) if m.role == "assistant" and not m.tool_calls), default=-1)
    ids: dict[str, str] = {}
    count = 0
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for offset, call in enumerate(message.tool_calls):
                ids[call.id] = dialect.call_id_text(call, count + offset)
            text = dialect.assistant_body(message, count, keep_reasoning=index > last_plain)
            count += len(message.tool_calls)
        elif message.role == "tool":
            written = ids.get(message.tool_call_id or "", message.tool_call_id or "")
            text = "## Return of " + written + "\n" + message.content
        else:
            text = message.content
        out.append((message.role, message.role, text))
    return out


class KimiChatFormat:
    def __init__(self, dialect: KimiK2):
        self.dialect = dialect
        self.name = "kimi_k2"

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        text = "".join(MARKERS[role] + name + "<|im_middle|>" + body + "<|im_end|>"
                       for role, name, body in turns(self.dialect, request.messages, request.tools))
        return text + (GENERATION if add_generation_prompt else "")

    def parser_start(self, request: ChatRequest) -> str:
        return "content"


def format_factory(runtime=None, dialect=None) -> KimiChatFormat:
    return KimiChatFormat(dialect if isinstance(dialect, KimiK2) else KimiK2())
