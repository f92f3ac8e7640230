"""Request hints: HTTP headers that steer one request without changing its body.

``x-kvgate-tool-choice: required`` (any tool) or ``x-kvgate-tool-choice: <tool name>`` forces the
fence to make a tool call where the client cannot set ``tool_choice`` itself (an agent CLI, through
its custom-headers setting). It applies only to a request that answers a user message: once the
conversation holds a tool result after the last plain assistant answer, the model is left free, so
an agent that resends the header on every request still ends its turn. A request without that tool
(or without tools) is served unchanged.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kvgate.core.types import ChatRequest, ToolChoice

TOOL_CHOICE_HEADER = "x-kvgate-tool-choice"
log = logging.getLogger("kvgate.requests")


def answers_a_user(request: ChatRequest) -> bool:
    """Whether no tool result follows the last assistant message that made no tool call."""
    for message in reversed(request.messages):
        if message.role == "tool":
            return False
        if message.role == "assistant" and not message.tool_calls:
            return True
    return True


def forced_choice(request: ChatRequest, wanted: str) -> Any:
    """The ToolChoice ``wanted`` names for ``request``, or None to leave it as sent."""
    if not request.tools or not answers_a_user(request):
        return None
    if wanted == "required":
        return ToolChoice("required")
    if request.tool_by_qualified_name(wanted) or any(tool.name == wanted for tool in request.tools):
        return ToolChoice("named", wanted)
    return None


def apply_hints(request: ChatRequest, headers: Mapping[str, str]) -> ChatRequest:
    """``request`` with the hints in ``headers`` applied (in place); returns it."""
    wanted = (headers.get(TOOL_CHOICE_HEADER) or "").strip()
    choice = forced_choice(request, wanted) if wanted else None
    if choice is not None:
        request.tool_choice = choice
    if wanted:
        log.info("request hint %s: %s -> tool_choice %s", TOOL_CHOICE_HEADER, wanted,
                 f"{choice.mode} {choice.name or ''}".strip() if choice is not None else "unchanged")
    return request
