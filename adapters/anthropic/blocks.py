"""Anthropic content blocks -> plain text and canonical tool calls (input side).

Only what the model can read becomes text: ``text`` blocks, plain-text documents, tool results and
search results. Images are refused with a clear 400 when the model has no vision; server-tool
blocks (``server_tool_use``, ``web_search_tool_result``, ``tool_reference``, ...) are dropped.
"""

from __future__ import annotations

import json
from typing import Any

from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ToolCall

BLOCK_JOINER = "\n\n"


def expect(condition: bool, message: str, param: str) -> None:
    if not condition:
        raise InvalidRequest(f"{param}: {message}", param=param)


def block_list(content: Any, param: str) -> list[dict[str, Any]]:
    """``content`` (a string or a list of blocks) as a list of block objects."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    expect(isinstance(content, list), "must be a string or a list of content blocks", param)
    for index, block in enumerate(content):
        expect(isinstance(block, dict) and isinstance(block.get("type"), str),
               "each content block must be an object with a string 'type'", f"{param}.{index}")
    return content


def reject_image(param: str) -> None:
    raise InvalidRequest(
        f"{param}: this model cannot read images (it has no vision input); remove the image block.",
        param=param)


def block_text(block: dict[str, Any], param: str) -> str | None:
    """The text a readable block contributes, or None for blocks the model does not see."""
    kind = block["type"]
    if kind == "text":
        expect(isinstance(block.get("text"), str), "text block needs a string 'text'", param)
        return block["text"]
    if kind == "image":
        reject_image(param)
    if kind == "document":
        return document_text(block, param)
    if kind == "search_result":
        inner = [b.get("text") for b in block.get("content") or [] if isinstance(b, dict)]
        return BLOCK_JOINER.join(t for t in inner if isinstance(t, str))
    return None


def document_text(block: dict[str, Any], param: str) -> str:
    source = block.get("source")
    expect(isinstance(source, dict), "document block needs a 'source' object", param)
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return source["data"]
    if source.get("type") == "content":
        return joined_text(block_list(source.get("content"), f"{param}.source.content"),
                           f"{param}.source.content")
    raise InvalidRequest(f"{param}: only plain-text documents are supported by this model "
                         f"(got source type {source.get('type')!r}).", param=param)


def joined_text(blocks: list[dict[str, Any]], param: str) -> str:
    parts = [block_text(block, f"{param}.{i}") for i, block in enumerate(blocks)]
    return BLOCK_JOINER.join(part for part in parts if part)


def tool_call_from_block(block: dict[str, Any], param: str) -> ToolCall:
    """A history ``tool_use`` block as a canonical call; input is serialised as the model wrote it."""
    expect(isinstance(block.get("id"), str), "tool_use block needs a string 'id'", param)
    expect(isinstance(block.get("name"), str) and block["name"], "tool_use block needs a 'name'", param)
    tool_input = block.get("input", {})
    expect(isinstance(tool_input, dict), "tool_use 'input' must be an object", f"{param}.input")
    return ToolCall(id=block["id"], name=block["name"], arguments=json.dumps(tool_input, ensure_ascii=False))


def tool_result_text(block: dict[str, Any], param: str) -> str:
    content = block.get("content")
    if content is None:
        return ""
    return joined_text(block_list(content, f"{param}.content"), f"{param}.content")
