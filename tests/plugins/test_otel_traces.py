"""OpenTelemetry traces through the real server (issue 36): the ``otel_traces`` plugin, switched on in
its ``[otel_traces]`` section, with the SDK's in-memory exporter in place of OTLP.

A cold request and a cached follow-up over the same long system prompt and tool: each is one
``chat`` span with its stages as children, and the follow-up's spans carry the device tier and its
cached tokens. With the plugin's section absent (the default), no observer is built; with only the
section (no test exporter), the spans reach an OTLP/HTTP receiver listening on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import threading
import time

import httpx
import pytest

for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
    pytest.importorskip(module, reason="the otel extra is not installed (pip install 'kvgate[otel]')")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from kvgate.core.config import config_from_dict  # noqa: E402
from kvgate.core.plugins import build_plugin_manager  # noqa: E402
from kvgate.plugins.otel_traces import OtelTraces  # noqa: E402
from tests.core.cache.app_server import AppServer  # noqa: E402
from tests.core.cache.real_helpers import long_text  # noqa: E402
from tests.harness import free_port  # noqa: E402

pytestmark = pytest.mark.slow
SYSTEM = "You answer questions about the weather. " + long_text(23, 160)
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
STAGES = ["tokenize", "fence_build", "cache_lookup", "prefill", "decode"]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    exporter = InMemorySpanExporter()
    plugin = OtelTraces(processor_for=lambda config: SimpleSpanProcessor(exporter))
    pm = build_plugin_manager(disabled=["otel_traces"], extra_plugins=[("otel_traces_in_memory", plugin)])
    config = config_from_dict({"state_dir": str(tmp_path_factory.mktemp("otel")),
                               "cache": {"ssd_enabled": False, "cached_tokens_granularity": 1},
                               "otel_traces": {"enabled": True, "endpoint": "http://127.0.0.1:9/unused"}})
    with AppServer(config, pm) as server:
        yield server, exporter


def chat(server, question: str) -> dict:
    body = {"model": "smollm2", "max_tokens": 4, "temperature": 0, "tools": [TOOL],
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def request_spans(exporter: InMemorySpanExporter) -> list[tuple]:
    """(root span, its children by name) for every exported request, oldest first."""
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    return [(root, {s.name: s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id})
            for root in sorted(roots, key=lambda s: s.start_time)]


def test_a_cold_request_and_a_cached_follow_up_are_traced_with_their_cache_figures(traced):
    server, exporter = traced
    exporter.clear()
    cold_reply, warm_reply = chat(server, "Is it raining in Paris?"), chat(server, "Is it raining in Lyon?")
    cold, warm = cold_reply["usage"], warm_reply["usage"]
    (cold_root, cold_stages), (warm_root, warm_stages) = request_spans(exporter)

    for root, stages, reply in ((cold_root, cold_stages, cold_reply), (warm_root, warm_stages, warm_reply)):
        usage = reply["usage"]
        assert root.name == "chat smollm2" and root.kind.name == "SERVER"
        assert sorted(stages, key=lambda name: stages[name].start_time) == STAGES  # no restore: device only
        assert all(root.start_time <= s.start_time <= s.end_time <= root.end_time for s in stages.values())
        assert stages["prefill"].end_time <= stages["decode"].start_time
        attributes = root.attributes
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "smollm2"
        assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
        assert attributes["gen_ai.request.max_tokens"] == 4
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]
        assert list(attributes["gen_ai.response.finish_reasons"]) == [reply["choices"][0]["finish_reason"]]

    cold_lookup, warm_lookup = cold_stages["cache_lookup"].attributes, warm_stages["cache_lookup"].attributes
    assert cold_lookup["kvgate.cache.tier"] == "cold" and cold_lookup["kvgate.cache.cached_tokens"] == 0
    assert warm_lookup["kvgate.cache.tier"] == "device" and warm_lookup["kvgate.cache.hit_type"] != "miss"
    assert warm_lookup["kvgate.cache.cached_tokens_device"] == warm["kvgate"]["cached_tokens_device"] > 200
    assert warm_root.attributes["kvgate.cache.tier"] == "device"
    computed = warm["prompt_tokens"] - warm["prompt_tokens_details"]["cached_tokens"]
    assert warm_stages["prefill"].attributes["kvgate.prefill.computed_tokens"] == computed
    assert cold_stages["prefill"].attributes["kvgate.prefill.computed_tokens"] == cold["prompt_tokens"]


def test_no_observer_is_built_when_the_section_is_absent(tmp_path):
    # the installed plugins, otel_traces among them (off by default), less the cache page: its list of
    # recent requests is kept by a request observer of its own
    pm = build_plugin_manager(disabled=["cache_page"])
    assert "otel_traces" in dict(pm.list_name_plugin())
    with AppServer(config_from_dict({"state_dir": str(tmp_path)}), pm) as server:
        assert server.app.state.ctx.pipeline.observers == []  # so no request records a trace
        assert server.app.state.ctx.config.section("otel_traces").enabled is False
        assert chat(server, "Is it sunny in Nice?")["usage"]["completion_tokens"] > 0


class OtlpReceiver(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP traces endpoint: keeps every span name and attribute it is sent."""

    def __init__(self):
        self.spans: dict[str, dict] = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler):
                body = handler.rfile.read(int(handler.headers["Content-Length"]))
                self.keep(ExportTraceServiceRequest.FromString(body))
                handler.send_response(200)
                handler.send_header("Content-Type", "application/x-protobuf")
                handler.end_headers()

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)

    def keep(self, request: ExportTraceServiceRequest) -> None:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans[span.name] = {a.key: a.value for a in span.attributes}


def test_spans_reach_an_otlp_endpoint_with_only_the_config(tmp_path):
    receiver = OtlpReceiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    config = config_from_dict({"state_dir": str(tmp_path),
                               "otel_traces": {"enabled": True, "endpoint": endpoint}})
    try:
        with AppServer(config, build_plugin_manager()) as server:
            usage = chat(server, "Is it windy in Brest?")["usage"]
            deadline = time.monotonic() + 30  # the batch processor sends every 5 s
            while "chat smollm2" not in receiver.spans and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        receiver.shutdown()
    root = receiver.spans["chat smollm2"]
    assert root["gen_ai.usage.input_tokens"].int_value == usage["prompt_tokens"]
    assert root["gen_ai.operation.name"].string_value == "chat"
    assert receiver.spans["cache_lookup"]["kvgate.cache.tier"].string_value == "cold"
    assert {"tokenize", "prefill", "decode"} <= set(receiver.spans)


@pytest.mark.parametrize("section, message", [
    ({"enabled": True, "endpoint": "grpc://127.0.0.1:4317"}, "otel_traces.endpoint: must be an http:// or https://"),
    ({"enabled": True, "endpont": "http://127.0.0.1:4318/v1/traces"}, "otel_traces.endpont: unknown key"),
])
def test_a_bad_section_is_refused_before_anything_loads(section, message):
    from kvgate.core.config_sections import bind_plugin_sections
    from kvgate.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        bind_plugin_sections(config_from_dict({"otel_traces": section}), build_plugin_manager())
