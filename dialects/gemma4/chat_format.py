"""The whole Gemma 4 prompt (chat format ``gemma4``), for a checkpoint without a chat template: byte
for byte what Google's Gemma 4 chat template writes for the same request.

Layout: BOS; ``'<|turn>system\\n'`` + ``'<|think|>\\n'`` (reasoning on) + the leading system or
developer message (stripped) + per tool ``'<|tool>' + DECLARATION + '<tool|>'`` (:mod:`.declarations`)
+ ``'<turn|>\\n'``, when reasoning is on or there is a system message or tools; a user (or later
system) turn ``'<|turn>' + ROLE + '\\n' + text (stripped) + '<turn|>\\n'``; an assistant turn
``'<|turn>model\\n'`` (none when the previous message other than tool results was the assistant's)
+ its thought (``'<|channel>thought\\n' + reasoning + '\\n<channel|>'``, for a turn with calls after
the last user turn) + its calls (:mod:`.dialect`) + the results of the tool messages that follow
it (``'<|tool_response>response:' + NAME + '{value:<|"|>' + TEXT + '<|"|>}<tool_response|>'``, NAME
the call's with that id, else the message's name, else ``unknown``) + its text (thinking removed,
stripped), closed by ``'<|tool_response>'`` when it made calls and no result follows, by nothing
when results follow and it has no text, else by ``'<turn|>\\n'``. The generation prompt is
``'<|turn>model\\n'`` + ``'<|channel>thought\\n<channel|>'`` unless reasoning is on, and nothing
after a turn that ends in calls or results (the model continues its turn).
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.chat_format import ChatFormat
from kvgate.core.types import ChatRequest, Message
from kvgate.dialects._args import openai_tool
from kvgate.dialects.gemma4.declarations import declaration
from kvgate.dialects.gemma4.dialect import Gemma4, qualified
from kvgate.dialects.gemma4.parser import CHANNEL_CLOSE, CHANNEL_OPEN, RESPONSE_CLOSE, RESPONSE_OPEN, THOUGHT
from kvgate.dialects.gemma4.values import QUOTE

TURN, END, THINK = "<|turn>", "<turn|>\n", "<|think|>\n"
EMPTY_THOUGHT = CHANNEL_OPEN + THOUGHT + CHANNEL_CLOSE
CONTINUED = ("tool_call", "tool_response")  # how a turn the model continues ends


class Gemma4ChatFormat(ChatFormat):
    name = "gemma4"

    def __init__(self, dialect: Optional[Gemma4] = None, bos: str = ""):
        self.dialect = dialect if isinstance(dialect, Gemma4) else Gemma4()
        self.bos = bos

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        messages = list(request.messages)
        system = messages.pop(0).content.strip() if messages and messages[0].role in ("system", "developer") else None
        thinking = request.reasoning is True
        text = self.bos
        if thinking or system is not None or request.tools:
            tools = "".join(declaration(openai_tool(tool)) for tool in request.tools)
            text += TURN + "system\n" + (THINK if thinking else "") + (system or "") + tools + END
        body, ending = self.turns(messages)
        if add_generation_prompt and ending not in CONTINUED:
            body += TURN + "model\n" + ("" if thinking else EMPTY_THOUGHT)
        return text + body

    def turns(self, messages: list[Message]) -> tuple[str, Optional[str]]:
        """The turns' text, and how the last one ends (``tool_call``, ``tool_response`` or None)."""
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        out, previous, ending = [], None, None
        for index, message in enumerate(messages):
            if message.role == "tool":
                continue
            role = "model" if message.role == "assistant" else message.role
            if not (role == "model" and previous == "assistant"):
                out.append(TURN + role + "\n")
            previous = message.role
            if role != "model":
                out.append(message.content.strip() + END)
                ending = None
                continue
            results = following_results(messages, index)
            out.append(self.model_turn(message, results, index > last_user))
            ending = "tool_response" if results else ("tool_call" if message.tool_calls else None)
        return "".join(out), ending

    def model_turn(self, message: Message, results: str, after_last_user: bool) -> str:
        thought = message.reasoning if message.reasoning and after_last_user and message.tool_calls else ""
        content = strip_thinking(message.content)
        text = (CHANNEL_OPEN + THOUGHT + thought + "\n" + CHANNEL_CLOSE if thought else "")
        text += self.dialect.render_calls(message.tool_calls) + results + content
        if message.tool_calls and not results:
            return text + RESPONSE_OPEN
        return text if results and not content else text + END


def following_results(messages: list[Message], index: int) -> str:
    """The results of the tool messages right after the assistant message at ``index`` (its calls')."""
    calls = messages[index].tool_calls
    if not calls:
        return ""
    names = {c.id: qualified(c) for c in calls}
    out = []
    for message in messages[index + 1:]:
        if message.role != "tool":
            break
        name = names.get(message.tool_call_id, message.name or "unknown")
        out.append(f"{RESPONSE_OPEN}response:{name}{{value:{QUOTE}{message.content}{QUOTE}}}{RESPONSE_CLOSE}")
    return "".join(out)


def strip_thinking(text: str) -> str:
    """The template's ``strip_thinking``: text outside ``<|channel>...<channel|>``, stripped."""
    parts = text.split(CHANNEL_CLOSE)
    return "".join(part.split(CHANNEL_OPEN)[0] if CHANNEL_OPEN in part else part for part in parts).strip()
