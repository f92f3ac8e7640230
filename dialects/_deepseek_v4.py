"""DeepSeek V4 message encoding (tool results merged into user turns); see deepseek_format."""

from __future__ import annotations

from typing import Any

from kvgate.core.types import Message, Tool

USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"


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
