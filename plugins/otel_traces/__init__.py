"""Plugin: OpenTelemetry traces of each request, exported over OTLP/HTTP (off by default).

Needs the ``otel`` extra (``pip install 'kvgate[otel]'``) and its own TOML section::

    [otel_traces]
    enabled = true
    endpoint = "http://127.0.0.1:4318/v1/traces"   # the collector's OTLP/HTTP traces URL
    service_name = "kvgate"

Each request becomes one span with a child span per stage (:mod:`.spans`), named and attributed
after the OpenTelemetry GenAI semantic conventions. The spans are built when the request ends, from
the host's :class:`kvgate.core.request_trace.RequestTrace`, and exported in batches on the SDK's
own thread.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import attrs

from kvgate.core.config_fields import FieldError
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl

log = logging.getLogger("kvgate")
SECTION = "otel_traces"
INSTALL_HINT = "pip install 'kvgate[otel]'"


def http_url(instance, attribute, value):
    if not value.startswith(("http://", "https://")):
        raise FieldError(attribute.name, f"must be an http:// or https:// URL (OTLP over HTTP), got {value!r}")


@attrs.define
class OtelTracesConfig:
    """The ``[otel_traces]`` section."""

    enabled: bool = False
    endpoint: str = attrs.field(default="http://127.0.0.1:4318/v1/traces", validator=http_url)
    service_name: str = "kvgate"


def otlp_processor(config: OtelTracesConfig) -> Any:
    """A batching span processor that posts to ``config.endpoint`` (OTLP over HTTP, protobuf)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(OTLPSpanExporter(endpoint=config.endpoint))


class OtelTraces:
    """The plugin; ``processor_for(config)`` gives the span processor (tests pass an in-memory one)."""

    def __init__(self, processor_for: Callable[[OtelTracesConfig], Any] = otlp_processor):
        self.processor_for = processor_for

    def build_observer(self, ctx) -> Optional[Any]:
        config = ctx.config.section(SECTION)
        if not config.enabled:
            return None
        try:
            from kvgate.plugins.otel_traces.spans import SpanWriter

            processor = self.processor_for(config)
        except ImportError as exc:
            raise ConfigError(f"[{SECTION}] enabled = true needs OpenTelemetry installed ({INSTALL_HINT}): "
                              f"{exc}") from None
        writer = SpanWriter.build(config.service_name, processor, ctx.model_name)
        log.info("OpenTelemetry traces: exporting to %s", config.endpoint)
        return writer

    @hookimpl
    def register_request_observers(self, register):
        register(SECTION, self.build_observer)

    @hookimpl
    def register_config_sections(self, register):
        register(SECTION, OtelTracesConfig)


PLUGIN = OtelTraces()  # the entry point's instance; the module's hooks delegate to it


@hookimpl
def register_request_observers(register):
    PLUGIN.register_request_observers(register)


@hookimpl
def register_config_sections(register):
    PLUGIN.register_config_sections(register)
