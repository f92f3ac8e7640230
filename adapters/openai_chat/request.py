"""A Chat Completions request body -> canonical :class:`ChatRequest`.

Unknown fields are ignored; null counts as absent. Decisions beyond the wire spec:

* ``n`` other than 1 is a 400 (one choice per request).
* ``logprobs: true`` returns the log-probability of each content token; ``top_logprobs`` (0-20)
  adds that many alternatives per token and needs ``logprobs: true`` when above 0 (else a 400).
* ``max_completion_tokens`` wins over ``max_tokens``; with neither the model may run to the end of
  the context.
* Reasoning: ``chat_template_kwargs.enable_thinking`` (bool) wins; else ``reasoning_effort`` (``none``
  -> off, any other value -> on); else the model's default (``None``).
* Cache key: header ``x-kvgate-cache-key``, else ``prompt_cache_key``, else ``user``.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping, Optional

from kvgate.adapters.prompt_cache_retention import retention_hints
from kvgate.core.pipeline.stop_strings import check_stop_strings
from kvgate.adapters.openai_chat.fields import integer, number, typed
from kvgate.adapters.openai_chat.messages import convert_messages
from kvgate.adapters.openai_chat.tools import convert_response_format, convert_tool_choice, convert_tools
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, SamplingParams
from kvgate.core.pipeline.sampling_defaults import unset_names


def to_chat_request(body: dict, model: str, has_vision: bool, headers: Optional[Mapping[str, str]] = None,
                    request_id: Optional[str] = None) -> ChatRequest:
    """Validate ``body`` and build the canonical request for the served ``model``."""
    typed(body, "model", str, "")
    reject_unsupported(body)
    messages = convert_messages(body.get("messages"), has_vision)
    tools = convert_tools(body.get("tools"))
    tool_choice, allowed = convert_tool_choice(body.get("tool_choice"), tools)
    extra: dict[str, Any] = {"allowed_tools": allowed} if allowed else {}
    if typed(body, "ignore_eos", bool, "", default=False):  # vLLM's extension, for benchmarks
        extra["ignore_eos"] = True
    return ChatRequest(
        model=model, messages=messages, tools=tools, tool_choice=tool_choice,
        parallel_tool_calls=typed(body, "parallel_tool_calls", bool, "", default=True),
        sampling=sampling(body), response_format=convert_response_format(body.get("response_format")),
        reasoning=reasoning_switch(body), cache_key=cache_key(body, headers or {}),
        request_id=request_id or uuid.uuid4().hex, extra=extra, retention=retention_hints(body))


def reject_unsupported(body: dict) -> None:
    if integer(body, "n", low=1, default=1) != 1:
        raise InvalidRequest("Only n=1 is supported: this server returns one choice per request.", param="n")
    typed(body, "stream", bool, "")
    options = typed(body, "stream_options", dict, "")
    if options is not None:
        typed(options, "include_usage", bool, "stream_options")


def sampling(body: dict) -> SamplingParams:
    max_tokens = integer(body, "max_completion_tokens", low=1)
    if max_tokens is None:
        max_tokens = integer(body, "max_tokens", low=1)
    top_k = integer(body, "top_k", low=-1, default=0)
    logprobs = typed(body, "logprobs", bool, "", default=False)
    top_logprobs = integer(body, "top_logprobs", low=0, high=20, default=0)
    if top_logprobs and not logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true.", param="top_logprobs")
    return SamplingParams(
        temperature=number(body, "temperature", low=0, high=2, default=1.0),
        top_p=number(body, "top_p", low=0, high=1, default=1.0),
        top_k=max(top_k, 0),
        min_p=number(body, "min_p", low=0, high=1, default=0.0),
        seed=integer(body, "seed"),
        max_tokens=max_tokens,
        unset=unset_names(body),
        stop=stop_sequences(body.get("stop")),
        presence_penalty=number(body, "presence_penalty", low=-2, high=2, default=0.0),
        frequency_penalty=number(body, "frequency_penalty", low=-2, high=2, default=0.0),
        repetition_penalty=number(body, "repetition_penalty", low=0.01, default=1.0),
        logprobs=logprobs, top_logprobs=top_logprobs)


def stop_sequences(raw: Any) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw] if raw else []
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise InvalidRequest("Invalid type for 'stop': expected a string or an array of strings.", param="stop")
    return check_stop_strings([s for s in raw if s], "stop")


def reasoning_switch(body: dict) -> Optional[bool]:
    kwargs = typed(body, "chat_template_kwargs", dict, "")
    if kwargs is not None:
        enable = typed(kwargs, "enable_thinking", bool, "chat_template_kwargs")
        if enable is not None:
            return enable
    effort = typed(body, "reasoning_effort", str, "")
    if effort is None:
        return None
    return effort != "none"


def cache_key(body: dict, headers: Mapping[str, str]) -> Optional[str]:
    header = headers.get("x-kvgate-cache-key")
    if header:
        return header
    return typed(body, "prompt_cache_key", str, "") or typed(body, "user", str, "") or None
