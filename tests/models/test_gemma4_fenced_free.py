"""A tiny random Gemma 4 served by the real server on its defaults: a required call whose parameters
declare no structure (a free object, a ``{}`` value, an array without ``items``) is fenced in Gemma's
own value syntax, not compact JSON, so the generated text (the request recorder's output ids,
decoded) is byte for byte what Google's chat template (tests/dialects/templates/gemma4.jinja)
writes for the parsed call, and the server's rendering of the next turn is the template's.

The checkpoint is test_gemma4_server.py's (SmolLM2's tokenizer with Gemma 4's markup added).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_gemma4_server import write_checkpoint

pytestmark = pytest.mark.slow

TEMPLATE = (Path(__file__).parents[1] / "dialects" / "templates" / "gemma4.jinja").read_text(encoding="utf-8")
PARAMETERS = {"type": "object", "required": ["meta", "payload", "tags"], "properties": {
    "meta": {"type": "object"}, "payload": {}, "tags": {"type": "array"}}}
TOOL = {"type": "function", "function": {"name": "store", "description": "Store data", "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "Store {'user': 'ann', 'ids': [3, 4]} tagged new."}]
NAME = "tiny-gemma4"


def official(messages: list, generation: bool) -> str:
    rendered, _ = render_jinja_template(conversations=[messages], tools=[TOOL], chat_template=TEMPLATE,
                                        add_generation_prompt=generation, bos_token="")
    return rendered[0]


def test_a_fenced_call_with_free_values_is_what_the_official_template_renders(tmp_path):
    _, tokenizer, _ = write_checkpoint(tmp_path / "model")
    record = tmp_path / "record.jsonl"
    settings = {"model": {"path": str(tmp_path / "model"), "name": NAME, "dtype": "fp32", "max_context": 1024},
                "server": {"record_path": str(record)}}
    body = {"model": NAME, "messages": ASK, "tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False,
            "max_tokens": 120, "temperature": 0}
    with ServerProcess(tmp_path / "server", settings=settings) as server:
        first = post(server, "/v1/chat/completions", body)
        assert first["choices"][0]["finish_reason"] == "tool_calls", first
        message = first["choices"][0]["message"]
        history_body = {"messages": ASK + [message], "tools": [TOOL], "add_generation_prompt": False}
        tokens = post(server, "/v1/tokenize", history_body)["tokens"]
        text = post(server, "/v1/detokenize", {"tokens": tokens})["prompt"]
    call = message["tool_calls"][0]
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments["meta"], dict) and isinstance(arguments["tags"], list)
    generation = json.loads(record.read_text().splitlines()[-1])
    output = tokenizer.decode(generation["output"], skip_special_tokens=False)
    assert output.startswith("<|tool_call>call:store{meta:{") and '{"' not in output, output
    decoded = {**message, "tool_calls": [{**call, "function": {"name": "store", "arguments": arguments}}]}
    history = official(ASK + [decoded], generation=False)
    call_text = output.removesuffix("<turn|>")
    assert history == official(ASK, generation=False) + "<|turn>model\n" + call_text + "<|tool_response>"
    assert text == history
