"""Running one Responses request: resolve ``previous_response_id``, drive the pipeline, render
events, keep the record. Shared by the non-streaming, SSE and WebSocket paths.

:func:`begin` starts the pipeline and waits for its first event, so that errors raised before
generation are normal HTTP errors; ``context_length_exceeded`` instead becomes an in-stream
``response.failed`` when the caller streams (that is what Codex maps to "context window exceeded").
A compaction's summary pass (``context_management`` over its threshold, or a ``compaction_trigger``)
runs before the answer, in :meth:`Run.events` after ``response.created``, with progress events while
the model writes (:mod:`.summary_pass`); :func:`begin` takes its first event when the caller does
not stream.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Optional

import attrs

from kvgate.core.errors import ContextLengthExceeded, InvalidRequest, KvgateError
from kvgate.core.tenants import DEFAULT, Tenant, scope_request
from kvgate.core.types import Heartbeat
from kvgate.adapters.prompt_cache_retention import applied_policy
from kvgate.adapters.responses import objects
from kvgate.adapters.responses.compaction_item import compaction_item
from kvgate.adapters.responses.compaction import CompactionRenderer, is_compaction_trigger, summary_request
from kvgate.adapters.responses.context_management import applied_entries, compacted, compaction_policy, summary_if_over
from kvgate.adapters.responses.render import StreamRenderer
from kvgate.adapters.responses.request import ResponsesCall, parse_create
from kvgate.adapters.responses.store import ResponseStore, StoredResponse
from kvgate.adapters.responses.store_rows import shared_prefix
from kvgate.adapters.responses.summary_pass import HEARTBEAT, SummaryPass

log = logging.getLogger("kvgate.responses")


def previous_not_found(previous_id: str) -> InvalidRequest:
    return InvalidRequest(f"Previous response with id '{previous_id}' not found.",
                          param="previous_response_id", code="previous_response_not_found")


def parse_call(ctx: Any, store: ResponseStore, body: dict[str, Any], header_cache_key: Optional[str] = None,
               local: Optional[dict[str, StoredResponse]] = None, tenant: Tenant = DEFAULT,
               warm_up: bool = False, inherit_tools: bool = False) -> ResponsesCall:
    """Validate ``body`` and build its canonical request for ``tenant``, with the prior conversation
    (and the tools its ``additional_tools`` items announced) resolved from connection-local memory
    (``local``, WebSocket only) or the store; a prior response of another tenant is not found.
    With ``inherit_tools`` (a WebSocket follow-up) a body without ``tools`` keeps the prior
    request's top-level tools."""
    served = ctx.resolve_model(body.get("model"))
    previous_id = body.get("previous_response_id")
    prior = None
    if isinstance(previous_id, str) and previous_id:
        prior = (local or {}).get(previous_id) or store.get(previous_id, tenant.name)
        if prior is not None and prior.tenant != tenant.name:
            prior = None
        if prior is None:
            raise previous_not_found(previous_id)
    call = parse_create(body, model=served, has_vision=ctx.pipeline.model_info.has_vision,
                        prior=prior.messages if prior else None, prior_cache_key=prior.cache_key if prior else None,
                        header_cache_key=header_cache_key, warm_up=warm_up,
                        prior_tools=prior.tools if prior else None,
                        inherited_tools=prior.request_tools if prior and inherit_tools else None)
    scope_request(call.chat, tenant, body)
    return call


def input_items_with_ids(value: Any) -> list[dict[str, Any]]:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}] \
        if isinstance(value, str) else [i for i in value or [] if isinstance(i, dict)]
    return [{"id": objects.new_id("msg" if item.get("type", "message") == "message" else "item"), **item}
            for item in items]


