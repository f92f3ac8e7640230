"""``Generate``: one ``GenerateRequest`` (token ids from the gateway) run on the engine.

The gateway renders the chat template, tokenizes, and parses tools and reasoning itself, so the
request goes to the engine directly, not through the pipeline's dialects. Frames, one
``GenerateResponse`` each:

- ``stream: true``: one ``chunk`` per generated token (``token_ids`` the new id; cumulative
  ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``), then ``complete`` with
  ``finish_reason`` and the counts (``output_ids`` empty: the chunks carried them);
- ``stream: false``: ``complete`` only, with every ``output_ids``.

``finish_reason`` is ``"stop"`` (an EOS or ``stop_token_ids`` id, a ``stop`` string -- named in
``matched_stop_str`` -- or the fence's end), ``"length"`` or ``"abort"`` (``Abort`` named the
request). The worker stops on the model's EOS ids itself (the gateway sends none) unless
``ignore_eos``. A stop string ends generation at the token that completes it; that token is still
sent (the gateway decodes the ids and trims the text). A ``json_schema`` constraint is enforced
by kvgate's fence; ``regex``, ``ebnf_grammar`` and ``structural_tag`` are refused. Refusals are
gRPC ``INVALID_ARGUMENT`` (:class:`~.request.BadRequest`, from :mod:`.request`) before anything
runs.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Optional

import attrs

from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb

from kvgate.adapters.grpc_worker.request import (BadRequest, check_options, fence_of, prompt_ids, sampling_of,
                                                token_budget)
from kvgate.core.pipeline.detokenizer import IncrementalDetokenizer
from kvgate.core.engine.sampling import make_generator
from kvgate.core.engine.sequence import PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.engine.sequence_run import SequenceRun
from kvgate.core.pipeline.stop_strings import StopStringScanner


class StopWatch:
    """Finds the first ``stop`` string in the decoded output (nothing to do without one)."""

    def __init__(self, tokenizer, stops):
        stops = [s for s in stops if s]
        self.scanner = StopStringScanner(stops) if stops else None
        self.detok = IncrementalDetokenizer(tokenizer) if stops else None
        self.hit: Optional[str] = None

    def push(self, token: int) -> bool:
        """Whether ``token`` completed a stop string."""
        if self.scanner is None or self.hit is not None:
            return False
        _, self.hit = self.scanner.push(self.detok.push(token))
        return self.hit is not None


@attrs.define
class Counts:
    prompt: int
    cached_device: int = 0
    cached_ssd: int = 0
    output: list[int] = attrs.field(factory=list)

    @property
    def cached(self) -> int:
        return self.cached_device + self.cached_ssd


def frame(request_id: str, counts: Counts, token: Optional[int] = None, reason: str = "",
          stream: bool = True, stop: Optional[str] = None) -> pb.GenerateResponse:
    if token is not None:
        return pb.GenerateResponse(request_id=request_id, chunk=pb.GenerateStreamChunk(
            token_ids=[token], prompt_tokens=counts.prompt, completion_tokens=len(counts.output),
            cached_tokens=counts.cached))
    complete = pb.GenerateComplete(output_ids=[] if stream else counts.output, finish_reason=reason,
                                   prompt_tokens=counts.prompt, completion_tokens=len(counts.output),
                                   cached_tokens=counts.cached)
    if stop is not None:
        complete.matched_stop_str = stop
    return pb.GenerateResponse(request_id=request_id, complete=complete)


async def generate(pipeline, request: pb.GenerateRequest, running: dict[str, Sequence]
                   ) -> AsyncIterator[pb.GenerateResponse]:
    """The frames of ``request``; ``running`` maps request ids to sequences for ``Abort``.

    Raises BadRequest before the first frame; an engine error ends the stream with the
    KvgateError it carried (the servicer maps it to a gRPC status).
    """
    runtime, engine = pipeline.runtime, pipeline.engine
    check_options(request)
    params = request.sampling_params
    prompt = prompt_ids(request, runtime)
    budget = pipeline.output_cap.clamped(token_budget(params, len(prompt), runtime.info.max_context,
                                                      pipeline.config.engine.default_max_tokens))
    fence = await fence_of(pipeline, params)
    stops = frozenset() if params.ignore_eos else frozenset(runtime.info.eos_token_ids) | set(params.stop_token_ids)
    sampling = sampling_of(params)
    if request.request_id in running:  # Abort names a request by its id: two would be ambiguous
        raise BadRequest(f"request_id {request.request_id!r} is already running")
    with SequenceRun(engine) as run:  # cancels the sequence if the client goes away first
        seq = Sequence(prompt=prompt, params=sampling, max_tokens=budget, stop_token_ids=stops, fence=fence,
                       deliver=run.deliver, namespace=pipeline.namespace, generator=make_generator(sampling.seed))
        request_id = request.request_id or f"kvgate-{seq.id}"
        run.submit(seq)  # Overloaded when the queue is full or the server drains
        running[request_id] = seq
        counts, watch = Counts(prompt=len(prompt)), StopWatch(runtime.tokenizer, params.stop)
        try:
            async for message in run:
                if isinstance(message, PrefillDone):
                    counts.cached_device, counts.cached_ssd = message.cached_device, message.cached_ssd
                elif isinstance(message, TokenOut) and watch.hit is None:  # none is sent after a stop string
                    counts.output.append(message.token)
                    seq.stop_requested = watch.push(message.token)
                    if request.stream:
                        yield frame(request_id, counts, message.token)
        finally:
            running.pop(request_id, None)
    done = run.done
    finish(pipeline, done, counts, fence)
    reason = "stop" if watch.hit is not None else "abort" if done.reason == "cancelled" else done.reason
    yield frame(request_id, counts, reason=reason, stream=request.stream, stop=watch.hit)


def finish(pipeline, done: SequenceDone, counts: Counts, fence: Any) -> None:
    """Count the request in the worker's metrics; re-raise the engine's error, if any."""
    reason = "error" if done.error is not None else done.reason
    pipeline.metrics.request_finished(reason, counts.prompt, counts.cached_device, counts.cached_ssd,
                                      len(counts.output), done.guard_interventions, 0)
    if done.error is not None:
        raise done.error
