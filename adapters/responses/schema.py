"""The JSON Schema of a Responses create body (also of ``input_tokens`` and ``compact``, which read
the same body) and of the answers, published in the OpenAPI document. It documents what
:mod:`.request` accepts (items and tools in :mod:`.schema_items`); that stays the authority. Every
body it accepts validates; what depends on other values or on stored state (a
``previous_response_id`` that exists, a tool output answering an earlier call, input items that
hold no message) it cannot say, so some bodies that validate are still refused.
"""

from __future__ import annotations

from kvgate.adapters.prompt_cache_retention import POLICIES as RETENTION_POLICIES
from kvgate.adapters.responses.request import METADATA_KEY_CHARS, METADATA_KEYS, METADATA_VALUE_CHARS
from kvgate.adapters.responses.schema_items import INPUT, TOOL, TOOL_CHOICE
from kvgate.core.http.openapi import JSON, OPENAI_ERROR, SSE, SSE_EVENT, answers
from kvgate.core.http.schema_parts import (ANY_OBJECT, BOOLEAN, NAME, NULL, STRING, array, integer, needs, number, obj,
                                           when)
from kvgate.core.tenants import MAX_SALT_CHARS

FORMAT = obj({"type": {"enum": ["text", "json_object", "json_schema"]}}, nulls=False, allOf=[
    when("type", "json_schema", needs("schema", ANY_OBJECT))])
METADATA = {"type": "object", "maxProperties": METADATA_KEYS, "propertyNames": {"maxLength": METADATA_KEY_CHARS},
            "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_CHARS}}
FIELDS = {
    "model": STRING, "input": INPUT, "instructions": STRING, "previous_response_id": STRING, "tools": array(TOOL),
    "tool_choice": TOOL_CHOICE, "parallel_tool_calls": BOOLEAN, "max_tool_calls": integer(1), "stream": BOOLEAN,
    "store": BOOLEAN, "generate": BOOLEAN, "background": {"enum": [False]}, "conversation": NULL,
    "text": obj({"format": FORMAT}), "reasoning": obj({"effort": STRING}), "metadata": METADATA,
    "stream_options": ANY_OBJECT, "include": array(STRING), "truncation": {"enum": ["auto", "disabled"]},
    "prompt_cache_key": STRING, "user": STRING, "safety_identifier": STRING, "service_tier": STRING,
    "prompt_cache_retention": {"enum": list(RETENTION_POLICIES)},
    "cache_salt": {"type": "string", "minLength": 1, "maxLength": MAX_SALT_CHARS},
    "temperature": number(0, 2), "top_p": number(0, 1), "presence_penalty": number(-2, 2),
    "frequency_penalty": number(-2, 2), "max_output_tokens": integer(1), "top_logprobs": integer(0, 20),
}
SOMETHING_TO_ANSWER = {"anyOf": [  # else "input is empty"
    {"required": ["input"], "properties": {"input": {"anyOf": [STRING, {"type": "array", "minItems": 1}]}}},
    {"required": ["instructions"], "properties": {"instructions": NAME}},
    {"required": ["previous_response_id"], "properties": {"previous_response_id": NAME}}]}
RESPONSES_REQUEST = obj(FIELDS, description="A Responses create request; fields not listed are ignored.",
                        allOf=[SOMETHING_TO_ANSWER])

RESPONSE = obj({"id": STRING, "object": {"const": "response"}, "status": STRING, "output": array(ANY_OBJECT)},
               required=["id", "object", "status", "output"], nulls=False)
RESPONSES_ANSWERS = answers({JSON: RESPONSE, SSE: SSE_EVENT}, OPENAI_ERROR)
INPUT_TOKENS_ANSWERS = answers({JSON: obj({"object": {"const": "response.input_tokens"}, "input_tokens": integer(0)},
                                          required=["object", "input_tokens"])}, OPENAI_ERROR)
COMPACT_ANSWERS = answers({JSON: obj({"object": {"const": "response.compaction"}, "output": array(ANY_OBJECT)},
                                     required=["object", "output"])}, OPENAI_ERROR)
