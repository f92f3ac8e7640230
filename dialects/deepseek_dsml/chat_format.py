"""Whole-prompt encoders for DeepSeek V3.2 and V4 (DeepSeek ships no Jinja template).

Shared: ``'<｜begin▁of▁sentence｜>'`` + messages. The system turn is its text raw, plus
``'\\n\\n' + TOOLS`` when tools are given (a system turn is created at the start when there is
none). ``request.reasoning`` True selects thinking mode, anything else chat mode.

v32 (``encoding_dsv32``): user = ``'<｜User｜>' + text + '<｜Assistant｜>'`` + ``'<think>'`` (thinking
mode and the last user turn) or ``'</think>'``; assistant = dialect body + EOS; the k-th tool
result after an assistant turn with n calls: k=1 adds ``'\\n\\n<function_results>'``, each adds
``'\\n<result>' + text + '</result>'``, k=n adds ``'\\n</function_results>'`` + ``'\\n\\n<think>'``
(thinking, after the last user turn) or ``'\\n\\n</think>'``. Reasoning is rendered only for turns
after the last user turn (``drop_thinking``).

v4 (``encoding_dsv4``): tool results join the following user text in one user turn
(``'<｜User｜>'`` + blocks joined by ``'\\n\\n'``, a result being ``'<tool_result>' + text +
'</tool_result>'``, results ordered by the calls' ids); after a user turn that is last or followed
by an assistant turn comes ``'<｜Assistant｜>'`` + ``'<think>'``/``'</think>'``; with tools present
reasoning is kept on every assistant turn in thinking mode (drop_thinking is off).
"""

from __future__ import annotations

from typing import Any, Protocol

from kvgate.core.chat_format import ChatFormat
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects._args import dumps, openai_tool

BOS, USER, ASSISTANT = "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
D = "｜DSML｜"
TOOLS_V32 = (
    "## Tools\nYou have access to a set of tools you can use to answer the user's question.\n"
    f'You can invoke functions by writing a "<{D}function_calls>" block like the following as part of '
    f'your reply to the user:\n<{D}function_calls>\n<{D}invoke name="$FUNCTION_NAME">\n'
    f'<{D}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{D}parameter>\n...\n'
    f'</{D}invoke>\n<{D}invoke name="$FUNCTION_NAME2">\n...\n</{D}invoke>\n</{D}function_calls>\n'
    "String and scalar parameters should be specified as is without any escaping or quotes, while "
    'lists and objects should use JSON format. The "string" attribute should be set to "true" for '
    'string type parameters and "false" for other types (numbers, booleans, arrays, objects).\n'
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    f"outputting a thinking block. Here is an example:\n<{D}function_calls>\n...\n</{D}function_calls>\n"
    "<function_results>\n...\n</function_results>\n<think>...thinking about results</think>\n"
    "Here are the functions available in JSONSchema format:\n<functions>\n{schemas}\n</functions>\n"
)
TOOLS_V4 = (
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke "
    f'tools by writing a "<{D}tool_calls>" block like the following:\n\n<{D}tool_calls>\n'
    f'<{D}invoke name="$TOOL_NAME">\n<{D}parameter name="$PARAMETER_NAME" string="true|false">'
    f'$PARAMETER_VALUE</{D}parameter>\n...\n</{D}invoke>\n<{D}invoke name="$TOOL_NAME2">\n...\n'
    f'</{D}invoke>\n</{D}tool_calls>\n\nString parameters should be specified as is and set '
    '`string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON '
    'format and set `string="false"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST '
    "output your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
    "response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n{schemas}\n\nYou MUST strictly follow the above defined tool name "
    "and parameter schemas to invoke tool calls.\n"
)


class DsmlBodies(Protocol):
    """What the chat format takes from the DSML dialect: its variant and its assistant turns."""

    variant: str

    def assistant_body(self, message: Message, with_reasoning: bool) -> str:
        """What the model generated for this turn, end-of-sentence token included."""


