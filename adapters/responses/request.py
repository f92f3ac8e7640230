"""A Responses create body (HTTP or a WebSocket ``response.create``) -> a canonical ChatRequest.

``instructions`` become a leading system message and are never inherited through
``previous_response_id``; the prior conversation (stored messages) comes first, then ``input``.
Tools announced by ``additional_tools`` input items belong to the conversation, so they stay in
force along a ``previous_response_id`` chain; the top-level ``tools`` are the request's own, and
are inherited only where the caller passes them (a WebSocket follow-up without a ``tools`` field).
Unknown fields are ignored; wrong types get a 400 naming the field. Logprobs are computed when
``include`` holds ``"message.output_text.logprobs"``, with ``top_logprobs`` (0-20) alternatives.
"""

from __future__ import annotations

import uuid
from typing import Any, Optional

import attrs

from kvgate.adapters.prompt_cache_retention import retention_hints
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, Message, ResponseFormat, SamplingParams, Tool
from kvgate.core.pipeline.sampling_defaults import unset_names
from kvgate.adapters.responses.input_items import convert_input
from kvgate.adapters.responses.tools import convert_tool_choice, convert_tools

LOGPROBS = "message.output_text.logprobs"


@attrs.define
class ResponsesCall:
    """One parsed create request: the canonical request plus what the wire response echoes."""

    chat: ChatRequest
    body: dict[str, Any]
    conversation: list[Message]  # prior + input, without instructions: what a stored record keeps
    conversation_tools: list[Tool] = attrs.Factory(list)  # announced by additional_tools items, prior + input
    request_tools: list[Tool] = attrs.Factory(list)  # the top-level tools in force for this request
    store: bool = True
    stream: bool = False
    previous_response_id: Optional[str] = None
    prior_conversation: list[Message] = attrs.Factory(list)  # the previous response's, as resolved

    @property
    def wants_encrypted_reasoning(self) -> bool:
        include = self.body.get("include")
        return isinstance(include, list) and "reasoning.encrypted_content" in include


def _number(body: dict, key: str, low: float, high: float) -> Optional[float]:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InvalidRequest(f"{key} must be a number between {low} and {high}.", param=key)  # NaN too
    return float(value)


_FIELD_TYPES = {  # top-level fields and the JSON type each must have when present (null = absent)
    "stream": (bool, "a boolean"), "store": (bool, "a boolean"), "parallel_tool_calls": (bool, "a boolean"),
    "generate": (bool, "a boolean"), "model": (str, "a string"), "instructions": (str, "a string"),
    "previous_response_id": (str, "a string"), "prompt_cache_key": (str, "a string"), "user": (str, "a string"),
    "truncation": (str, "a string"), "text": (dict, "an object"), "reasoning": (dict, "an object"),
    "metadata": (dict, "an object"), "stream_options": (dict, "an object"), "include": (list, "an array"),
    "tools": (list, "an array"), "safety_identifier": (str, "a string"), "service_tier": (str, "a string"),
    "background": (bool, "a boolean"),
}


def _check_types(body: dict) -> None:
    """Each known field has its type (a bool is never a number, a number never a string)."""
    for key, (kind, name) in _FIELD_TYPES.items():
        value = body.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
            raise InvalidRequest(f"Invalid type for '{key}': expected {name}.", param=key)
    if body.get("truncation") not in (None, "auto", "disabled"):
        raise InvalidRequest("truncation must be 'auto' or 'disabled'.", param="truncation")
    include = body.get("include") or []
    if not all(isinstance(item, str) for item in include):
        raise InvalidRequest("include must be an array of strings.", param="include")
    text = body.get("text") or {}
    if text.get("format") is not None and not isinstance(text["format"], dict):
        raise InvalidRequest("text.format must be an object.", param="text.format")
    if not isinstance((text.get("format") or {}).get("type", "text"), str):
        raise InvalidRequest("text.format.type must be a string.", param="text.format.type")
    effort = (body.get("reasoning") or {}).get("effort")
    if effort is not None and not isinstance(effort, str):
        raise InvalidRequest("reasoning.effort must be a string.", param="reasoning.effort")
    _check_metadata(body.get("metadata") or {})


METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512  # OpenAI's limits


