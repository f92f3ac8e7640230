"""One third-party plugin, defined here and registered like any installed one, that uses every hook
the host offers at once, on a real server over a real socket.

It brings its own model format (a ``.thirdparty`` file naming a GGUF), the default model (the
embedded one is disabled), a runtime that loads its format, a dialect (a renamed ChatML-JSON), a
chat format, a grammar backend (the installed one, counted), a schema preparer (the installed one,
noting each request it prepares), a generation guard, a request check, a config section its guard reads, an adapter
route, a service beside the server, a request observer, an ASGI wrapper (a response header of its
own) and a command.
Each is shown to be used: the request is answered through them, not around them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs
import click
import httpx
import pytest
from click.testing import CliRunner
from litestar import get

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.config import config_from_dict
from kvgate.core.errors import InvalidRequest
from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.runtime import ModelSource
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.models.embedded import embedded_gguf_path
from kvgate.models.formats import resolve_source
from kvgate.models.loading import load_runtime
from tests.core.cache.app_server import AppServer

pytestmark = pytest.mark.slow
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}


class ThirdPartyDialect(ChatmlJson):
    name = "thirdparty_json"

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        return 0  # served only when configured by name


class CountingFormat(JinjaChatFormat):
    name = "thirdparty_format"

    def __init__(self, runtime, dialect, seen):
        super().__init__(runtime.chat_template, dialect, runtime.special_tokens)
        self.seen = seen

    def render(self, request, add_generation_prompt=True):
        self.seen["renders"] += 1
        return super().render(request, add_generation_prompt)


class RecordingGuard:
    def __init__(self, seen, tokens=None):
        self.seen, self.tokens = seen, tokens if tokens is not None else []
        seen["guards"].append(self.tokens)

    def banned(self):
        return []

    def forced(self):
        return []

    def ends_reply(self):
        return False

    def advance(self, token):
        self.tokens.append(token)

    def clone(self):
        copy = RecordingGuard.__new__(RecordingGuard)
        copy.seen, copy.tokens = self.seen, list(self.tokens)
        return copy


@attrs.define
class ThirdPartySection:
    guard: bool = False


class ThirdParty:
    def __init__(self, model_file: Path, seen: dict):
        self.model_file, self.seen = model_file, seen

    @hookimpl
    def register_model_formats(self, register):
        def read(path):
            if not str(path).endswith(".thirdparty"):
                return None
            return ModelSource(path=str(path), kind="thirdparty", architecture="thirdparty_llama")
        register("thirdparty", read)

    @hookimpl
    def register_default_models(self, register):
        register("thirdparty_default", lambda: str(self.model_file))

    @hookimpl
    def register_model_runtimes(self, register):
        def load(source, model_config, engine_config, cache_dir):
            self.seen["loaded"] = source.path
            gguf = resolve_source(Path(source.path).read_text().strip())
            return load_runtime(gguf, model_config, engine_config, cache_dir)
        register("thirdparty_runtime", RuntimeSpec(load=load, other_architectures={"thirdparty": ("thirdparty_llama",)}))

    @hookimpl
    def register_dialects(self, register):
        register("thirdparty_json", ThirdPartyDialect)

    @hookimpl
    def register_chat_formats(self, register):
        register("thirdparty_format", lambda runtime, dialect: CountingFormat(runtime, dialect, self.seen))

    @hookimpl
    def register_grammar_backends(self, register):
        installed = collect(build_plugin_manager(), "register_grammar_backends", "grammar backend")
        build_installed = installed.get(installed.names()[0])

        def build(info):
            self.seen["backends"] += 1
            return build_installed(info)
        register("thirdparty_grammar", build)

    @hookimpl
    def register_schema_preparers(self, register):
        installed = collect(build_plugin_manager(), "register_schema_preparers", "schema preparer")
        build_installed = installed.get(installed.names()[0])
        seen = self.seen

        class NotingPreparer:
            def __init__(self, backend, fence_config):
                self.inner = build_installed(backend, fence_config)

            def check_limits(self, request):
                self.inner.check_limits(request)

            def prepare_request(self, request):
                seen["prepared"] += 1
                request, relaxed = self.inner.prepare_request(request)
                return request, relaxed + ["prepared by thirdparty_schemas"]
        register("thirdparty_schemas", NotingPreparer)

    @hookimpl
    def register_request_checks(self, register):
        class NoForbiddenTool:
            def __init__(self, dialect, tokenizer):
                self.dialect = dialect

            def check_request(self, request):
                if any(tool.name == "thirdparty_forbidden" for tool in request.tools):
                    raise InvalidRequest(f"thirdparty_forbidden is not served with {self.dialect.name}", param="tools")
        register("thirdparty_check", NoForbiddenTool)

    @hookimpl
    def register_config_sections(self, register):
        register("thirdparty", ThirdPartySection)

    @hookimpl
    def register_generation_guards(self, register):
        def build(setup):
            return RecordingGuard(self.seen) if setup.config.section("thirdparty").guard else None
        register("thirdparty_guard", build)

    @hookimpl
    def register_adapters(self, register):
        @get("/thirdparty/model", sync_to_thread=False)
        def served_model() -> dict:
            pipeline = self.seen["ctx"].pipeline
            return {"model": self.seen["ctx"].config.model.name, "services": self.seen["service"],
                    "dialect": pipeline.dialect.name, "chat_format": pipeline.chat_format.name}

        def build_routes(ctx):
            self.seen["ctx"] = ctx
            return [served_model]
        register("thirdparty_routes", build_routes)

    @hookimpl
    def register_services(self, register):
        seen = self.seen

        class Service:
            async def start(self):
                seen["service"].append("started")

            async def stop(self):
                seen["service"].append("stopped")
        register("thirdparty_service", lambda ctx: Service())

    @hookimpl
    def register_request_observers(self, register):
        class Observer:
            def request_finished(observer, trace):
                self.seen["traces"].append(trace)
        register("thirdparty_observer", lambda ctx: Observer())

    @hookimpl
    def register_asgi_wrappers(self, register):
        def wrap(app):
            async def wrapped(scope, receive, send):
                async def send_marked(message):
                    if message["type"] == "http.response.start":
                        headers = [*message.get("headers", []), (b"x-thirdparty", b"wrapped")]
                        message = {**message, "headers": headers}
                    await send(message)
                self.seen["wrapped"].append(scope.get("path"))
                await app(scope, receive, send_marked)
            return wrapped
        register("thirdparty_wrapper", lambda ctx: wrap)

    @hookimpl
    def register_commands(self, cli):
        @cli.command("thirdparty-hello")
        def hello():
            click.echo("hello from a third party")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thirdparty")
    model_file = folder / "model.thirdparty"
    model_file.write_text(embedded_gguf_path())
    seen = {"renders": 0, "backends": 0, "prepared": 0, "guards": [], "traces": [], "service": [], "loaded": None,
            "wrapped": []}
    pm = build_plugin_manager(disabled=["embedded_model"], extra_plugins=[("thirdparty", ThirdParty(model_file, seen))])
    config = config_from_dict({"state_dir": str(folder / "state"),
                               "model": {"dialect": "thirdparty_json", "chat_format": "thirdparty_format"},
                               "fence": {"backend": "thirdparty_grammar", "schema_preparer": "thirdparty_schemas"},
                               "cache": {"ssd_enabled": False},
                               "thirdparty": {"guard": True}})
    with AppServer(config, pm) as server:
        yield server, seen
    assert seen["service"] == ["started", "stopped"]


def chat(server, **extra) -> dict:
    body = {"model": "smollm2", "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}], **extra}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_model_comes_from_the_plugins_format_default_and_runtime(served):
    server, seen = served
    assert seen["loaded"] is not None and seen["loaded"].endswith("model.thirdparty")
    served_model = httpx.get(server.base_url + "/thirdparty/model", timeout=30).json()
    assert served_model["dialect"] == "thirdparty_json" and served_model["chat_format"] == "thirdparty_format"


def test_a_request_runs_through_its_format_guard_and_observer(served):
    server, seen = served
    renders, guards, traces = seen["renders"], len(seen["guards"]), len(seen["traces"])
    reply = chat(server)
    assert seen["renders"] > renders
    assert len(seen["guards"]) > guards
    generated = reply["usage"]["completion_tokens"]
    assert generated > 0 and max(len(tokens) for tokens in seen["guards"][guards:]) == generated
    deadline = time.monotonic() + 10  # the observer runs on the event loop as the request ends
    while len(seen["traces"]) == traces and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(seen["traces"]) == traces + 1
    assert seen["traces"][-1].completion_tokens == generated == len(seen["traces"][-1].output)
    assert len(seen["traces"][-1].prompt) == reply["usage"]["prompt_tokens"] and seen["traces"][-1].namespace


def test_every_request_passes_through_its_asgi_wrapper(served):
    server, seen = served
    reply = httpx.get(server.base_url + "/thirdparty/model", timeout=30)
    assert reply.headers["x-thirdparty"] == "wrapped" and seen["wrapped"][-1] == "/thirdparty/model"
    assert chat_reply_headers(server)["x-thirdparty"] == "wrapped"


def chat_reply_headers(server) -> httpx.Headers:
    body = {"model": "smollm2", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300).headers


def test_a_required_tool_call_is_fenced_by_the_plugins_grammar_backend(served):
    server, seen = served
    reply = chat(server, tools=[TOOL], tool_choice="required", max_tokens=80)
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and isinstance(json.loads(call["arguments"]), dict)
    assert seen["backends"] >= 1


def test_a_tool_schema_is_prepared_by_the_plugins_schema_preparer(served):
    server, seen = served
    prepared = seen["prepared"]
    reply = chat(server, tools=[TOOL], tool_choice="required", max_tokens=80)
    assert seen["prepared"] > prepared
    assert "prepared by thirdparty_schemas" in reply["kvgate"]["relaxed_schema"]


def test_its_adapter_route_and_service_run_in_the_server(served):
    server, seen = served
    reply = httpx.get(server.base_url + "/thirdparty/model", timeout=30)
    assert reply.status_code == 200
    assert reply.json()["model"] == "smollm2" and reply.json()["services"] == ["started"]


def test_its_command_joins_the_cli():
    @click.group()
    def cli():
        pass

    pm = build_plugin_manager(load_entry_points=False, extra_plugins=[("thirdparty", ThirdParty(Path("x"), {}))])
    pm.hook.register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["thirdparty-hello"])
    assert result.exit_code == 0 and "hello from a third party" in result.output


def test_its_request_check_refuses_a_request_before_it_is_rendered(served):
    server, seen = served
    renders = seen["renders"]
    forbidden = {"type": "function", "function": {"name": "thirdparty_forbidden", "parameters": {"type": "object"}}}
    body = {"model": "smollm2", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], "tools": [forbidden]}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "thirdparty_forbidden is not served with thirdparty_json"
    assert seen["renders"] == renders