class DeepseekChatFormat(ChatFormat):
    def __init__(self, dialect: DsmlBodies):
        self.dialect = dialect
        self.name = "deepseek_" + dialect.variant

    def tools_block(self, tools: list[Tool]) -> str:
        template = TOOLS_V32 if self.dialect.variant == "v32" else TOOLS_V4
        return template.replace("{schemas}", "\n".join(dumps(openai_tool(t)) for t in tools))

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        """The prompt; the generation prompt is part of the last user / tool turn in both encoders."""
        texts = self.message_texts(request.messages, request.tools, request.reasoning is True)
        return BOS + "".join(t["content"] for t in texts)

    def parser_start(self, request: ChatRequest) -> str:
        prompt = self.render(request)
        return "reasoning" if prompt.endswith("<think>") else "content"

    def message_texts(self, messages: list[Message], tools: list[Tool],
                      thinking: bool) -> list[dict[str, Any]]:
        messages = with_system(messages, tools)
        if self.dialect.variant == "v4":
            return v4_texts(self, messages, tools, thinking)
        return self._v32_texts(messages, tools, thinking)

    def system_text(self, message: Message, tools: list[Tool]) -> str:
        return message.content + ("\n\n" + self.tools_block(tools) if tools else "")

    def _v32_texts(self, messages: list[Message], tools: list[Tool], thinking: bool):
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        out, calls, order = [], 0, 0
        for index, message in enumerate(messages):
            if message.role == "system":
                text = self.system_text(message, tools if index == 0 else [])
            elif message.role == "user":
                think = "<think>" if thinking and index == last_user else "</think>"
                text = USER + message.content + ASSISTANT + think
            elif message.role == "assistant":
                calls, order = len(message.tool_calls), 0
                text = self.dialect.assistant_body(message, thinking and index > last_user)
            else:
                order += 1
                if order > calls:
                    raise InvalidRequest(f"messages[{index}]: more tool results than tool calls",
                                         param="messages")
                text = ("\n\n<function_results>" if order == 1 else "") + "\n<result>" + message.content + "</result>"
                if order == calls:
                    think = "<think>" if thinking and index >= last_user else "</think>"
                    text += "\n</function_results>\n\n" + think
            out.append({"role": message.role, "content": text})
        return out


def with_system(messages: list[Message], tools: list[Tool]) -> list[Message]:
    if tools and (not messages or messages[0].role != "system"):
        return [Message(role="system", content="")] + list(messages)
    return list(messages)


# ---- V4: tool results merged into user turns

def merged_turns(messages: list[Message]) -> list[tuple[Message, list[str]]]:
    """(message, user blocks): tool results and user text that follow each other share a turn."""
    turns: list[tuple[Message, list[str]]] = []
    order: dict[str, int] = {}
    for message in messages:
        if message.role == "assistant":
            order = {c.id: i for i, c in enumerate(message.tool_calls) if c.id}
        if message.role not in ("user", "tool"):
            turns.append((message, []))
            continue
        block = message.content if message.role == "user" else (
            "<tool_result>" + message.content + "</tool_result>")
        key = order.get(message.tool_call_id or "", 0) if message.role == "tool" else None
        if turns and turns[-1][0].role == "user":
            turns[-1][1].append((key, block))
        else:
            turns.append((Message(role="user"), [(key, block)]))
    return [(m, _sorted_results(blocks)) if m.role == "user" else (m, []) for m, blocks in turns]


def _sorted_results(blocks: list[tuple[Any, str]]) -> list[str]:
    results = sorted((b for b in blocks if b[0] is not None), key=lambda b: b[0])
    it = iter(results)
    return [next(it)[1] if key is not None else text for key, text in blocks]


def v4_texts(fmt, messages: list[Message], tools: list[Tool], thinking: bool) -> list[dict[str, Any]]:
    turns = merged_turns(messages)
    drop = not tools
    last_user = max((i for i, (m, _) in enumerate(turns) if m.role == "user"), default=-1)
    out = []
    for index, (message, blocks) in enumerate(turns):
        if message.role == "system":
            text = fmt.system_text(message, tools if index == 0 else [])
        elif message.role == "user":
            text = USER + "\n\n".join(blocks)
        else:
            keep = thinking and (not drop or index > last_user)
            text = fmt.dialect.assistant_body(message, keep)
        following = turns[index + 1][0].role if index + 1 < len(turns) else None
        if message.role == "user" and following in (None, "assistant"):
            opens = thinking and (not drop or index >= last_user)
            text += ASSISTANT + ("<think>" if opens else "</think>")
        out.append({"role": message.role, "content": text})
    return out
