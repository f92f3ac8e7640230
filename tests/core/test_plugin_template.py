"""The plugin template is a real third-party distribution: installed, the host picks it up."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import jsonschema
import pytest

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall
from tests.harness import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def installed_template(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT / "plugin_template")], check=True)
    return target


def test_kvgate_plugins_lists_the_template(installed_template):
    env = {**os.environ, "PYTHONPATH": str(installed_template)}
    out = subprocess.run([sys.executable, "-m", "kvgate.core.cli", "plugins", "--json", "--no-model"],
                         env=env, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    row = next(r for r in report["plugins"] if r["name"] == "toy_dialect")
    assert row["distribution"] == "kvgate-toy-dialect 0.1.0"
    assert report["registries"]["dialect"]["toy"] == "toy_dialect"


def test_host_renders_and_parses_with_the_template_dialect(installed_template, monkeypatch):
    monkeypatch.syspath_prepend(str(installed_template))
    pm = build_plugin_manager()
    dialect = collect(pm, "register_dialects", "dialect").get("toy")()
    request = ChatRequest(model="m", tools=[Tool("lookup")], messages=[
        Message("user", "find x"),
        Message("assistant", "", tool_calls=[ToolCall("1", "lookup", '{"q": "x"}')]),
    ])
    prompt = JinjaChatFormat(CHATML, dialect, {}).render(request)
    assert 'Tools: ["lookup"]' in prompt and 'CALL lookup {"q": "x"}\n' in prompt
    events = dialect.new_parser([], lambda i, n: f"id{i}").feed('hi\nCALL lookup {"q": 1}\n')
    assert [type(e).__name__ for e in events] == ["TextDelta", "ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd"]


@pytest.mark.slow
def test_real_server_fences_a_required_call_in_the_template_dialect(installed_template, tmp_path):
    settings = {"model": {"dialect": "toy", "max_context": 512}}
    env = {"PYTHONPATH": str(installed_template)}
    body = {"model": "smollm2", "max_tokens": 64, "temperature": 0, "tool_choice": "required",
            "parallel_tool_calls": False,
            "messages": [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city",
                                                        "parameters": WEATHER}}]}
    with ServerProcess(tmp_path, settings=settings, env=env) as server:
        reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
        assert "dialect toy" in server.log()
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
