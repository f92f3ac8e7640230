"""A gRPC client of kvgate's SglangScheduler service, for tests (a real channel on 127.0.0.1)."""

from __future__ import annotations

import grpc
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc


def scheduler(port: int):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, pb_grpc.SglangSchedulerStub(channel)


def generate_request(ids, request_id="r1", stream=True, max_new_tokens=8, **sampling) -> pb.GenerateRequest:
    params = pb.SamplingParams(temperature=0.0, top_p=1.0, top_k=-1, repetition_penalty=1.0, **sampling)
    if max_new_tokens is not None:
        params.max_new_tokens = max_new_tokens
    return pb.GenerateRequest(request_id=request_id, tokenized=pb.TokenizedInput(input_ids=ids),
                              sampling_params=params, stream=stream)
