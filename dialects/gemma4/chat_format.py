"""The whole Gemma 4 prompt (chat format ``gemma4``), for a checkpoint without a chat template.

Layout, as Gemma 4's template writes it: ``'<|turn>system\\n'`` + the system text (stripped) + per
tool ``'<|tool>' + DECLARATION + '<tool|>'`` + ``'<turn|>\\n'`` when there is a system message or tools;
a user turn ``'<|turn>user\\n' + text (stripped) + '<turn|>\\n'``; an assistant turn ``'<|turn>model\\n'``
(none when it continues a model turn cut by tool results) + its thought (``'<|channel>thought\\n' +
reasoning + '\\n<channel|>'``, for a turn with calls after the last user turn) + its calls + the tool
results that follow it (:mod:`.dialect`) + its text (stripped), closed by ``'<|tool_response>'`` when
it made calls and no result follows, by nothing when results follow and it has no text, else by
``'<turn|>\\n'``. The generation prompt is ``'<|turn>model\\n'``, or nothing after tool results (the
model continues its turn). DECLARATION is kvgate's: ``'declaration:' + NAME + '{description:<|"|>' +
DESCRIPTION + '<|"|>,parameters:' + the JSON schema in Gemma value syntax + '}'`` (a checkpoint that
ships its template declares tools through it).
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.chat_format import ChatFormat
from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects.gemma4.dialect import Gemma4, qualified
from kvgate.dialects.gemma4.parser import CHANNEL_CLOSE, CHANNEL_OPEN, RESPONSE_CLOSE, RESPONSE_OPEN, THOUGHT
from kvgate.dialects.gemma4.values import QUOTE, render_value

TURN, END = "<|turn>", "<turn|>\n"


class Gemma4ChatFormat(ChatFormat):
    name = "gemma4"

    def __init__(self, dialect: Optional[Gemma4] = None, bos: str = ""):
        self.dialect = dialect if isinstance(dialect, Gemma4) else Gemma4()
        self.bos = bos

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        messages = list(request.messages)
        system = messages.pop(0).content.strip() if messages and messages[0].role in ("system", "developer") else None
        text = self.bos
        if system is not None or request.tools:
            text += TURN + "system\n" + (system or "") + "".join(map(declaration, request.tools)) + END
        body, handed_over = self.turns(messages)
        return text + body + (TURN + "model\n" if add_generation_prompt and not handed_over else "")

    def turns(self, messages: list[Message]) -> tuple[str, bool]:
        """The turns' text, and whether it ends inside a model turn that made calls."""
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        out, previous, handed_over = [], None, False
        for index, message in enumerate(messages):
            if message.role == "tool":
                continue
            handed_over = False
            role = "model" if message.role == "assistant" else message.role
            if not (role == "model" and previous == "assistant"):
                out.append(TURN + role + "\n")
            previous = message.role
            if role != "model":
                out.append(message.content.strip() + END)
                continue
            if message.reasoning and index > last_user and message.tool_calls:
                out.append(CHANNEL_OPEN + THOUGHT + message.reasoning + "\n" + CHANNEL_CLOSE)
            out.append(self.dialect.render_calls(message.tool_calls))
            results = following_results(messages, index)
            out.append(results + message.content.strip())
            if message.tool_calls and not results:
                out.append(RESPONSE_OPEN)
                handed_over = True
            elif results and not message.content:
                handed_over = True
            else:
                out.append(END)
        return "".join(out), handed_over


def following_results(messages: list[Message], index: int) -> str:
    names = {c.id: qualified(c) for c in messages[index].tool_calls}
    out = []
    for message in messages[index + 1:]:
        if message.role != "tool":
            break
        name = names.get(message.tool_call_id or "", message.name or "unknown")
        out.append(f"{RESPONSE_OPEN}response:{name}{{value:{QUOTE}{message.content}{QUOTE}}}{RESPONSE_CLOSE}")
    return "".join(out)


def declaration(tool: Tool) -> str:
    head = f"<|tool>declaration:{tool.qualified_name}{{description:{QUOTE}{tool.description or ''}{QUOTE}"
    return head + f",parameters:{render_value(tool.parameters or {})}}}<tool|>"
