"""A tiny random Gemma 4 served by the real server on its defaults (the ``gemma4`` dialect and chat
format, the checkpoint shipping no template): a required call whose arguments nest objects and an
array is fenced in Gemma's own value syntax, parses back to arguments valid against the schema, and
is byte for byte what Google's chat template (tests/dialects/templates/gemma4.jinja) renders for it:
the generated text (the request recorder's output ids, decoded) is what the template writes for the
parsed call after the prompt, and the server's rendering of the next turn is the template's.

The checkpoint is test_gemma4_server.py's (SmolLM2's tokenizer with Gemma 4's markup added).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.harness import ServerProcess
from tests.models.served import post
from tests.models.test_gemma4_server import write_checkpoint

pytestmark = pytest.mark.slow

TEMPLATE = (Path(__file__).parents[1] / "dialects" / "templates" / "gemma4.jinja").read_text(encoding="utf-8")
STOP = {"type": "object", "required": ["city", "nights"], "properties": {
    "city": {"type": "string", "enum": ["Paris", "Lyon", "Oslo"]}, "nights": {"type": "integer", "minimum": 1,
                                                                             "maximum": 9}}}
PARAMETERS = {"type": "object", "required": ["stops", "when"], "additionalProperties": False, "properties": {
    "stops": {"type": "array", "minItems": 1, "maxItems": 2, "items": STOP},
    "when": {"type": "object", "required": ["month"], "properties": {
        "month": {"type": "string", "enum": ["may", "june"]}, "flexible": {"type": "boolean"}}}}}
TOOL = {"type": "function", "function": {"name": "plan_trip", "description": "Plan a trip", "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "Plan a trip to Lyon and Oslo in May."}]
NAME = "tiny-gemma4"


def official(messages: list, generation: bool, tool: dict = TOOL) -> str:
    rendered, _ = render_jinja_template(conversations=[messages], tools=[tool], chat_template=TEMPLATE,
                                        add_generation_prompt=generation, bos_token="")
    return rendered[0]


def served_call(tmp_path, tool: dict, ask: list, max_tokens: int):
    """A required call to ``tool`` on the tiny Gemma 4 server: the reply's message, the generated
    text (the recorder's output ids, decoded) and the server's rendering of ``ask`` + the reply
    without a generation prompt."""
    _, tokenizer, _ = write_checkpoint(tmp_path / "model")
    record = tmp_path / "record.jsonl"
    settings = {"model": {"path": str(tmp_path / "model"), "name": NAME, "dtype": "fp32", "max_context": 1024},
                "server": {"record_path": str(record)}}
    body = {"model": NAME, "messages": ask, "tools": [tool], "tool_choice": "required", "parallel_tool_calls": False,
            "max_tokens": max_tokens, "temperature": 0}
    with ServerProcess(tmp_path / "server", settings=settings) as server:
        first = post(server, "/v1/chat/completions", body)
        assert first["choices"][0]["finish_reason"] == "tool_calls", first
        message = first["choices"][0]["message"]
        history_body = {"messages": ask + [message], "tools": [tool], "add_generation_prompt": False}
        tokens = post(server, "/v1/tokenize", history_body)["tokens"]
        text = post(server, "/v1/detokenize", {"tokens": tokens})["prompt"]
    generation = json.loads(record.read_text().splitlines()[-1])
    prompt, output = (tokenizer.decode(generation[key], skip_special_tokens=False) for key in ("prompt", "output"))
    return message, prompt, output, text


def test_a_fenced_nested_call_is_what_the_official_template_renders(tmp_path):
    message, prompt, output, text = served_call(tmp_path, TOOL, ASK, max_tokens=160)
    call = message["tool_calls"][0]
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, PARAMETERS)
    assert call["function"]["name"] == "plan_trip" and arguments["stops"] and isinstance(arguments["when"], dict)
    assert prompt == official(ASK, generation=True) and output.startswith("<|tool_call>call:plan_trip{stops:[{")
    decoded = {**message, "tool_calls": [{**call, "function": {"name": "plan_trip", "arguments": arguments}}]}
    history = official(ASK + [decoded], generation=False)
    # the template re-renders the turn without the generation prompt's empty thought, then the call as generated
    call_text = output.removesuffix("<turn|>")
    assert history == official(ASK, generation=False) + "<|turn>model\n" + call_text + "<|tool_response>"
    assert text == history
