"""Plugin: kvgate as an SMG gRPC worker (the ``sglang.grpc.scheduler.SglangScheduler`` service).

With ``[grpc] enabled = true`` the server also listens for gRPC on ``[grpc] host:port``, in the
same process and event loop as the HTTP server, over the same engine and prefix cache. SMG's
gateway then renders, tokenizes (with its own tokenizer cache, from ``GetTokenizer``), parses
tools and reasoning, and routes on the KV events this worker streams (``SubscribeKvEvents``).
Needs the ``grpc`` extra (``grpcio``, ``smg-grpc-proto``).

Settings (``[grpc]``): ``enabled`` (false), ``host`` ("127.0.0.1"), ``port`` (50051; 0 picks a free
one), ``stop_grace_s`` (2.0: how long shutdown lets open streams finish).
"""

from __future__ import annotations

import attrs

from kvgate.core.config_fields import non_negative
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl

SECTION = "grpc"


@attrs.define
class GrpcConfig:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = attrs.field(default=50051, validator=non_negative)
    stop_grace_s: float = attrs.field(default=2.0, validator=non_negative)


def build_service(ctx):
    settings = ctx.config.section(SECTION)
    if not settings.enabled:
        return None
    try:
        from kvgate.adapters.grpc_worker.server import GrpcService
    except ImportError as exc:
        raise ConfigError(f"grpc.enabled: the gRPC worker needs the grpc extra "
                          f"(pip install 'kvgate[grpc]'): {exc}") from None
    return GrpcService(ctx, settings)


@hookimpl
def register_config_sections(register):
    register(SECTION, GrpcConfig)


@hookimpl
def register_services(register):
    register("grpc_worker", build_service)
