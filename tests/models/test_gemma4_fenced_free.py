"""A tiny random Gemma 4 served by the real server on its defaults: a required call whose parameters
declare no structure (a free object, a ``{}`` value, an array without ``items``) is fenced in Gemma's
own value syntax, not compact JSON, so the generated text (the request recorder's output ids,
decoded) is byte for byte what Google's chat template (tests/dialects/templates/gemma4.jinja)
writes for the parsed call, and the server's rendering of the next turn is the template's.

The server and checkpoint are test_gemma4_fenced.py's.
"""

from __future__ import annotations

import json

import pytest

from tests.models.test_gemma4_fenced import official, served_call

pytestmark = pytest.mark.slow

PARAMETERS = {"type": "object", "required": ["meta", "payload", "tags"], "properties": {
    "meta": {"type": "object"}, "payload": {}, "tags": {"type": "array"}}}
TOOL = {"type": "function", "function": {"name": "store", "description": "Store data", "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "Store {'user': 'ann', 'ids': [3, 4]} tagged new."}]


def test_a_fenced_call_with_free_values_is_what_the_official_template_renders(tmp_path):
    message, _, output, text = served_call(tmp_path, TOOL, ASK, max_tokens=120)
    call = message["tool_calls"][0]
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments["meta"], dict) and isinstance(arguments["tags"], list)
    assert output.startswith("<|tool_call>call:store{meta:{") and '{"' not in output, output
    decoded = {**message, "tool_calls": [{**call, "function": {"name": "store", "arguments": arguments}}]}
    history = official(ASK + [decoded], generation=False, tool=TOOL)
    call_text = output.removesuffix("<turn|>")
    assert history == official(ASK, generation=False, tool=TOOL) + "<|turn>model\n" + call_text + "<|tool_response>"
    assert text == history
