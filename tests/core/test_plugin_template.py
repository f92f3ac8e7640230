"""The plugin template is a real third-party distribution: installed, the host picks it up."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvgate.core.chat_format import JinjaChatFormat
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall

ROOT = Path(__file__).resolve().parents[2]
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
