"""The one internal pipeline every protocol reaches: canonical request -> canonical events.

render (chat format + dialect) -> tokenize -> engine (cache, prefill, batched decode, fence)
-> detokenize -> stop strings -> dialect parser -> events (answer text carries its tokens'
logprobs when asked for: :mod:`kvgate.core.pipeline.content_logprobs`).

The prompt is rendered and tokenized on a worker thread (:meth:`Pipeline.prompt_tokens`), so a
large prompt never holds up the event loop; a rendered prompt with more characters than the
context could hold at ``longest_token_chars`` per token is refused before it is tokenized, and
a long one whose first windows already hold more tokens than the context is refused after
counting about a context's worth (:mod:`kvgate.core.tokenizer.context_bound`).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from typing import Any, AsyncIterator, Optional

import anyio
import attrs

from kvgate.core.config import Config
from kvgate.core.pipeline.content_logprobs import ContentLogprobs, TokenPieces
from kvgate.core.pipeline.detokenizer import IncrementalDetokenizer
from kvgate.core.pipeline.request_checks import RequestCheck
from kvgate.core.engine.sampling import TokenLogprobs, make_generator
from kvgate.core.engine.engine import Engine
from kvgate.core.fence.admission import FenceAdmission
from kvgate.core.engine.sequence import EngineMessage, Planned, PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.engine.sequence_run import SequenceRun
from kvgate.core.errors import ContextLengthExceeded, InvalidRequest, Overloaded
from kvgate.core.request_trace import RequestObserver, RequestTrace, decode_rate
from kvgate.core.pipeline.output_cap import OutputCap
from kvgate.core.pipeline.retention_marks import retention_of, written_by_ttl
from kvgate.core.pipeline.sampling_defaults import SamplingDefaults
from kvgate.core.server import call_id
from kvgate.core.pipeline.stop_strings import StopStringScanner
from kvgate.core.tenants import DEFAULT as DEFAULT_TENANT
from kvgate.core.tenants import NamespaceOwners, scoped_namespace
from kvgate.core.tokenizer.context_bound import counted_in_windows, tokens_over
from kvgate.core.tokenizer.service import lone_surrogates_refused
from kvgate.core.types import (
    ChatRequest, Event, Finished, Heartbeat, ParseIssue, ReasoningDelta, Started, TextDelta, ToolCallEnd,
    ToolCallStart, Usage,
)

HEARTBEAT_SECONDS = 5.0
log = logging.getLogger("kvgate")


class Pipeline:
    def __init__(self, runtime, engine: Engine, tokenizer_service, chat_format, dialect, namespace: str,
                 config: Config, metrics, fence_builder: Optional[FenceAdmission] = None):
        self.runtime = runtime
        self.engine = engine
        self.tokenizer = tokenizer_service
        self.chat_format = chat_format
        self.dialect = dialect
        self.namespace = namespace
        self.config = config
        self.metrics = metrics
        self.fence_builder = fence_builder
        self.namespace_owners = NamespaceOwners()
        self.namespace_owners.note(namespace, DEFAULT_TENANT)
        granularity = config.cache.cached_tokens_granularity
        self.cached_granularity = granularity or max(1, runtime.block_size)
        self.request_checks: list[RequestCheck] = []  # register_request_checks (set by the app)
        self.observers: list[RequestObserver] = []  # register_request_observers (set by the app)
        self.sampling_defaults = SamplingDefaults.build(config.sampling, runtime.info.sampling_defaults)
        self.output_cap = OutputCap.build(config, runtime.info.max_output_tokens)

    @property
    def model_info(self):
        return self.runtime.info

    @functools.cached_property
    def token_pieces(self) -> TokenPieces:
        """Token texts and bytes for logprobs (built at the first request that asks for them)."""
        return TokenPieces(self.runtime.tokenizer)

    # --- prompt ---------------------------------------------------------------------------------
    def render_prompt(self, request: ChatRequest) -> str:
        """The prompt text; a request a check refuses (e.g. a tool name the dialect cannot carry) is
        refused first (400)."""
        for check in self.request_checks:
            check.check_request(request)
        return self.chat_format.render(request, add_generation_prompt=True)

    def encode_prompt(self, request: ChatRequest) -> list[int]:
        """The prompt's token ids (blocking; :meth:`prompt_tokens` from the event loop)."""
        text = self.render_prompt(request)
        self.check_prompt_chars(text)
        return self.tokenizer.encode_prompt(text, self.namespace_of(request))  # resent outputs keep their ids

    async def prompt_tokens(self, request: ChatRequest) -> list[int]:
        """:meth:`encode_prompt` on a worker thread."""
        return await anyio.to_thread.run_sync(self.encode_prompt, request)

    async def count_prompt_tokens(self, request: ChatRequest) -> int:
        return len(await self.prompt_tokens(request))

    def check_prompt_chars(self, text: str) -> None:
        """Refuse, untokenized, a text too long to fit the context whatever its tokens, and with
        work bounded by the context one whose windows already hold too many (blocking: call it
        on a worker thread)."""
        limit, per_token = self.runtime.info.max_context, self.tokenizer.longest_token_chars
        if per_token and len(text) > limit * per_token:
            raise ContextLengthExceeded(math.ceil(len(text) / per_token), limit, at_least=True)
        if counted_in_windows(text, limit):
            with lone_surrogates_refused():
                over = tokens_over(self.tokenizer.encode_uncached, text, limit)
            if over:
                raise ContextLengthExceeded(over, limit, at_least=True)

    def _check_fits(self, prompt: list[int]) -> int:
        limit = self.runtime.info.max_context
        if len(prompt) >= limit:
            raise ContextLengthExceeded(len(prompt), limit)
        return limit - len(prompt)

    def _max_tokens(self, request: ChatRequest, room: int) -> int:
        wanted = self.output_cap.applied(request.sampling.max_tokens) or room
        if wanted < 0:
            raise InvalidRequest("max_tokens must not be negative.", param="max_tokens")
        return min(wanted, room)

    def namespace_of(self, request: ChatRequest) -> str:
        """The cache namespace of ``request``: the model's, scoped to its tenant and cache salt."""
        namespace = scoped_namespace(self.namespace, request.tenant.cache_scope, request.cache_salt)
        self.namespace_owners.note(namespace, request.tenant)
        return namespace

    def reported(self, usage: Usage) -> Usage:
        """``usage`` as clients see it: cached tokens rounded down to the cache block size (or
        ``[cache] cached_tokens_granularity``), so they cannot reveal single tokens of a prefix;
        replayed tokens too (the distance from a snapshot at a known position would reveal them)."""
        step = self.cached_granularity
        ssd = usage.cached_tokens_ssd // step * step
        device = (usage.cached_tokens_device + usage.cached_tokens_ssd) // step * step - ssd
        replayed = usage.replayed_tokens // step * step
        return attrs.evolve(usage, cached_tokens_device=device, cached_tokens_ssd=ssd, replayed_tokens=replayed)

    def _sequence(self, request: ChatRequest, prompt: list[int], max_tokens: int, generate: bool, deliver,
                  fence: Any = None):
        return Sequence(
            prompt=prompt, params=self.sampling_defaults.apply(request.sampling), max_tokens=max_tokens,
            stop_token_ids=frozenset() if request.extra.get("ignore_eos") else frozenset(self.runtime.info.eos_token_ids),
            deliver=deliver,
            namespace=self.namespace_of(request), cache_key=request.cache_key, fence=fence, generate=generate,
            generator=make_generator(request.sampling.seed),
        )

    def submit(self, seq: Sequence) -> None:
        """Hand ``seq`` to the engine; a refusal (queue full, draining) is counted and re-raised (503)."""
        try:
            self.engine.submit(seq)
        except Overloaded:
            self.metrics.overloaded()
            raise

    # --- generation -----------------------------------------------------------------------------
    def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Events for ``request`` (call from the event loop).

        Raises KvgateError when the first event is awaited, before any event, if the request
        cannot run (the prompt is tokenized then, off the event loop).
        """
        return self._started(request)

    def new_trace(self, request: ChatRequest) -> Optional[RequestTrace]:
        """A trace of ``request`` for the observers; None (and no marks anywhere) without any."""
        if not self.observers:
            return None
        sampling = request.sampling
        return RequestTrace(request.request_id, request.model, request.tenant.name, sampling.max_tokens,
                            sampling.temperature)

    async def _started(self, request: ChatRequest) -> AsyncIterator[Event]:
        trace = self.new_trace(request)
        prompt = await self.prompt_tokens(request)
        if trace is not None:
            trace.mark("tokenized")
        max_tokens = self._max_tokens(request, self._check_fits(prompt))
        events = self._events(request, prompt, max_tokens, trace)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()

    async def admit_fence(self, request: ChatRequest) -> Any:
        """The request's fence, checked and compiled before admission (off the event loop); a
        constraint that cannot be served raises its 400 here."""
        if self.fence_builder is None:
            return None
        return await self.fence_builder.admit(request)

    async def _events(self, request: ChatRequest, prompt: list[int], max_tokens: int,
                      trace: Optional[RequestTrace] = None) -> AsyncIterator[Event]:
        fence = await self.admit_fence(request)
        if trace is not None and fence is not None:
            trace.mark("fenced")
        retention = await anyio.to_thread.run_sync(retention_of, self, request, prompt) if request.retention else None
        with SequenceRun(self.engine, HEARTBEAT_SECONDS) as run:  # cancels the sequence if we leave first
            seq = self._sequence(request, prompt, max_tokens, True, run.deliver, fence)
            seq.retention = retention
            seq.trace, seq.announce_plan = trace, True  # Started waits for the plan (milliseconds)
            run.submit(seq, self.submit)
            handler = _Run(self, request, seq)
            try:
                async for message in run:
                    for event in handler.events_for(message):
                        yield event  # a consumer may stop here, after Finished: the request is recorded
            finally:
                if not handler.recorded:  # the consumer went away before the sequence finished
                    handler.record("cancelled", 0)

    async def warm(self, request: ChatRequest) -> Usage:
        """Prefill only: the prompt's state is computed and left to the cache."""
        trace = self.new_trace(request)
        prompt = await self.prompt_tokens(request)
        self._check_fits(prompt)
        usage = Usage(prompt_tokens=len(prompt))
        with SequenceRun(self.engine) as run:  # cancels the sequence if we leave first
            seq = self._sequence(request, prompt, 0, False, run.deliver)
            seq.trace = trace
            run.submit(seq, self.submit)
            async for message in run:
                if isinstance(message, PrefillDone):
                    usage.cached_tokens_device, usage.cached_tokens_ssd = message.cached_device, message.cached_ssd
                    usage.replayed_tokens = message.replayed
        self.metrics.request_finished(run.done.reason, usage.prompt_tokens, usage.cached_tokens_device,
                                      usage.cached_tokens_ssd, 0, 0, 0)  # a request too: counted once
        if trace is not None:
            trace.finish(seq.plan, "warm")
            trace.prompt_tokens, trace.namespace, trace.prompt = usage.prompt_tokens, seq.namespace, prompt
            self.notify(trace)
        return self.reported(usage)

    def notify(self, trace: RequestTrace) -> None:
        """Hand a finished request's trace to every observer."""
        for observer in self.observers:
            try:
                observer.request_finished(trace)
            except Exception:  # an observer's bug must not fail the request it watched
                log.exception("request observer %r failed", observer)