def _check_metadata(metadata: dict) -> None:
    """OpenAI's metadata limits: it is stored with the response, so it never grows past them."""
    if len(metadata) > METADATA_KEYS:
        raise InvalidRequest(f"metadata has {len(metadata)} keys; at most {METADATA_KEYS} are allowed.",
                             param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise InvalidRequest(f"metadata keys are at most {METADATA_KEY_CHARS} characters; one has {len(key)}.",
                                 param="metadata")
        if not isinstance(value, str) or len(value) > METADATA_VALUE_CHARS:
            raise InvalidRequest(f"metadata[{key!r}] must be a string of at most {METADATA_VALUE_CHARS} characters.",
                                 param=f"metadata.{key}")


def _positive_int(body: dict, key: str) -> Optional[int]:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidRequest(f"{key} must be a positive integer.", param=key)
    return value


def _sampling(body: dict) -> SamplingParams:
    sampling = SamplingParams(unset=unset_names(body))
    temperature, top_p = _number(body, "temperature", 0, 2), _number(body, "top_p", 0, 1)
    if temperature is not None:
        sampling.temperature = temperature
    if top_p is not None:
        sampling.top_p = top_p
    for penalty in ("presence_penalty", "frequency_penalty"):
        value = _number(body, penalty, -2, 2)
        if value is not None:
            setattr(sampling, penalty, value)
    limit = _positive_int(body, "max_output_tokens")
    if limit is not None:
        sampling.max_tokens = limit
    top = body.get("top_logprobs")
    if top is not None:
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
            raise InvalidRequest("top_logprobs must be an integer between 0 and 20.", param="top_logprobs")
        sampling.top_logprobs = top
    sampling.logprobs = LOGPROBS in (body.get("include") or [])
    return sampling


def _response_format(body: dict) -> ResponseFormat:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return ResponseFormat()
    if fmt["type"] == "json_object":
        return ResponseFormat(type="json_object")
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("text.format.schema must be a JSON Schema object.", param="text.format.schema")
        return ResponseFormat(type="json_schema", schema=fmt["schema"], name=fmt.get("name"),
                              strict=fmt.get("strict") is True)
    raise InvalidRequest(f"text.format.type {fmt['type']!r} is not supported.", param="text.format.type")


def _reasoning_switch(body: dict) -> Optional[bool]:
    reasoning = body.get("reasoning")
    if not isinstance(reasoning, dict):
        return None
    return reasoning.get("effort") != "none"


def _reject_unsupported(body: dict) -> None:
    _check_types(body)
    if body.get("background") is True:
        raise InvalidRequest("background mode is not supported by this server.", param="background")
    if body.get("conversation") is not None:
        raise InvalidRequest("conversation objects are not supported; use previous_response_id.",
                             param="conversation")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("instructions must be a string.", param="instructions")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise InvalidRequest("previous_response_id must be a string.", param="previous_response_id")


def _cache_key(body: dict, header_key: Optional[str], prior_key: Optional[str]) -> Optional[str]:
    for key in (header_key, body.get("prompt_cache_key"), body.get("user"), prior_key):
        if isinstance(key, str) and key:
            return key
    return None


def parse_create(body: dict[str, Any], *, model: str, has_vision: bool, prior: Optional[list[Message]] = None,
                 prior_cache_key: Optional[str] = None, header_cache_key: Optional[str] = None,
                 warm_up: bool = False, prior_tools: Optional[list[Tool]] = None,
                 inherited_tools: Optional[list[Tool]] = None) -> ResponsesCall:
    """Parse a create body; ``prior`` is the resolved ``previous_response_id`` conversation and
    ``prior_tools`` the tools its ``additional_tools`` items announced; ``inherited_tools`` stand
    for the top-level ``tools`` when the body has none. A ``warm_up`` (WebSocket
    ``generate: false``) may have nothing to warm."""
    _reject_unsupported(body)
    converted = convert_input(body.get("input"), has_vision, prior, prior_tools)
    own = body.get("tools")
    request_tools = convert_tools(own) if own is not None or inherited_tools is None else list(inherited_tools)
    tools = request_tools + converted.tools
    instructions = body.get("instructions") or ""
    system = [Message(role="system", content=instructions)] if instructions else []
    parallel = body.get("parallel_tool_calls")
    chat = ChatRequest(
        model=model, messages=system + converted.messages, tools=tools,
        tool_choice=convert_tool_choice(body.get("tool_choice"), tools),
        parallel_tool_calls=parallel is not False, max_tool_calls=_positive_int(body, "max_tool_calls"),
        sampling=_sampling(body),
        response_format=_response_format(body), reasoning=_reasoning_switch(body),
        cache_key=_cache_key(body, header_cache_key, prior_cache_key), request_id=uuid.uuid4().hex,
        retention=retention_hints(body),
    )
    if not chat.messages and not warm_up:
        raise InvalidRequest("input is empty: send at least one message.", param="input")
    return ResponsesCall(chat=chat, body=body, conversation=converted.messages, conversation_tools=converted.tools,
                         request_tools=request_tools, store=body.get("store") is not False,
                         stream=body.get("stream") is True, previous_response_id=body.get("previous_response_id"),
                         prior_conversation=prior or [])
