"""An Anthropic Messages request body -> canonical :class:`ChatRequest`.

Validated by hand; unknown fields (``context_management``, ``output_config``, ``metadata``,
``container``, ...) are ignored. ``max_tokens`` is optional here (count_tokens bodies lack it).
"""

from __future__ import annotations

import math
import uuid
from typing import Any, Mapping, Optional

from kvgate.core.pipeline.stop_strings import check_stop_strings
from kvgate.adapters.anthropic.blocks import expect
from kvgate.adapters.anthropic.messages import convert_messages
from kvgate.adapters.anthropic.retention import retention_hints
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, SamplingParams, Tool, ToolChoice
from kvgate.core.pipeline.sampling_defaults import unset_names

TOOL_CHOICE_MODES = {"auto": "auto", "any": "required", "tool": "named", "none": "none"}


def build_chat_request(body: dict[str, Any], served_model: str, headers: Mapping[str, str],
                       billing: str) -> ChatRequest:
    tools = convert_tools(body.get("tools"))
    choice, parallel = convert_tool_choice(body.get("tool_choice"), tools)
    messages = convert_messages(body.get("messages"), body.get("system"), billing)
    return ChatRequest(
        model=served_model,
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        sampling=convert_sampling(body),
        reasoning=convert_thinking(body.get("thinking")),
        cache_key=cache_key(body, headers),
        request_id=uuid.uuid4().hex,
        retention=retention_hints(body, tools, billing, convert_tools),
    )


def convert_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    expect(isinstance(raw, list), "must be a list of tools", "tools")
    tools = []
    for index, tool in enumerate(raw):
        param = f"tools.{index}"
        expect(isinstance(tool, dict), "each tool must be an object", param)
        if "input_schema" not in tool and tool.get("type") not in (None, "custom"):
            continue  # an Anthropic server tool (web_search_*, code_execution_*): nothing to run here
        expect(isinstance(tool.get("name"), str) and tool["name"], "tool needs a string 'name'", param)
        expect(isinstance(tool.get("input_schema"), dict), "tool needs an 'input_schema' object",
               f"{param}.input_schema")
        description = tool.get("description") or ""
        expect(isinstance(description, str), "must be a string", f"{param}.description")
        tools.append(Tool(name=tool["name"], description=description, parameters=tool["input_schema"],
                          strict=tool.get("strict") is True))
    return tools


def convert_tool_choice(raw: Any, tools: list[Tool]) -> tuple[ToolChoice, bool]:
    if raw is None:
        return ToolChoice(), True
    expect(isinstance(raw, dict) and isinstance(raw.get("type"), str) and raw["type"] in TOOL_CHOICE_MODES,
           "must be an object with type auto, any, tool or none", "tool_choice")
    parallel = raw.get("disable_parallel_tool_use") is not True
    mode = TOOL_CHOICE_MODES[raw["type"]]
    if mode == "named":
        name = raw.get("name")
        expect(any(tool.name == name for tool in tools), f"names no tool in 'tools' ({name!r})",
               "tool_choice.name")
        return ToolChoice(mode="named", name=name), parallel
    if mode == "required":
        expect(bool(tools), "'any' needs at least one tool in 'tools'", "tool_choice")
    return ToolChoice(mode=mode), parallel


def convert_sampling(body: dict[str, Any]) -> SamplingParams:
    params = SamplingParams(max_tokens=optional_int(body, "max_tokens", minimum=1), unset=unset_names(body))
    for key in ("temperature", "top_p"):  # Anthropic's ranges: both in [0, 1]
        value = body.get(key)
        if value is not None:
            expect(is_number(value) and math.isfinite(value) and 0 <= value <= 1, "must be a number in [0, 1]", key)
            setattr(params, key, float(value))
    params.top_k = optional_int(body, "top_k", minimum=0) or 0
    stops = body.get("stop_sequences")
    if stops is not None:
        expect(isinstance(stops, list) and all(isinstance(s, str) and s for s in stops),
               "must be a list of non-empty strings", "stop_sequences")
        params.stop = check_stop_strings(list(stops), "stop_sequences")
    return params


def convert_thinking(raw: Any) -> Optional[bool]:
    if raw is None:
        return None
    expect(isinstance(raw, dict) and isinstance(raw.get("type"), str), "must be an object with a 'type'",
           "thinking")
    return raw["type"] != "disabled"


def cache_key(body: dict[str, Any], headers: Mapping[str, str]) -> Optional[str]:
    header = headers.get("x-kvgate-cache-key")
    if header:
        return header
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    return user if isinstance(user, str) and user else None


def optional_int(body: dict[str, Any], key: str, minimum: int) -> Optional[int]:
    value = body.get(key)
    if value is None:
        return None
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise InvalidRequest(f"{key}: must be an integer >= {minimum}", param=key)
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