class _Run:
    """Turns one sequence's engine messages into canonical events."""

    def __init__(self, pipeline: Pipeline, request: ChatRequest, seq: Sequence):
        self.pipeline = pipeline
        self.seq = seq
        scope = request.request_id or uuid.uuid4().hex
        start_in = pipeline.chat_format.parser_start(request)  # the prompt may end inside a reasoning block
        self.parser = pipeline.dialect.new_parser(request.tools, lambda i, name: call_id(scope, i, name),
                                                  start_in=start_in)
        self.detok = IncrementalDetokenizer(pipeline.runtime.tokenizer)
        self.stops = StopStringScanner(request.sampling.stop)
        self.logprobs = ContentLogprobs(pipeline.token_pieces) if request.sampling.logprobs else None
        self.usage = Usage(prompt_tokens=len(seq.prompt))
        self.issues: list[ParseIssue] = []
        self.tool_calls = 0
        self.open_calls: dict[int, str] = {}  # started calls not ended yet: index -> name
        self.output_went_on = False  # output followed a call that was left unfinished
        self.stop_sequence: Optional[str] = None
        self.started = time.monotonic()
        self.first_token_at: Optional[float] = None
        self.last_token_at: Optional[float] = None
        self.first_token_s: Optional[float] = None
        self.output: list[int] = []  # the generated token ids (for request observers)
        self.recorded = False  # the request is counted in the metrics once, when it ends
        self.announced = False  # Started was sent
        self.retained: tuple[tuple[int, str], ...] = ()  # (position, ttl) of the marks the cache keeps

    def events_for(self, message: Optional[EngineMessage]) -> list[Event]:
        """The events for one engine message (None: a quiet wait). ``Started`` comes with the cache
        plan, so it carries the usage's true input side; a heartbeat before it is dropped (the plan
        is made on the engine's next turn, final after any SSD read), and a sequence ended before
        planning starts uncached."""
        if isinstance(message, Planned):
            self.retained = message.retained
            return self._announce(message.cached_device, message.cached_ssd)
        if message is None:
            return [Heartbeat()] if self.announced else []
        return ([] if self.announced else self._announce(0, 0)) + self.handle(message)

    def _announce(self, cached_device: int, cached_ssd: int) -> list[Event]:
        self.announced = True
        self.usage.cached_tokens_device, self.usage.cached_tokens_ssd = cached_device, cached_ssd
        reported = self.reported()
        return [Started(len(self.seq.prompt), reported.cached_tokens_device, reported.cached_tokens_ssd,
                        reported.cache_written)]

    def reported(self) -> Usage:
        """The usage as clients see it (:meth:`Pipeline.reported`), with what its kept marks wrote."""
        usage = self.pipeline.reported(self.usage)
        usage.cache_written = written_by_ttl(self.retained, usage.cached_tokens)
        return usage

    def handle(self, message) -> list[Event]:
        if isinstance(message, PrefillDone):
            self.seq.mark("prefilled")
            self.usage.cached_tokens_device = message.cached_device
            self.usage.cached_tokens_ssd = message.cached_ssd
            self.usage.replayed_tokens = message.replayed
            self.retained = message.retained
            return []
        if isinstance(message, TokenOut):
            return self._token(message.token, message.logprobs)
        return self._done(message)

    def _token(self, token: int, logprobs: Optional[TokenLogprobs] = None) -> list[Event]:
        now = time.monotonic()
        metrics = self.pipeline.metrics
        if self.last_token_at is None:
            self.first_token_at = now
            self.first_token_s = now - self.started
            metrics.first_token(self.first_token_s)
        else:
            metrics.next_token(now - self.last_token_at)
        self.last_token_at = now
        self.usage.completion_tokens += 1
        self.output.append(token)
        if self.stop_sequence is not None:
            return []
        decided = self.detok.push(token)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs.token(token, logprobs, decided)
        text, hit = self.stops.push(decided)
        events = self._parse(self.parser.feed(text) if text else [])
        if hit is not None:
            self.stop_sequence = hit
            self.seq.stop_requested = True
        if any(isinstance(e, ReasoningDelta) for e in events):
            self.usage.reasoning_tokens += 1
        return events

    def _parse(self, events: list[Event]) -> list[Event]:
        for event in events:
            if self.open_calls and isinstance(event, (TextDelta, ToolCallStart)):
                self.output_went_on = True
            if isinstance(event, ToolCallStart):
                self.tool_calls += 1
                self.open_calls[event.index] = event.name
            elif isinstance(event, ToolCallEnd):
                self.open_calls.pop(event.index, None)
            elif isinstance(event, ParseIssue):
                self.issues.append(event)
            elif isinstance(event, TextDelta) and self.logprobs is not None:
                self.logprobs.attach(event)
        return events

    def _unfinished_call(self) -> str:
        """A call the parser started but could not complete (no ToolCallEnd) must not reach a client
        as one to run: the response ends with an error naming it (see ``StreamParser``). The last
        call, cut by the output limit, keeps ``length``: each protocol's own word for a cut output."""
        index, name = min(self.open_calls.items())
        message = f"tool call {index} ({name}) ended without valid arguments"
        self.issues.append(ParseIssue(message))
        return message

    def record(self, reason: str, interventions: int, error: Optional[str] = None) -> None:
        if self.recorded:
            return
        self.recorded = True
        if self.seq.trace is not None:
            self.observe(reason, error)
        self.pipeline.metrics.request_finished(
            reason, self.usage.prompt_tokens, self.usage.cached_tokens_device, self.usage.cached_tokens_ssd,
            self.usage.completion_tokens, interventions, len(self.issues))
        if reason not in ("error", "cancelled"):  # a client may resend this output as an assistant turn
            self.pipeline.tokenizer.register_output(self.seq.namespace, self.seq.prompt, self.output)

    def observe(self, reason: str, error: Optional[str]) -> None:
        trace = self.seq.trace
        trace.finish(self.seq.plan, reason, error)
        trace.prompt_tokens, trace.completion_tokens = self.usage.prompt_tokens, self.usage.completion_tokens
        trace.namespace, trace.prompt, trace.output = self.seq.namespace, self.seq.prompt, self.output
        trace.ttft_s = self.first_token_s
        trace.decode_tokens_per_s = decode_rate(self.usage.completion_tokens, self.first_token_at, self.last_token_at)
        self.pipeline.notify(trace)

    def _done(self, done: SequenceDone) -> list[Event]:
        events: list[Event] = []
        if self.stop_sequence is None:
            decided = self.detok.flush().rstrip("\ufffd")  # a character cut off by the limit
            if self.logprobs is not None:
                self.logprobs.text(decided)
            tail = self.stops.flush(decided)
            if tail:
                events += self._parse(self.parser.feed(tail))
        events += self._parse(self.parser.finish())
        reason = done.reason
        if self.stop_sequence is not None:
            reason = "stop_sequence"
        elif self.tool_calls and reason == "stop":
            reason = "tool_calls"
        error = None if done.error is None else str(getattr(done.error, "message", done.error))
        if done.error is not None:
            reason = "error"
        elif self.open_calls and reason != "cancelled" and (reason != "length" or self.output_went_on):
            reason, error = "error", self._unfinished_call()
        self.record(reason, done.guard_interventions, error)
        guard_stop = done.guard_stop and reason in ("stop", "tool_calls")
        if guard_stop:
            self.pipeline.metrics.guard_stopped()
            log.info("the loop guard ended a reply after %d tokens (%d interventions)",
                     self.usage.completion_tokens, done.guard_interventions)
        usage = self.reported()
        relaxed = list(self.seq.fence.relaxed) if self.seq.fence is not None else []
        events.append(Finished(reason, usage, self.stop_sequence, done.guard_interventions, self.issues, error,
                               relaxed, guard_stop))
        return events
