"""``Generate``: one ``GenerateRequest`` (token ids from the gateway) run on the engine.

The gateway renders the chat template, tokenizes, and parses tools and reasoning itself, so the
request goes to the engine directly, not through the pipeline's dialects. Frames, one
``GenerateResponse`` each:

- ``stream: true``: one ``chunk`` per generated token (``token_ids`` the new id; cumulative
  ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``), then ``complete`` with
  ``finish_reason`` and the counts (``output_ids`` empty: the chunks carried them);
- ``stream: false``: ``complete`` only, with every ``output_ids``.

``finish_reason`` is ``"stop"`` (an EOS or ``stop_token_ids`` id, or the fence's end), ``"length"``
or ``"abort"`` (``Abort`` named the request). The worker stops on the model's EOS ids itself
(the gateway sends none) unless ``ignore_eos``; stop *strings* are the gateway's to match. A
``json_schema`` constraint is enforced by kvgate's fence; ``regex``, ``ebnf_grammar`` and
``structural_tag`` are refused. Refusals are gRPC ``INVALID_ARGUMENT`` (:class:`BadRequest`)
before anything runs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Optional

import attrs

from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb

from kvgate.core.engine.sampling import make_generator
from kvgate.core.engine.sequence import PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.errors import KvgateError
from kvgate.core.types import ChatRequest, ResponseFormat, SamplingParams

REFUSED_CONSTRAINTS = {"regex": "a regex", "ebnf_grammar": "an EBNF grammar", "structural_tag": "a structural tag"}


class BadRequest(ValueError):
    """The request cannot run as sent (gRPC INVALID_ARGUMENT)."""


def sampling_of(params: pb.SamplingParams) -> SamplingParams:
    """kvgate's sampling parameters; proto3 zeros that mean "off" get their neutral value."""
    seed = params.custom_params.fields.get("seed") if params.HasField("custom_params") else None
    return SamplingParams(
        temperature=max(params.temperature, 0.0), top_p=params.top_p if 0 < params.top_p <= 1 else 1.0,
        top_k=max(params.top_k, 0), min_p=max(params.min_p, 0.0), presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty, repetition_penalty=params.repetition_penalty or 1.0,
        seed=int(seed.number_value) if seed is not None else None)


def prompt_ids(request: pb.GenerateRequest, runtime) -> list[int]:
    ids = list(request.tokenized.input_ids)
    info = runtime.info
    if not ids:
        raise BadRequest("tokenized.input_ids is empty: a prompt needs at least one token")
    bad = next((t for t in ids if t >= info.vocab_size), None)
    if bad is not None:
        raise BadRequest(f"token id {bad} is outside the vocabulary ({info.vocab_size} ids)")
    if len(ids) >= info.max_context:
        raise BadRequest(f"the prompt has {len(ids)} tokens; this model's context is {info.max_context}")
    return ids


def token_budget(params: pb.SamplingParams, prompt: int, max_context: int, default: int) -> int:
    room = max_context - prompt
    if not params.HasField("max_new_tokens"):
        return min(default, room) if default else room
    if params.max_new_tokens > room:
        raise BadRequest(f"max_new_tokens {params.max_new_tokens} plus the prompt's {prompt} tokens exceeds this "
                         f"model's context of {max_context} tokens")
    return params.max_new_tokens


def check_options(request: pb.GenerateRequest) -> None:
    params = request.sampling_params
    if params.n > 1:
        raise BadRequest("n > 1 is not supported: send one request per sample")
    if request.return_logprob or request.top_logprobs_num:
        raise BadRequest("logprobs are not supported by kvgate's gRPC worker")
    if request.mm_inputs.ByteSize() or request.input_embeds:
        raise BadRequest("multimodal inputs and input embeddings are not supported")
    kind = params.WhichOneof("constraint")
    if kind in REFUSED_CONSTRAINTS:
        raise BadRequest(f"constraint {kind} is not supported: kvgate's fences take a JSON schema, not "
                         f"{REFUSED_CONSTRAINTS[kind]} (send json_schema)")


async def fence_of(pipeline, params: pb.SamplingParams) -> Any:
    """The request's fence for a ``json_schema`` constraint (None without one)."""
    if params.WhichOneof("constraint") != "json_schema":
        return None
    try:
        schema = json.loads(params.json_schema)
    except ValueError as exc:
        raise BadRequest(f"constraint json_schema is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise BadRequest("constraint json_schema must be a JSON object")
    if pipeline.fence_builder is None or not pipeline.config.fence.enabled:
        raise BadRequest("constraint json_schema needs fences, which are off on this worker ([fence] enabled)")
    request = ChatRequest(model="", messages=[], response_format=ResponseFormat(type="json_schema", schema=schema))
    try:
        return await pipeline.admit_fence(request)
    except KvgateError as exc:
        raise BadRequest(f"constraint json_schema: {exc.message}") from None


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
          stream: bool = True) -> pb.GenerateResponse:
    if token is not None:
        return pb.GenerateResponse(request_id=request_id, chunk=pb.GenerateStreamChunk(
            token_ids=[token], prompt_tokens=counts.prompt, completion_tokens=len(counts.output),
            cached_tokens=counts.cached))
    return pb.GenerateResponse(request_id=request_id, complete=pb.GenerateComplete(
        output_ids=[] if stream else counts.output, finish_reason=reason, prompt_tokens=counts.prompt,
        completion_tokens=len(counts.output), cached_tokens=counts.cached))


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
    budget = token_budget(params, len(prompt), runtime.info.max_context, pipeline.config.engine.default_max_tokens)
    fence = await fence_of(pipeline, params)
    queue: asyncio.Queue = asyncio.Queue()
    loop = asyncio.get_running_loop()
    stops = frozenset() if params.ignore_eos else frozenset(runtime.info.eos_token_ids) | set(params.stop_token_ids)
    sampling = sampling_of(params)
    seq = Sequence(prompt=prompt, params=sampling, max_tokens=budget, stop_token_ids=stops, fence=fence,
                   deliver=lambda m: loop.call_soon_threadsafe(queue.put_nowait, m), namespace=pipeline.namespace,
                   generator=make_generator(sampling.seed))
    request_id = request.request_id or f"kvgate-{seq.id}"
    engine.submit(seq)  # Overloaded when the queue is full or the server drains
    running[request_id] = seq
    counts, done = Counts(prompt=len(prompt)), None
    try:
        while done is None:
            message = await queue.get()
            if isinstance(message, PrefillDone):
                counts.cached_device, counts.cached_ssd = message.cached_device, message.cached_ssd
            elif isinstance(message, TokenOut):
                counts.output.append(message.token)
                if request.stream:
                    yield frame(request_id, counts, message.token)
            else:
                done = message
    finally:
        running.pop(request_id, None)
        if done is None:  # the client went away: stop computing for it
            engine.cancel(seq)
    finish(pipeline, done, counts, fence)
    reason = "abort" if done.reason == "cancelled" else done.reason
    yield frame(request_id, counts, reason=reason, stream=request.stream)


def finish(pipeline, done: SequenceDone, counts: Counts, fence: Any) -> None:
    """Count the request in the worker's metrics; re-raise the engine's error, if any."""
    reason = "error" if done.error is not None else done.reason
    pipeline.metrics.request_finished(reason, counts.prompt, counts.cached_device, counts.cached_ssd,
                                      len(counts.output), done.guard_interventions, 0)
    if done.error is not None:
        raise done.error
