"""Responses ``input`` (a string or an array of items) -> canonical messages.

Item rules: ``message`` items (``type`` may be omitted) map by role, developer -> system;
``reasoning``, assistant ``message`` and ``function_call`` items that follow each other form one
assistant turn; ``function_call_output`` becomes a tool message, and one whose ``call_id`` answers
no call earlier in the conversation is a 400; ``additional_tools`` items add
tools; a ``compaction`` item (ours: :mod:`.compaction_item`) becomes a user message holding its
summary; unknown item types are skipped. Images are rejected: canonical content is text; an
``input_file`` part becomes its text (:mod:`.input_files`: text files and PDFs).
"""

from __future__ import annotations

import base64
import copy
from typing import Any, Optional

import attrs

from kvgate.adapters.custom_tools import input_arguments
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import Message, Tool, ToolCall
from kvgate.adapters.responses.compaction_item import summary_message_text
from kvgate.adapters.responses.input_files import file_part_text
from kvgate.adapters.responses.tools import convert_tools

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal",
              "summary_text": "text", "reasoning_text": "text"}
REASONING_PREFIX = "kvgate-reasoning:"


@attrs.define
class ConvertedInput:
    messages: list[Message]
    tools: list[Tool]


def encode_reasoning(text: str) -> str:
    """The opaque ``encrypted_content`` this server hands out: its own thinking, base64-encoded."""
    return REASONING_PREFIX + base64.b64encode(text.encode()).decode()


def decode_reasoning(opaque: Any) -> Optional[str]:
    if not isinstance(opaque, str) or not opaque.startswith(REASONING_PREFIX):
        return None
    try:
        return base64.b64decode(opaque[len(REASONING_PREFIX):], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def content_text(content: Any, where: str, has_vision: bool) -> str:
    """Text of a string or a list of parts; image parts, and file parts without text, get a clear 400."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or an array of parts.", param=where)
    texts, after_file = [], False
    for index, part in enumerate(content):
        spot = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind in TEXT_PARTS:  # a list or object as the type is unhashable
            value = part.get(TEXT_PARTS[kind])
            if not isinstance(value, str):
                raise InvalidRequest(f"{spot}.{TEXT_PARTS[kind]} must be a string.", param=spot)
            texts.append(("\n\n" if after_file else "") + value)
            after_file = False
        elif kind in ("input_image", "image_url", "image"):
            reason = "this model has no vision" if not has_vision else "image input is not supported yet"
            raise InvalidRequest(f"{spot} is an image, but {reason}; send text only.", param=spot)
        elif kind == "input_file":  # set apart from the text around it by a blank line
            texts.append(("\n\n" if texts else "") + file_part_text(part, spot))
            after_file = True
        else:
            raise InvalidRequest(f"{spot} has an unsupported part type {kind!r}.", param=spot)
    return "".join(texts)


def _reasoning_text(item: dict, where: str) -> str:
    if item.get("content"):
        return content_text(item["content"], f"{where}.content", False)
    decoded = decode_reasoning(item.get("encrypted_content"))
    if decoded is not None:
        return decoded
    return "\n".join(s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict))


def _open_assistant(messages: list[Message], fits) -> Message:
    """The assistant turn an item joins: the last message if ``fits`` it, else a new one."""
    if messages and messages[-1].role == "assistant" and fits(messages[-1]):
        return messages[-1]
    messages.append(Message(role="assistant"))
    return messages[-1]


def _tool_call(item: dict, where: str, arguments: Any) -> ToolCall:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{where}.call_id must be a non-empty string.", param=f"{where}.call_id")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    if not isinstance(arguments, str):
        raise InvalidRequest(f"{where}.arguments must be a JSON string.", param=f"{where}.arguments")
    namespace = item.get("namespace")
    return ToolCall(id=call_id, name=name, arguments=arguments,
                    namespace=namespace if isinstance(namespace, str) and namespace else None)


def _tool_output(item: dict, where: str, messages: list[Message], has_vision: bool) -> Message:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{where}.call_id must be a non-empty string.", param=f"{where}.call_id")
    content = content_text(item.get("output"), f"{where}.output", has_vision)
    name = next((c.name for m in reversed(messages) for c in m.tool_calls if c.id == call_id), None)
    if name is None:  # an agent loop that lost its call would otherwise go on silently
        raise InvalidRequest(f"No tool call found for function call output with call_id '{call_id}'.",
                             param=f"{where}.call_id")
    return Message(role="tool", content=content, tool_call_id=call_id, name=name)


def _add_item(item: dict, where: str, out: ConvertedInput, has_vision: bool) -> None:
    kind = item.get("type", "message")
    messages = out.messages
    if kind == "message":
        role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
        if role is None:
            raise InvalidRequest(f"{where}.role must be user, assistant, system or developer.", param=f"{where}.role")
        text = content_text(item.get("content"), f"{where}.content", has_vision)
        if role == "assistant":
            _open_assistant(messages, lambda m: not m.content and not m.tool_calls).content = text
        else:
            messages.append(Message(role=role, content=text))
    elif kind == "reasoning":
        turn = _open_assistant(messages, lambda m: m.reasoning is None and not m.content and not m.tool_calls)
        turn.reasoning = _reasoning_text(item, where)
    elif kind == "function_call":
        _open_assistant(messages, lambda m: True).tool_calls.append(_tool_call(item, where, item.get("arguments")))
    elif kind == "custom_tool_call":
        if not isinstance(item.get("input"), str):
            raise InvalidRequest(f"{where}.input must be a string.", param=f"{where}.input")
        arguments = input_arguments(item["input"])  # what the model wrote for it
        _open_assistant(messages, lambda m: True).tool_calls.append(_tool_call(item, where, arguments))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        messages.append(_tool_output(item, where, messages, has_vision))
    elif kind == "compaction":
        messages.append(Message(role="user", content=summary_message_text(item, where)))
    elif kind == "additional_tools":
        out.tools.extend(convert_tools(item.get("tools"), f"{where}.tools"))
    elif kind == "item_reference":
        raise InvalidRequest(f"{where} is an item_reference; this server does not resolve them, send the item.",
                             param=where)


def convert_input(value: Any, has_vision: bool, prior: Optional[list[Message]] = None,
                  prior_tools: Optional[list[Tool]] = None) -> ConvertedInput:
    """The ``prior`` conversation (copied, never changed) followed by ``input``, plus the tools
    its ``additional_tools`` items announced (``prior_tools``: those of the prior conversation).

    New items continue the prior conversation: a ``function_call`` right after a prior assistant
    turn joins it, and tool outputs find their tool names in it.
    """
    out = ConvertedInput(messages=copy.deepcopy(prior or []), tools=list(prior_tools or []))
    if isinstance(value, str):
        out.messages.append(Message(role="user", content=value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise InvalidRequest(f"input[{index}] must be an object.", param=f"input[{index}]")
            _add_item(item, f"input[{index}]", out, has_vision)
    elif value is not None:
        raise InvalidRequest("input must be a string or an array of items.", param="input")
    return out
