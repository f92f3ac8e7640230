"""The JSON Schemas of the ``/v1/tokenize`` and ``/v1/detokenize`` bodies and answers, published in
the OpenAPI document; they document what :mod:`.routes` accepts (it stays the authority), and every
body it accepts validates. ``messages`` and ``tools`` have Chat Completions' shapes.
"""

from __future__ import annotations

from kvgate.adapters.openai_chat.schema import MESSAGE, TOOL
from kvgate.core.http.openapi import JSON, OPENAI_ERROR, answers
from kvgate.core.http.schema_parts import BOOLEAN, NULL, STRING, array, integer, nullable, obj

PROMPT_FORM = {"required": ["prompt"], "properties": {"prompt": STRING, "messages": NULL}}
MESSAGES_FORM = {"required": ["messages"], "properties": {
    "prompt": NULL, "messages": array(MESSAGE, min_items=1), "add_generation_prompt": nullable(BOOLEAN),
    "tools": nullable(array(TOOL))}}
TOKENIZE_REQUEST = obj({"model": STRING, "add_special_tokens": BOOLEAN, "return_token_strs": BOOLEAN},
                       oneOf=[PROMPT_FORM, MESSAGES_FORM],
                       description="Exactly one of 'prompt' (a string) or 'messages' (Chat Completions messages).")
DETOKENIZE_REQUEST = obj({"model": STRING, "tokens": array(integer())}, required=["tokens"])

TOKENIZE_ANSWERS = answers({JSON: obj({"count": integer(0), "max_model_len": integer(), "tokens": array(integer()),
                                       "token_strs": array(STRING)}, required=["count", "tokens"])}, OPENAI_ERROR)
DETOKENIZE_ANSWERS = answers({JSON: obj({"prompt": STRING}, required=["prompt"])}, OPENAI_ERROR)
