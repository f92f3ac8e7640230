"""What a request asks the fence to enforce, independent of any dialect."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.types import ChatRequest, Tool

START_STATES = ("content", "reasoning", "after_reasoning")


@attrs.frozen
class FencePlan:
    tools: tuple[Tool, ...]  # the tools a call may name (named choice: just that one)
    mode: str  # "auto" | "required" | "none"
    max_calls: Optional[int]  # None: any number; 1 without parallel tool calls; else max_tool_calls
    response_schema: Any = None  # JSON schema the answer text must follow, or None
    start_in: str = "content"  # where the completion starts (see Dialect.new_parser)
    call_offset: int = 0  # tool calls earlier in the conversation (for dialects that number calls)

    @property
    def constrains(self) -> bool:
        return bool(self.tools) or self.response_schema is not None


def response_schema(request: ChatRequest) -> Any:
    fmt = request.response_format
    if fmt.type == "json_object":
        return {"type": "object"}
    if fmt.type == "json_schema":
        if not isinstance(fmt.schema, dict):
            raise FenceRequestError("response_format json_schema needs a schema object", param="response_format")
        return fmt.schema
    return None


def plan_for(request: ChatRequest, start_in: str = "content") -> FencePlan:
    if start_in not in START_STATES:
        raise ValueError(f"start_in must be one of {START_STATES}, got {start_in!r}")
    choice = request.tool_choice
    tools = tuple(request.tools)
    mode = choice.mode
    if mode == "named":
        tool = request.tool_by_qualified_name(choice.name or "") or next(
            (t for t in tools if t.name == choice.name), None)
        if tool is None:
            raise FenceRequestError(f"tool_choice names {choice.name!r}, which is not among the request's tools",
                                    param="tool_choice")
        return FencePlan((tool,), "required", 1, response_schema(request), start_in, earlier_calls(request))
    if mode == "required" and not tools:
        raise FenceRequestError("tool_choice 'required' needs at least one tool", param="tool_choice")
    limits = [limit for limit in (request.max_tool_calls, None if request.parallel_tool_calls else 1) if limit]
    max_calls = min(limits) if limits else None
    return FencePlan(tools, mode if tools else "none", max_calls, response_schema(request), start_in,
                     earlier_calls(request))


def earlier_calls(request: ChatRequest) -> int:
    return sum(len(m.tool_calls) for m in request.messages)
