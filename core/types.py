"""Canonical request and event types shared by every adapter, dialect and the engine.

Adapters translate their wire format into a :class:`ChatRequest` and translate the stream of
events back. Nothing here knows about HTTP, tokens or model syntax.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

import attrs

from kvgate.core.tenants import DEFAULT as DEFAULT_TENANT
from kvgate.core.tenants import Tenant

Role = Literal["system", "user", "assistant", "tool"]


@attrs.define
class ToolCall:
    """A call the model made. ``arguments`` is the JSON text exactly as the model produced it."""

    id: str
    name: str
    arguments: str
    namespace: Optional[str] = None


@attrs.define
class Message:
    """One turn of the conversation.

    ``content`` is plain text (adapters join text parts; they reject media the model cannot see).
    ``reasoning`` is the assistant's thinking, when the client replays it.
    """

    role: Role
    content: str = ""
    reasoning: Optional[str] = None
    tool_calls: list[ToolCall] = attrs.field(factory=list)
    tool_call_id: Optional[str] = None
    name: Optional[str] = None
    is_error: bool = False


@attrs.frozen
class InputFormat:
    """What a custom tool's raw-text input must match: any text (``syntax`` "text"), or the
    ``definition`` of a "lark" or "regex" grammar."""

    syntax: Literal["text", "lark", "regex"] = "text"
    definition: str = ""


@attrs.define
class Tool:
    """A function the model may call. ``parameters`` is a JSON Schema object.

    A custom (freeform) tool has ``custom`` set: the model sees a function with one string
    parameter ``input`` (:mod:`kvgate.adapters.custom_tools`) and clients get its raw text."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = attrs.field(factory=lambda: {"type": "object", "properties": {}})
    namespace: Optional[str] = None
    strict: bool = False
    custom: Optional[InputFormat] = None

    @property
    def qualified_name(self) -> str:
        """The name the model sees: namespaced tools are flattened as ``namespace__name``."""
        return f"{self.namespace}__{self.name}" if self.namespace else self.name


@attrs.define
class ToolChoice:
    mode: Literal["auto", "none", "required", "named"] = "auto"
    name: Optional[str] = None


@attrs.define
class ResponseFormat:
    type: Literal["text", "json_object", "json_schema"] = "text"
    schema: Optional[dict[str, Any]] = None
    name: Optional[str] = None
    strict: bool = False


