"""The JSON Schema of an Anthropic Messages (and ``count_tokens``) request body and of their answers,
published in the OpenAPI document. It documents what :mod:`.request`, :mod:`.messages` and
:mod:`.blocks` accept; they stay the authority. Every body they accept validates against it; what
depends on other values (a named tool being in ``tools``, the model having vision for an image) it
cannot say, so some bodies that validate are still refused.
"""

from __future__ import annotations

from kvgate.core.http.openapi import JSON, SSE, SSE_EVENT, answers
from kvgate.core.http.schema_parts import (ANY_OBJECT, NAME, STRING, array, integer, needs, nullable,
                                           number, obj, when)
from kvgate.core.pipeline.stop_strings import MAX_STOP_CHARS, MAX_STOP_STRINGS
from kvgate.core.tenants import MAX_SALT_CHARS

FALSY = {"enum": [False, 0, "", None, [], {}]}  # read as ``value or default``: any falsy value is the default
SHALLOW_BLOCKS = {"anyOf": [STRING, array(obj({"type": STRING}, required=["type"]))]}
SOURCE = {"type": "object", "anyOf": [obj({"type": {"const": "text"}, "data": STRING}, required=["type", "data"]),
                                      obj({"type": {"const": "content"}, "content": SHALLOW_BLOCKS},
                                          required=["type", "content"])]}
# a block of any type; only the types read as text are checked, and an image is never read
BLOCK = obj({"type": {"type": "string", "not": {"const": "image"}}}, required=["type"], allOf=[
    when("type", "text", needs("text", STRING)), when("type", "document", needs("source", SOURCE))])
BLOCKS = {"anyOf": [STRING, array(BLOCK)]}
TOOL_RESULT = needs("tool_use_id", STRING) | {"properties": {
    "tool_use_id": STRING, "is_error": {"anyOf": [{"type": "boolean"}, FALSY]}, "content": nullable(BLOCKS)}}
TOOL_USE = {"required": ["id", "name"], "properties": {"id": STRING, "name": NAME, "input": ANY_OBJECT}}
USER_BLOCK = {"allOf": [BLOCK, when("type", "tool_result", TOOL_RESULT)]}
ASSISTANT_BLOCK = {"allOf": [BLOCK, when("type", "tool_use", TOOL_USE),
                             when("type", "thinking", needs("thinking", STRING))]}
MESSAGE = obj({"role": {"enum": ["user", "assistant", "system"]}, "content": nullable(BLOCKS)},  # null: system only
              required=["role", "content"],
              allOf=[when("role", "user", needs("content", {"anyOf": [STRING, array(USER_BLOCK)]})),
                     when("role", "assistant", needs("content", {"anyOf": [STRING, array(ASSISTANT_BLOCK)]}))])

CLIENT_TOOL = {"anyOf": [{"required": ["input_schema"]}, {"not": {"required": ["type"]}},
                         {"properties": {"type": {"enum": [None, "custom"]}}}]}
TOOL = obj({}, nulls=False, **{"if": CLIENT_TOOL, "then": {
    "required": ["name", "input_schema"],
    "properties": {"name": NAME, "input_schema": ANY_OBJECT, "description": {"anyOf": [STRING, FALSY]}}}})
TOOL_CHOICE = obj({"type": {"enum": ["auto", "any", "tool", "none"]}}, required=["type"], nulls=False)
COMMON = {
    "model": STRING, "system": BLOCKS, "messages": array(MESSAGE, min_items=1), "tools": array(TOOL),
    "tool_choice": TOOL_CHOICE, "max_tokens": integer(1), "temperature": number(0, 1), "top_p": number(0, 1),
    "top_k": integer(0), "thinking": obj({"type": STRING}, required=["type"]),
    "stop_sequences": array({"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS},
                            maxItems=MAX_STOP_STRINGS),
    "cache_salt": {"type": "string", "minLength": 1, "maxLength": MAX_SALT_CHARS},
}
COUNT_TOKENS_REQUEST = obj(COMMON, required=["messages"],
                           description="A Messages count_tokens request; fields not listed are ignored.")
STREAM = {"enum": [True, False, 0, 1], "description": "A boolean (0 and 1 are read as false and true)."}
MESSAGES_REQUEST = obj({**COMMON, "stream": STREAM}, required=["messages"],
                       description="A Messages request; fields not listed are ignored.")

ERROR = obj({"type": {"const": "error"}, "error": obj({"type": STRING, "message": STRING},
                                                     required=["type", "message"])}, required=["type", "error"])
MESSAGE_OBJECT = obj({"id": STRING, "type": {"const": "message"}, "role": {"const": "assistant"},
                      "content": array(ANY_OBJECT)}, required=["id", "type", "role", "content"], nulls=False)
MESSAGES_ANSWERS = answers({JSON: MESSAGE_OBJECT, SSE: SSE_EVENT}, ERROR)
COUNT_TOKENS_ANSWERS = answers({JSON: obj({"input_tokens": integer(0)}, required=["input_tokens"])}, ERROR)
