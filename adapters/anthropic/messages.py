"""Anthropic ``system`` + ``messages`` -> canonical messages.

- The top-level ``system`` (string or text blocks) and the ``role: "system"`` messages before the
  first user or assistant message are folded into one leading system message. A later system
  message (Claude Code sends mid-conversation reminders that way) stays where it is, so the prompt
  before it, tools included, is the same as the previous turn's; the chat format folds it into the
  leading one only for a template that refuses system messages there.
- A user message's ``tool_result`` blocks become ``tool`` messages (in block order, before the
  user's own text, as the API requires them first); ``is_error`` is carried on the message and
  shown to the model as an ``Error: `` prefix.
- An assistant message's ``thinking`` blocks become ``reasoning``, ``tool_use`` blocks tool calls
  (input serialised with ``json.dumps(input, ensure_ascii=False)``), ``redacted_thinking`` is
  dropped (it is opaque).
- Consecutive messages with the same role are merged.
"""

from __future__ import annotations

from typing import Any

from kvgate.adapters.anthropic.billing import normalize_billing_text
from kvgate.adapters.anthropic.blocks import (
    BLOCK_JOINER, block_list, block_text, expect, tool_call_from_block, tool_result_text)
from kvgate.core.types import Message

ROLES = ("user", "assistant", "system")
ERROR_PREFIX = "Error: "


def system_texts(system: Any, billing: str, param: str = "system") -> list[str]:
    if system is None:
        return []
    texts = [block_text(block, f"{param}.{i}") for i, block in enumerate(block_list(system, param))]
    normalized = (normalize_billing_text(text, billing) for text in texts if text)
    return [text for text in normalized if text]


def convert_messages(raw: Any, system: Any, billing: str) -> list[Message]:
    """The canonical conversation for a request's ``system`` and ``messages``."""
    expect(isinstance(raw, list) and raw, "must be a non-empty list of messages", "messages")
    folded = system_texts(system, billing)
    turns: list[Message] = []
    for index, message in enumerate(raw):
        param = f"messages.{index}"
        expect(isinstance(message, dict), "each message must be an object", param)
        role = message.get("role")
        expect(role in ROLES, f"role must be one of {', '.join(ROLES)}", f"{param}.role")
        expect("content" in message, "message needs 'content'", f"{param}.content")
        if role == "system" and not turns:
            folded.extend(system_texts(message["content"], billing, f"{param}.content"))
        elif role == "system":
            texts = system_texts(message["content"], billing, f"{param}.content")
            if texts:
                turns.append(Message(role="system", content=BLOCK_JOINER.join(texts)))
        elif role == "user":
            turns.extend(user_turns(message["content"], f"{param}.content"))
        else:
            turns.append(assistant_turn(message["content"], f"{param}.content"))
    head = [Message(role="system", content=BLOCK_JOINER.join(folded))] if folded else []
    return head + merge_same_roles(turns)


def user_turns(content: Any, param: str) -> list[Message]:
    results: list[Message] = []
    texts: list[str] = []
    for index, block in enumerate(block_list(content, param)):
        block_param = f"{param}.{index}"
        if block["type"] == "tool_result":
            results.append(tool_result_turn(block, block_param))
            continue
        text = block_text(block, block_param)
        if text:
            texts.append(text)
    if texts or not results:
        results.append(Message(role="user", content=BLOCK_JOINER.join(texts)))
    return results


def tool_result_turn(block: dict[str, Any], param: str) -> Message:
    expect(isinstance(block.get("tool_use_id"), str), "tool_result needs a string 'tool_use_id'", param)
    is_error = block.get("is_error") or False
    expect(isinstance(is_error, bool), "'is_error' must be a boolean", f"{param}.is_error")
    content = tool_result_text(block, param)
    if is_error:  # no dialect renders is_error, so the model learns of the failure from the text
        content = f"{ERROR_PREFIX}{content}"
    return Message(role="tool", content=content, tool_call_id=block["tool_use_id"], is_error=is_error)


def assistant_turn(content: Any, param: str) -> Message:
    turn = Message(role="assistant")
    texts: list[str] = []
    thoughts: list[str] = []
    for index, block in enumerate(block_list(content, param)):
        block_param = f"{param}.{index}"
        kind = block["type"]
        if kind == "tool_use":
            turn.tool_calls.append(tool_call_from_block(block, block_param))
        elif kind == "thinking":
            expect(isinstance(block.get("thinking"), str), "thinking block needs a string 'thinking'",
                   block_param)
            thoughts.append(block["thinking"])
        elif kind != "redacted_thinking":
            text = block_text(block, block_param)
            if text:
                texts.append(text)
    turn.content = BLOCK_JOINER.join(texts)
    turn.reasoning = BLOCK_JOINER.join(thoughts) if thoughts else None
    return turn


def merge_same_roles(turns: list[Message]) -> list[Message]:
    merged: list[Message] = []
    for turn in turns:
        last = merged[-1] if merged else None
        if last is not None and last.role == turn.role and turn.role in ("user", "assistant"):
            last.content = BLOCK_JOINER.join(t for t in (last.content, turn.content) if t)
            if turn.reasoning:
                last.reasoning = BLOCK_JOINER.join(t for t in (last.reasoning, turn.reasoning) if t)
            last.tool_calls.extend(turn.tool_calls)
        else:
            merged.append(turn)
    return merged