@attrs.define
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: Optional[int] = None
    stop: list[str] = attrs.field(factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: bool = False  # report each content token's log-probability (TextDelta.logprobs)
    top_logprobs: int = 0  # and this many most likely alternatives at each position (0-20)
    # the parameters the request left out: the pipeline fills them from the server's defaults
    unset: frozenset[str] = frozenset()


@attrs.define
class RetentionHint:
    """A client's ask to keep a prefix of its prompt cached for ``ttl_seconds`` (Anthropic
    ``cache_control``, OpenAI ``prompt_cache_retention``). The prefix is what the prompt of
    ``messages`` and ``tools`` renders to (without a generation prompt); ``messages`` None: the
    whole prompt. ``ttl`` is the label usage reports it under (``"5m"``, ``"1h"``, ``"24h"``)."""

    ttl: str
    ttl_seconds: float
    messages: Optional[list[Message]] = None
    tools: list[Tool] = attrs.field(factory=list)


@attrs.define
class ChatRequest:
    """The one request shape the pipeline understands."""

    model: str
    messages: list[Message]
    tools: list[Tool] = attrs.field(factory=list)
    tool_choice: ToolChoice = attrs.field(factory=ToolChoice)
    parallel_tool_calls: bool = True
    max_tool_calls: Optional[int] = None  # at most this many calls in the reply (None: no limit)
    sampling: SamplingParams = attrs.field(factory=SamplingParams)
    response_format: ResponseFormat = attrs.field(factory=ResponseFormat)
    reasoning: Optional[bool] = None
    cache_key: Optional[str] = None
    request_id: str = ""
    extra: dict[str, Any] = attrs.field(factory=dict)
    tenant: Tenant = DEFAULT_TENANT  # who sent it (from its API key): scopes its cache namespace
    cache_salt: Optional[str] = None  # isolates its prefix cache further, inside its tenant's
    retention: list[RetentionHint] = attrs.field(factory=list)  # prefixes to keep cached (pinned)

    def tool_by_qualified_name(self, name: str) -> Optional[Tool]:
        for tool in self.tools:
            if tool.qualified_name == name:
                return tool
        return None


# ----------------------------------------------------------------------------------------------
# Output events. Indices count tool calls within one assistant message: 0, 1, 2, ...


@attrs.define
class ReasoningDelta:
    text: str


@attrs.define
class TokenLogprob:
    """One generated token as the model saw it: its text, its UTF-8 bytes (a token that is part of a
    character holds that part's raw bytes), its log-probability, and the most likely tokens at its
    position (``top_logprobs`` of those is always empty)."""

    token: str
    bytes: bytes
    logprob: float
    top_logprobs: list["TokenLogprob"] = attrs.field(factory=list)


@attrs.define
class TextDelta:
    """Answer text. ``at`` is where it starts in the model's output text, when the parser knows (the
    pipeline maps tokens to content with it); ``logprobs`` are the tokens whose first character of
    content is in this delta (only when the request asked for logprobs)."""

    text: str
    at: Optional[int] = attrs.field(default=None, eq=False)
    logprobs: list[TokenLogprob] = attrs.field(factory=list, eq=False)


@attrs.define
class ToolCallStart:
    index: int
    id: str
    name: str
    namespace: Optional[str] = None


@attrs.define
class ToolCallArgsDelta:
    index: int
    text: str


@attrs.define
class ToolCallEnd:
    index: int
    arguments: str


@attrs.define
class ParseIssue:
    """The dialect parser found something malformed (duplicate parameter, unknown tool, unclosed block)."""

    message: str
    raw: str = ""


@attrs.define
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens_device: int = 0
    cached_tokens_ssd: int = 0
    # tokens run again to cut the cached state at its length (a hybrid model's recurrent state
    # restored from the nearest snapshot before it); not part of prompt_tokens' split
    replayed_tokens: int = 0
    # prompt tokens this request wrote to the cache as retained (pinned) prefixes, by TTL label
    cache_written: dict[str, int] = attrs.field(factory=dict)

    @property
    def cached_tokens(self) -> int:
        return self.cached_tokens_device + self.cached_tokens_ssd

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


FinishReason = Literal["stop", "length", "tool_calls", "stop_sequence", "cancelled", "error"]


@attrs.define
class Finished:
    reason: FinishReason
    usage: Usage
    stop_sequence: Optional[str] = None
    guard_interventions: int = 0
    issues: list[ParseIssue] = attrs.field(factory=list)
    error: Optional[str] = None  # set when reason == "error": what went wrong after the stream began
    relaxed: list[str] = attrs.field(factory=list)  # schema keywords the fence did not enforce
    guard_stop: bool = False  # a generation guard ended the reply (the model did not): see the adapters


@attrs.define
class Started:
    """Sent once the prompt is accepted (tokenized, fits the context, admitted) and the prefix cache
    has planned it: the cached counts are those the final usage reports (rounded the same way), so a
    protocol can tell the input side of its usage before the first token."""

    prompt_tokens: int
    cached_tokens_device: int = 0
    cached_tokens_ssd: int = 0
    cache_written: dict[str, int] = attrs.field(factory=dict)  # as Usage's

    @property
    def usage(self) -> "Usage":
        """The input side of the request's usage (no output yet)."""
        return Usage(prompt_tokens=self.prompt_tokens, cached_tokens_device=self.cached_tokens_device,
                     cached_tokens_ssd=self.cached_tokens_ssd, cache_written=dict(self.cache_written))


@attrs.define
class Heartbeat:
    """Sent periodically while a long prefill runs, so adapters can emit keep-alives."""


Event = Union[
    Started, Heartbeat, ReasoningDelta, TextDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd,
    ParseIssue, Finished,
]
