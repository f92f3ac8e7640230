"""The ``sglang.grpc.scheduler.SglangScheduler`` service over kvgate's engine (grpc.aio).

RPCs served: ``Generate`` (:mod:`.generate`), ``Abort``, ``HealthCheck``, ``GetModelInfo``,
``GetServerInfo``, ``GetLoads`` (:mod:`.info`), ``GetTokenizer`` (:mod:`.tokenizer_bundle`) and
``SubscribeKvEvents`` (:mod:`.events`); the others answer ``UNIMPLEMENTED``. Errors are gRPC
statuses: a request that cannot run is ``INVALID_ARGUMENT``, a full queue or a draining server
``UNAVAILABLE``, anything else ``INTERNAL`` (logged, never a traceback on the wire).
"""

from __future__ import annotations

import logging

import grpc
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc

from kvgate.adapters.grpc_worker.events import KvEventPublisher
from kvgate.adapters.grpc_worker.generate import generate
from kvgate.adapters.grpc_worker.request import BadRequest
from kvgate.adapters.grpc_worker.info import loads_message, model_info, server_message
from kvgate.adapters.grpc_worker.tokenizer_bundle import archive_chunks, tokenizer_archive
from kvgate.core.errors import KvgateError

log = logging.getLogger("kvgate.grpc")


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, BadRequest):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, KvgateError):
        if exc.status == 503:
            return grpc.StatusCode.UNAVAILABLE, exc.message
        if 400 <= exc.status < 500:
            return grpc.StatusCode.INVALID_ARGUMENT, exc.message
        return grpc.StatusCode.INTERNAL, exc.message
    return grpc.StatusCode.INTERNAL, "internal error"


class Scheduler(pb_grpc.SglangSchedulerServicer):
    def __init__(self, ctx, publisher: KvEventPublisher):
        self.ctx, self.publisher = ctx, publisher
        self.running: dict = {}  # request id -> Sequence, for Abort
        self.archive: tuple[bytes, str] | None = None

    async def Generate(self, request, context):
        try:
            async for message in generate(self.ctx.pipeline, request, self.running):
                yield message
        except Exception as exc:
            code, message = status_of(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.error("Generate %s failed: %s", request.request_id, exc, exc_info=exc)
            await context.abort(code, message)

    async def Abort(self, request, context):
        seq = self.running.get(request.request_id)
        if seq is None:
            return pb.AbortResponse(success=False, message=f"no running request {request.request_id!r}")
        self.ctx.pipeline.engine.cancel(seq)
        return pb.AbortResponse(success=True, message="aborted")

    async def HealthCheck(self, request, context):
        alive = self.ctx.pipeline.engine.is_serving()
        return pb.HealthCheckResponse(healthy=alive, message="ok" if alive else "the engine is not serving (stopped or draining)")

    async def GetModelInfo(self, request, context):
        return model_info(self.ctx)

    async def GetServerInfo(self, request, context):
        return server_message(self.ctx)

    async def GetLoads(self, request, context):
        return loads_message(self.ctx)

    async def GetTokenizer(self, request, context):
        if self.archive is None:
            self.archive = tokenizer_archive(self.ctx.pipeline.runtime)
        for data, digest in archive_chunks(*self.archive):
            yield common_pb2.GetTokenizerChunk(data=data, sha256=digest)

    async def SubscribeKvEvents(self, request, context):
        await context.send_initial_metadata(())  # the gateway waits 2 s for the stream's headers
        queue = self.publisher.subscribe(request.start_sequence_number)
        try:
            while True:
                yield await queue.get()
        finally:
            self.publisher.unsubscribe(queue)
