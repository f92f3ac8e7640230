"""Anthropic ``cache_control`` breakpoints -> canonical retention hints.

``cache_control: {"type": "ephemeral", "ttl"?: "5m" | "1h"}`` on a tool, a system block or a
message's content block marks the prefix up to and including that block, in the API's order
(tools, then system, then messages). Each mark becomes a :class:`RetentionHint` holding that
partial request converted exactly as the whole one is (the pipeline finds where its rendering
ends in the prompt). As in the API, at most four blocks may carry one and a ``ttl`` other than
``5m`` or ``1h`` is a 400; a ``cache_control`` of another ``type`` (or none) marks nothing.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.adapters.anthropic.blocks import BLOCK_JOINER, expect
from kvgate.adapters.anthropic.messages import convert_messages, system_texts
from kvgate.core.types import Message, RetentionHint, Tool

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
MAX_BREAKPOINTS = 4


def mark_of(block: Any, param: str) -> Optional[str]:
    """The TTL ``block``'s ``cache_control`` asks for, or None when it has none."""
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        return None  # no mark, or a kind this server does not know: ignored, as before marks were read
    ttl = control.get("ttl", "5m")
    expect(isinstance(ttl, str) and ttl in TTL_SECONDS, f"must be '5m' or '1h' (got {ttl!r})",
           f"{param}.cache_control.ttl")
    return ttl


def hint(ttl: str, messages: list[Message], tools: list[Tool]) -> RetentionHint:
    return RetentionHint(ttl=ttl, ttl_seconds=TTL_SECONDS[ttl], messages=messages, tools=tools)


def retention_hints(body: dict[str, Any], tools: list[Tool], billing: str, convert_tools) -> list[RetentionHint]:
    """The hints of a valid body whose converted ``tools`` are given (``convert_tools`` converts a
    partial tool list)."""
    raw_tools, system, messages = body.get("tools"), body.get("system"), body.get("messages")
    hints = [hint(ttl, [], convert_tools(raw_tools[:i + 1]))
             for i, ttl in marks(raw_tools if isinstance(raw_tools, list) else [], "tools")]
    for i, ttl in marks(system if isinstance(system, list) else [], "system"):
        texts = system_texts(system[:i + 1], billing)
        hints.append(hint(ttl, [Message(role="system", content=BLOCK_JOINER.join(texts))] if texts else [], tools))
    for index, message in enumerate(messages):
        content = message.get("content")
        for j, ttl in marks(content if isinstance(content, list) else [], f"messages.{index}.content"):
            partial = [*messages[:index], {**message, "content": content[:j + 1]}]
            hints.append(hint(ttl, convert_messages(partial, system, billing), tools))
    expect(len(hints) <= MAX_BREAKPOINTS, f"at most {MAX_BREAKPOINTS} blocks may have cache_control "
           f"(found {len(hints)})", "cache_control")
    return hints


def marks(blocks: list, param: str) -> list[tuple[int, str]]:
    found = ((i, mark_of(block, f"{param}.{i}")) for i, block in enumerate(blocks))
    return [(i, ttl) for i, ttl in found if ttl is not None]
