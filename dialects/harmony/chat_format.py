"""The whole gpt-oss prompt (chat format ``harmony``), byte-identical to openai-harmony 0.0.8's
``render_conversation_for_completion`` (checked in tests/dialects/test_harmony.py).

* System message: ``'<|start|>system<|message|>' + IDENTITY + '\\nKnowledge cutoff: 2024-06\\n'``
  + (``'Current date: ' + DATE + '\\n'`` when the format has a date) + ``'\\nReasoning: ' + EFFORT +
  '\\n\\n# Valid channels: analysis, commentary, final. Channel must be included for every
  message.'`` + (with tools ``"\\nCalls to these tools must go to the commentary channel:
  'functions'."``) + ``'<|end|>'``. EFFORT is ``low`` when the request turns reasoning off, else
  ``medium``; no date by default (a date that changes would change every prompt's prefix).
* Developer message (a leading system message and / or tools):
  ``'<|start|>developer<|message|>'`` + ``'# Instructions\\n\\n' + TEXT`` and the tools section
  (:mod:`kvgate.dialects.harmony.typescript`) joined by ``'\\n\\n'`` + ``'<|end|>'``. A later system
  message is a developer message of instructions where it stands.
* ``'<|start|>user<|message|>' + TEXT + '<|end|>'``; an assistant turn is ``'<|start|>assistant'``
  + the dialect's ``assistant_body``; a tool result is ``'<|start|>functions.' + NAME +
  ' to=assistant<|channel|>commentary<|message|>' + TEXT + '<|end|>'`` (NAME: the call it answers).
* Reasoning is dropped the way openai-harmony drops analysis messages: when the last assistant
  turn is an answer (no calls), from every turn up to and including the first answer turn.
* Generation prompt: ``'<|start|>assistant'``; the completion starts at a message header.
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.chat_format import ChatFormat
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects.harmony.dialect import Harmony, qualified
from kvgate.dialects.harmony.parser import ASSISTANT, CHANNEL, END, MESSAGE, START
from kvgate.dialects.harmony.typescript import tools_section

IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
CHANNELS = "# Valid channels: analysis, commentary, final. Channel must be included for every message."
TOOLS_CHANNEL = "\nCalls to these tools must go to the commentary channel: 'functions'."


class HarmonyChatFormat(ChatFormat):
    name = "harmony"

    def __init__(self, dialect: Optional[Harmony] = None, current_date: str = "",
                 identity: str = IDENTITY, knowledge_cutoff: str = "2024-06"):
        self.dialect = dialect if isinstance(dialect, Harmony) else Harmony()
        self.current_date, self.identity, self.knowledge_cutoff = current_date, identity, knowledge_cutoff

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        messages = list(request.messages)
        instructions = messages.pop(0).content if messages and messages[0].role == "system" else ""
        text = self.system(request)
        if instructions or request.tools:
            text += developer(instructions, request.tools)
        text += "".join(self.turns(messages))
        return text + (ASSISTANT if add_generation_prompt else "")

    def system(self, request: ChatRequest) -> str:
        date = f"Current date: {self.current_date}\n" if self.current_date else ""
        effort = "low" if request.reasoning is False else "medium"
        return (f"{START}system{MESSAGE}{self.identity}\nKnowledge cutoff: {self.knowledge_cutoff}\n{date}"
                f"\nReasoning: {effort}\n\n{CHANNELS}{TOOLS_CHANNEL if request.tools else ''}{END}")

    def turns(self, messages: list[Message]) -> list[str]:
        kept_from = reasoning_kept_from(messages)
        out, names, last = [], {}, ""  # call id -> tool name; the last call's name
        for index, message in enumerate(messages):
            if message.role == "assistant":
                names.update({c.id: qualified(c) for c in message.tool_calls})
                last = qualified(message.tool_calls[-1]) if message.tool_calls else last
                out.append(ASSISTANT + self.dialect.assistant_body(message, index >= kept_from))
            elif message.role == "tool":
                out.append(tool_result(message, names.get(message.tool_call_id) or message.name or last))
            elif message.role == "user":
                out.append(f"{START}user{MESSAGE}{message.content}{END}")
            else:
                out.append(developer(message.content, []))
        return out


def reasoning_kept_from(messages: list[Message]) -> int:
    """The first turn whose reasoning is rendered (openai-harmony's ``auto_drop_analysis``)."""
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if not assistants or messages[assistants[-1]].tool_calls:
        return 0
    return next(i for i in assistants if not messages[i].tool_calls) + 1


def developer(instructions: str, tools: list[Tool]) -> str:
    parts = ([f"# Instructions\n\n{instructions}"] if instructions else []) + ([tools_section(tools)] if tools else [])
    return f"{START}developer{MESSAGE}" + "\n\n".join(parts) + END


def tool_result(message: Message, name: str) -> str:
    if not name:
        raise InvalidRequest("A tool result must answer a tool call of an earlier assistant message.",
                             param="messages")
    return f"{START}functions.{name} to=assistant{CHANNEL}commentary{MESSAGE}{message.content}{END}"
