"""A request's :class:`kvgate.core.request_trace.RequestTrace` as OpenTelemetry spans.

One SERVER span per request, ``chat {model}``, carrying the GenAI semantic-convention attributes
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens`` / ``cache_read.input_tokens``, ``gen_ai.response.finish_reasons`` ...) and
kvgate's cache outcome (``kvgate.cache.*``); one INTERNAL child per stage that ran: ``tokenize``,
``fence_build``, ``cache_lookup`` (tier, hit type, cached tokens), ``restore`` (tier, restored
tokens), ``prefill`` (computed tokens) and ``decode`` (output tokens). Spans carry the times the
host measured, not the time they are built.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace as otel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from kvgate.core.request_trace import RequestTrace, Stage

OPERATION = "chat"
PROVIDER = "kvgate"


def cache_attributes(trace: RequestTrace) -> dict[str, Any]:
    cache = trace.cache
    if cache is None:
        return {}
    return {"kvgate.cache.tier": cache.source, "kvgate.cache.hit_type": cache.hit_type,
            "kvgate.cache.cached_tokens": cache.cached_tokens, "kvgate.cache.cached_tokens_device": cache.cached_device,
            "kvgate.cache.cached_tokens_ssd": cache.cached_ssd}


def request_attributes(trace: RequestTrace, model: str) -> dict[str, Any]:
    cached = trace.cache.cached_tokens if trace.cache is not None else 0
    attributes = {"gen_ai.operation.name": OPERATION, "gen_ai.provider.name": PROVIDER,
                  "gen_ai.request.model": trace.model or model, "gen_ai.response.model": model,
                  "gen_ai.usage.input_tokens": trace.prompt_tokens,
                  "gen_ai.usage.output_tokens": trace.completion_tokens, "gen_ai.usage.cache_read.input_tokens": cached,
                  "gen_ai.response.finish_reasons": [trace.finish_reason], "kvgate.tenant": trace.tenant,
                  **cache_attributes(trace)}
    if trace.request_id:
        attributes["gen_ai.response.id"] = trace.request_id
    if trace.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = trace.max_tokens
    if trace.temperature is not None:
        attributes["gen_ai.request.temperature"] = trace.temperature
    if trace.error is not None:
        attributes["error.type"] = trace.finish_reason
    return attributes


def stage_attributes(trace: RequestTrace, stage: Stage) -> dict[str, Any]:
    cache = trace.cache
    if stage.name == "cache_lookup":
        return cache_attributes(trace)
    if stage.name == "restore" and cache is not None:
        return {"kvgate.cache.tier": cache.source, "kvgate.cache.restored_tokens": cache.cached_ssd}
    if stage.name == "prefill":
        return {"kvgate.prefill.computed_tokens": trace.prompt_tokens - (cache.cached_tokens if cache else 0)}
    if stage.name == "decode":
        return {"gen_ai.usage.output_tokens": trace.completion_tokens}
    return {}


class SpanWriter:
    """Implements :class:`kvgate.core.request_trace.RequestObserver` with an OpenTelemetry tracer."""

    def __init__(self, tracer: otel.Tracer, model: str):
        self.tracer = tracer
        self.model = model

    @classmethod
    def build(cls, service_name: str, processor: Any, model: str) -> "SpanWriter":
        """A writer with its own tracer provider (the process's global one is left alone)."""
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(processor)
        return cls(provider.get_tracer("kvgate"), model)

    def request_finished(self, trace: RequestTrace) -> None:
        model = trace.model or self.model
        root = self.tracer.start_span(f"{OPERATION} {model}", kind=SpanKind.SERVER, start_time=trace.start_ns,
                                      attributes=request_attributes(trace, self.model))
        parent = otel.set_span_in_context(root)
        for stage in trace.stages():
            child = self.tracer.start_span(stage.name, context=parent, start_time=stage.start_ns,
                                           attributes=stage_attributes(trace, stage))
            child.end(end_time=stage.end_ns)
        if trace.error is not None:
            root.set_status(Status(StatusCode.ERROR, trace.error))
        root.end(end_time=trace.end_ns)