@attrs.define(eq=False)
class Run:
    ctx: Any
    store: ResponseStore
    call: ResponsesCall
    renderer: StreamRenderer
    stream: Any = None
    first: Any = None
    failure: Optional[KvgateError] = None
    record: Optional[StoredResponse] = None
    summary: Optional[SummaryPass] = None  # a compaction's summary pass, still to run before the answer

    async def events(self) -> AsyncIterator[Optional[dict[str, Any]]]:
        """Wire events in order (``HEARTBEAT`` during a prefill); the record is kept at the end."""
        try:
            for event in self.renderer.start():
                yield event
            if self.failure is None and self.summary is not None:
                async for event in self._summarised_or_failed():
                    yield event
            if self.failure is not None:
                for event in self.renderer.fail(self.failure.code or "server_error", self.failure.message):
                    yield event
            elif not self.renderer.finished:
                async for event in self._generated():
                    yield event
            self.keep()
        finally:
            if self.stream is not None:
                await self.stream.aclose()

    async def start(self) -> None:
        self.stream = self.ctx.pipeline.stream(self.call.chat)
        self.first = await self.stream.__anext__()

    async def summarised(self) -> AsyncIterator[Optional[dict[str, Any]]]:
        """The summary pass's events, then the ``compaction`` item's ``done``: the whole response
        (``compaction_trigger``), or the answer started on the compacted context."""
        summary, self.summary = self.summary, None
        async for event in summary.events():
            yield event
        if isinstance(self.renderer, CompactionRenderer):
            for event in self.renderer.compacted(compaction_item(summary.item_id, summary.summary), summary.usage):
                yield event
            return
        self.call, item = compacted(self.call, summary.item_id, summary.summary)
        for event in self.renderer.item_done(item):
            yield event
        await self.start()

    async def _summarised_or_failed(self) -> AsyncIterator[Optional[dict[str, Any]]]:
        try:
            async for event in self.summarised():
                yield event
        except KvgateError as exc:
            log.warning("responses: compaction failed: %s", exc.message)
            self.failure = exc

    async def _generated(self) -> AsyncIterator[Optional[dict[str, Any]]]:
        event = self.first
        try:
            while not self.renderer.finished:
                if isinstance(event, Heartbeat):
                    yield HEARTBEAT
                for wire in self.renderer.feed(event):
                    yield wire
                if self.renderer.finished:
                    break
                event = await self.stream.__anext__()
        except StopAsyncIteration:
            pass
        except KvgateError as exc:
            log.warning("responses: generation failed: %s", exc.message)
            for wire in self.renderer.fail(exc.code or "server_error", exc.message):
                yield wire
        if not self.renderer.finished:
            for wire in self.renderer.fail("server_error", "The generation ended without a result."):
                yield wire

    def keep(self, with_output: bool = True) -> StoredResponse:
        messages = list(self.call.conversation)
        if with_output and self.renderer.response["output"]:
            messages.append(self.renderer.assistant)
        shared = shared_prefix(self.call.prior_conversation, messages)  # the stored record adds only the rest
        self.record = StoredResponse(response=self.renderer.response,
                                     input_items=input_items_with_ids(self.call.body.get("input")),
                                     messages=messages, cache_key=self.call.chat.cache_key,
                                     tenant=self.call.chat.tenant.name, tools=self.call.conversation_tools,
                                     request_tools=self.call.request_tools,
                                     parent=self.call.previous_response_id if shared else None, shared=shared)
        if self.call.store:
            self.store.put(self.record)
        return self.record


def new_run(ctx: Any, store: ResponseStore, call: ResponsesCall) -> Run:
    echo = {**call.body, "model": call.body.get("model") or call.chat.model,  # and the output cap applied
            "max_output_tokens": ctx.pipeline.output_cap.applied(call.body.get("max_output_tokens")) or None,
            "context_management": applied_entries(compaction_policy(call.body), ctx.pipeline.model_info.max_context),
            "prompt_cache_retention": applied_policy(call.body)}  # the values in force
    applied = ctx.pipeline.sampling_defaults.apply(call.chat.sampling)
    envelope = objects.response_envelope(objects.new_id("resp"), echo, applied)
    renderer = CompactionRenderer(envelope) if is_compaction_trigger(call.body) else \
        StreamRenderer(envelope, encrypted_reasoning=call.wants_encrypted_reasoning, tools=call.chat.tools)
    return Run(ctx=ctx, store=store, call=call, renderer=renderer)


async def begin(ctx: Any, store: ResponseStore, call: ResponsesCall, streaming: bool) -> Run:
    """Start the pipeline and take its first event; errors before generation propagate, except
    a context overflow while ``streaming`` (then the run reports it as ``response.failed``)."""
    run = new_run(ctx, store, call)
    policy = compaction_policy(call.body)  # a bad entry is a 400
    default_max_tokens = ctx.config.engine.default_max_tokens
    try:
        if is_compaction_trigger(call.body):
            chat = summary_request(call, default_max_tokens)
        else:
            chat = await summary_if_over(ctx.pipeline, call, policy, default_max_tokens) if policy else None
        if chat is not None:
            run.summary = SummaryPass(ctx.pipeline, chat, run.renderer)
        if run.summary is None:
            await run.start()
        elif not streaming:  # a context overflow stays an HTTP error; the rest runs in Run.events()
            await run.summary.open()
    except ContextLengthExceeded as exc:
        if not streaming:
            raise
        run.stream, run.failure = None, exc
    return run


async def complete(run: Run) -> dict[str, Any]:
    """Drain a run (non-streaming) and return the final Response object."""
    async for _ in run.events():
        pass
    return run.renderer.response
