"""A ``GenerateRequest`` checked and converted for the engine; a refusal is :class:`BadRequest`."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb

from kvgate.core.errors import KvgateError
from kvgate.core.types import ChatRequest, ResponseFormat, SamplingParams

REFUSED_CONSTRAINTS = {"regex": "a regex", "ebnf_grammar": "an EBNF grammar", "structural_tag": "a structural tag"}


class BadRequest(ValueError):
    """The request cannot run as sent (gRPC INVALID_ARGUMENT)."""


def sampling_of(params: pb.SamplingParams) -> SamplingParams:
    """kvgate's sampling parameters; proto3 zeros that mean "off" get their neutral value. A NaN
    or infinite value, or a seed that is not an unsigned 64-bit integer, is a BadRequest."""
    for name in FLOAT_PARAMS:
        if not math.isfinite(getattr(params, name)):
            raise BadRequest(f"sampling_params.{name} must be a finite number, not {getattr(params, name)}")
    seed = seed_of(params)
    return SamplingParams(
        temperature=max(params.temperature, 0.0), top_p=params.top_p if 0 < params.top_p <= 1 else 1.0,
        top_k=max(params.top_k, 0), min_p=max(params.min_p, 0.0), presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty, repetition_penalty=params.repetition_penalty or 1.0,
        seed=seed)


FLOAT_PARAMS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


def seed_of(params: pb.SamplingParams) -> Optional[int]:
    value = params.custom_params.fields.get("seed") if params.HasField("custom_params") else None
    if value is None:
        return None
    number = value.number_value
    if not (math.isfinite(number) and number.is_integer() and 0 <= number < 2 ** 64):
        raise BadRequest(f"custom_params.seed must be an integer in [0, 2**64), not {number}")
    return int(number)


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
