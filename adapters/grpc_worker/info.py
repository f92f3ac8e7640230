"""The worker's self-description for SMG's registration: model, server and load messages.

Every value is read from the running server (the same numbers as the HTTP probe routes of
:mod:`kvgate.adapters.worker_info`).
"""

from __future__ import annotations

import json
import time

from google.protobuf import struct_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb

from kvgate.adapters.worker_info import STARTED, kvgate_version, loads, server_info


def model_info(ctx) -> pb.GetModelInfoResponse:
    info, pipeline = ctx.pipeline.runtime.info, ctx.pipeline
    path = ctx.config.model.path or ctx.model_name
    defaults = json.dumps(pipeline.sampling_defaults.values) if pipeline.sampling_defaults.values else ""
    return pb.GetModelInfoResponse(
        model_path=path, tokenizer_path=path, is_generation=True, served_model_name=ctx.model_name,
        max_context_length=info.max_context, vocab_size=info.vocab_size, supports_vision=info.has_vision,
        model_type=info.architecture, eos_token_ids=list(info.eos_token_ids),
        bos_token_id=info.bos_token_id if info.bos_token_id is not None else -1,
        max_req_input_len=info.max_context - 1, architectures=[f"{info.architecture.capitalize()}ForCausalLM"],
        weight_version=pipeline.runtime.fingerprint[:16], default_sampling_params_json=defaults)


def server_message(ctx) -> pb.GetServerInfoResponse:
    values = server_info(ctx)
    args = struct_pb2.Struct()
    args.update({key: value for key, value in values.items() if isinstance(value, (int, float, str))})
    return pb.GetServerInfoResponse(
        server_args=args, active_requests=ctx.pipeline.engine.load(), is_paused=False,
        uptime_seconds=time.time() - STARTED, sglang_version=f"kvgate {kvgate_version()}", server_type="grpc",
        max_total_num_tokens=values["max_total_num_tokens"])


def loads_message(ctx) -> pb.GetLoadsResponse:
    row = loads(ctx)["loads"][0]
    engine = ctx.pipeline.engine
    block = engine.runtime.block_size
    used = (row["kv_blocks_total"] - row["kv_blocks_free"]) * block
    load = pb.SchedulerLoad(
        dp_rank=0, num_running_reqs=row["num_running_reqs"], num_waiting_reqs=row["num_waiting_reqs"],
        num_total_reqs=row["num_in_flight_reqs"], num_used_tokens=used,
        max_total_num_tokens=row["kv_blocks_total"] * block, token_usage=row["token_usage"],
        utilization=row["num_running_reqs"] / max(ctx.config.engine.max_batch, 1),
        max_running_requests=ctx.config.engine.max_batch)
    return pb.GetLoadsResponse(
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), version=kvgate_version(), dp_rank_count=1,
        loads=[load], aggregate=pb.AggregateMetrics(
            total_running_reqs=load.num_running_reqs, total_waiting_reqs=load.num_waiting_reqs,
            total_reqs=load.num_total_reqs, avg_token_usage=load.token_usage, avg_utilization=load.utilization))
