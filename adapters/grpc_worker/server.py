"""The gRPC listener's lifecycle: started on the HTTP server's event loop, stopped before the engine.

:class:`GrpcService` is what the plugin registers through ``register_services``. ``start`` binds
``[grpc] host:port`` (port 0: any free port, logged), attaches the KV-event publisher to the cache
manager and serves the :class:`~.servicer.Scheduler`; ``stop`` ends open streams within
``[grpc] stop_grace_s`` seconds and cancels what is left.
"""

from __future__ import annotations

import logging

import grpc
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc

from kvgate.adapters.grpc_worker.events import KvEventPublisher
from kvgate.adapters.grpc_worker.servicer import Scheduler

log = logging.getLogger("kvgate.grpc")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a long prompt's ids; the gateway sends up to this


class GrpcService:
    def __init__(self, ctx, settings):
        self.ctx, self.settings = ctx, settings
        engine = ctx.pipeline.engine
        self.publisher = KvEventPublisher(ctx.pipeline.namespace, engine.runtime.block_size)
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        cache = self.ctx.pipeline.engine.cache
        if hasattr(cache, "add_event_sink"):
            cache.add_event_sink(self.publisher)
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        self.server = grpc.aio.server(options=options)
        pb_grpc.add_SglangSchedulerServicer_to_server(Scheduler(self.ctx, self.publisher), self.server)
        address = f"{self.settings.host}:{self.settings.port}"
        self.port = self.server.add_insecure_port(address)
        if not self.port:
            raise RuntimeError(f"[grpc] could not bind {address}")
        await self.server.start()
        log.info("gRPC worker (SglangScheduler) listening on grpc://%s:%d", self.settings.host, self.port)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(self.settings.stop_grace_s)
            self.server = None
