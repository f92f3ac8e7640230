"""Chat Completions ``messages`` -> canonical :class:`Message` list.

* ``system`` and ``developer`` both become ``system``.
* Text parts are joined with ``"\\n"``; ``refusal`` parts of assistant messages count as text.
* ``image_url`` / ``input_audio`` / ``file`` parts are rejected with a 400: canonical messages carry
  text only, and the message says so plainly (and that the model has no vision when it has none).
* Tool-call ids lose their ``call_`` prefix (the prefix this adapter adds when rendering), both in
  ``assistant.tool_calls[].id`` and in ``tool.tool_call_id``, so a replayed id equals the pipeline's.
* ``arguments`` is kept as the exact string the client sent; a ``custom`` tool call's ``input``
  becomes the arguments the model wrote for it (``{"input": ...}``, :mod:`kvgate.adapters.custom_tools`).
* The legacy ``function`` role is a 400 pointing at ``tool``.
"""

from __future__ import annotations

from typing import Any

from kvgate.adapters.openai_chat.fields import element, join, typed
from kvgate.adapters.custom_tools import input_arguments
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import Message, ToolCall

CALL_PREFIX = "call_"
_MEDIA_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file"}


def strip_call_prefix(call_id: str) -> str:
    has_prefix = call_id.startswith(CALL_PREFIX) and len(call_id) > len(CALL_PREFIX)
    return call_id[len(CALL_PREFIX):] if has_prefix else call_id


def convert_messages(raw: Any, has_vision: bool) -> list[Message]:
    if raw is None:
        raise InvalidRequest("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(raw, list):
        raise InvalidRequest("Invalid type for 'messages': expected an array of messages.", param="messages")
    if not raw:
        raise InvalidRequest("'messages' must contain at least one message.", param="messages")
    return [convert_message(item, join("messages", i), has_vision) for i, item in enumerate(raw)]


def convert_message(item: Any, path: str, has_vision: bool) -> Message:
    element(item, dict, path)
    role = typed(item, "role", str, path, required=True)
    name = typed(item, "name", str, path)
    if role in ("system", "developer"):
        return Message(role="system", content=text_content(item, path, has_vision), name=name)
    if role == "user":
        return Message(role="user", content=text_content(item, path, has_vision), name=name)
    if role == "assistant":
        return assistant_message(item, path, has_vision)
    if role == "tool":
        call_id = typed(item, "tool_call_id", str, path, required=True)
        return Message(role="tool", content=text_content(item, path, has_vision),
                       tool_call_id=strip_call_prefix(call_id))
    if role == "function":
        raise InvalidRequest("The legacy 'function' role is not supported; send tool results as "
                             "{'role': 'tool', 'tool_call_id': ..., 'content': ...}.", param=join(path, "role"))
    raise InvalidRequest(f"Invalid value for '{join(path, 'role')}': {role!r}. Supported values are: "
                         "'system', 'developer', 'user', 'assistant', 'tool'.", param=join(path, "role"))


def text_content(item: dict, path: str, has_vision: bool) -> str:
    """``content`` as one string: a string, null, or an array of text parts."""
    content = item.get("content")
    cpath = join(path, "content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(f"Invalid type for '{cpath}': expected a string or an array of content parts.",
                             param=cpath)
    return "\n".join(part_text(part, join(cpath, i), has_vision) for i, part in enumerate(content))


def part_text(part: Any, path: str, has_vision: bool) -> str:
    element(part, dict, path)
    kind = typed(part, "type", str, path, required=True)
    if kind == "text":
        return typed(part, "text", str, path, required=True)
    if kind == "refusal":
        return typed(part, "refusal", str, path, required=True)
    if kind in _MEDIA_PARTS:
        media = _MEDIA_PARTS[kind]
        no_vision = kind == "image_url" and not has_vision
        reason = "this model has no vision" if no_vision else "this server accepts text only"
        raise InvalidRequest(f"'{path}' is {media} input, but {reason}; send text content parts.", param=path)
    raise InvalidRequest(f"Invalid value for '{join(path, 'type')}': {kind!r}. Supported content part types "
                         "are 'text', 'image_url', 'input_audio' and 'file'.", param=join(path, "type"))


def assistant_message(item: dict, path: str, has_vision: bool) -> Message:
    reasoning = typed(item, "reasoning_content", str, path)
    if reasoning is None:
        reasoning = typed(item, "reasoning", str, path)
    calls = typed(item, "tool_calls", list, path, default=[])
    return Message(role="assistant", content=text_content(item, path, has_vision), reasoning=reasoning,
                   tool_calls=[tool_call(c, join(join(path, "tool_calls"), i)) for i, c in enumerate(calls)],
                   name=typed(item, "name", str, path))


def tool_call(raw: Any, path: str) -> ToolCall:
    element(raw, dict, path)
    kind = typed(raw, "type", str, path, default="function")
    if kind not in ("function", "custom"):
        raise InvalidRequest(f"Invalid value for '{join(path, 'type')}': {kind!r}. Supported tool call types "
                             "are 'function' and 'custom'.", param=join(path, "type"))
    call_id = typed(raw, "id", str, path, required=True)
    if kind == "custom":
        custom = typed(raw, "custom", dict, path, required=True)
        cpath = join(path, "custom")
        return ToolCall(id=strip_call_prefix(call_id), name=typed(custom, "name", str, cpath, required=True),
                        arguments=input_arguments(typed(custom, "input", str, cpath, required=True)))
    function = typed(raw, "function", dict, path, required=True)
    fpath = join(path, "function")
    name = typed(function, "name", str, fpath, required=True)
    arguments = typed(function, "arguments", str, fpath, default="")
    return ToolCall(id=strip_call_prefix(call_id), name=name, arguments=arguments)
