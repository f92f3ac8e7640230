"""The JSON Schema of a Chat Completions request body and of its answers, published in the OpenAPI
document. It documents what :mod:`.request`, :mod:`.messages` and :mod:`.tools` accept; they stay
the authority. Every body they accept validates against it. It cannot say what depends on other
fields' values (a named tool being in ``tools``, ``top_logprobs`` needing ``logprobs``), so some
bodies that validate are still refused. A field read only in place of a preferred one
(``max_tokens``, ``reasoning_effort``, ``user``) is checked only where that one is not given; the
``x-kvgate-cache-key`` header, which the schema cannot see, also leaves ``prompt_cache_key`` and
``user`` unread.
"""

from __future__ import annotations

from kvgate.adapters.prompt_cache_retention import POLICIES as RETENTION_POLICIES
from kvgate.core.http.openapi import JSON, OPENAI_ERROR, SSE, SSE_EVENT, answers
from kvgate.core.http.schema_parts import (ANY_OBJECT, BOOLEAN, NAME, NULL, STRING, array, fallback, integer, needs,
                                           nullable, number, obj, when)
from kvgate.core.pipeline.stop_strings import MAX_STOP_CHARS, MAX_STOP_STRINGS
from kvgate.core.tenants import MAX_SALT_CHARS

ROLES = ["system", "developer", "user", "assistant", "tool"]

PART = obj({"type": {"enum": ["text", "refusal"]}}, required=["type"], allOf=[
    when("type", "text", needs("text", STRING)), when("type", "refusal", needs("refusal", STRING))])
CONTENT = {"anyOf": [STRING, array(PART)]}
TOOL_CALL = obj({"type": {"enum": ["function", "custom"]}, "id": STRING}, required=["id"], allOf=[
    when("type", "function", needs("function", obj({"name": STRING, "arguments": STRING}, required=["name"])),
         default_applies=True),
    when("type", "custom", needs("custom", obj({"name": STRING, "input": STRING}, required=["name", "input"])))])
ASSISTANT = {"properties": {"reasoning_content": nullable(STRING), "reasoning": nullable(STRING),
                            "tool_calls": nullable(array(TOOL_CALL))}}
MESSAGE = obj({"role": {"enum": ROLES}, "name": STRING, "content": CONTENT}, required=["role"], allOf=[
    when("role", "assistant", ASSISTANT), when("role", "tool", needs("tool_call_id", STRING))])

GRAMMAR = obj({"syntax": STRING, "definition": STRING}, required=["syntax", "definition"])
CUSTOM_FORMAT = obj({"type": {"enum": ["text", "grammar"]}}, allOf=[when("type", "grammar", needs("grammar", GRAMMAR))])
FUNCTION = obj({"name": NAME, "description": STRING, "parameters": ANY_OBJECT, "strict": BOOLEAN}, required=["name"])
CUSTOM = obj({"name": NAME, "description": STRING, "format": CUSTOM_FORMAT}, required=["name"])
TOOL = obj({"type": {"enum": ["function", "custom"]}}, allOf=[
    when("type", "function", needs("function", FUNCTION), default_applies=True),
    when("type", "custom", needs("custom", CUSTOM))])

NAMED = obj({"name": STRING}, required=["name"])
ALLOWED_TOOLS = obj({"mode": {"enum": ["auto", "required"]}, "tools": array(ANY_OBJECT, min_items=1)},
                    required=["tools"])
TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]}, obj(
    {"type": {"enum": ["function", "allowed_tools", "custom"]}}, allOf=[
        when("type", "function", needs("function", NAMED), default_applies=True),
        when("type", "custom", needs("custom", NAMED)),
        when("type", "allowed_tools", needs("allowed_tools", ALLOWED_TOOLS))])]}
RESPONSE_FORMAT = obj({"type": {"enum": ["text", "json_object", "json_schema"]}}, allOf=[
    when("type", "json_schema", needs("json_schema", obj({"name": STRING, "schema": ANY_OBJECT, "strict": BOOLEAN},
                                                         required=["name"])))])
# empty stop strings are dropped before they are counted
STOP_LIST = array({"type": "string", "maxLength": MAX_STOP_CHARS}, contains=NAME, minContains=0,
                  maxContains=MAX_STOP_STRINGS)
STOP = {"anyOf": [{"type": "string", "maxLength": MAX_STOP_CHARS}, STOP_LIST]}
CACHE_SALT = {"type": "string", "minLength": 1, "maxLength": MAX_SALT_CHARS}

SAMPLING = {
    "max_completion_tokens": integer(1), "top_k": integer(-1), "logprobs": BOOLEAN,
    "top_logprobs": integer(0, 20), "temperature": number(0, 2), "top_p": number(0, 1), "min_p": number(0, 1),
    "seed": integer(), "presence_penalty": number(-2, 2), "frequency_penalty": number(-2, 2),
    "repetition_penalty": number(0.01), "stop": STOP,
}
CHAT_REQUEST = obj({
    "model": STRING, "messages": array(MESSAGE, min_items=1), "tools": array(TOOL), "tool_choice": TOOL_CHOICE,
    "response_format": RESPONSE_FORMAT, "n": integer(1, 1), "stream": BOOLEAN,
    "stream_options": obj({"include_usage": BOOLEAN}), "parallel_tool_calls": BOOLEAN, "ignore_eos": BOOLEAN,
    "chat_template_kwargs": obj({"enable_thinking": BOOLEAN}), "prompt_cache_key": STRING, "cache_salt": CACHE_SALT,
    "prompt_cache_retention": {"enum": list(RETENTION_POLICIES)},
    "max_tokens": {"description": "An integer >= 1, read where max_completion_tokens is not given."},
    "reasoning_effort": {"description": "A string, read where chat_template_kwargs.enable_thinking is not given."},
    "user": {"description": "A string, read where prompt_cache_key is not given."}, **SAMPLING,
}, required=["messages"], description="A Chat Completions request; fields not listed are ignored.", allOf=[
    fallback("max_completion_tokens", NULL, {"max_tokens": nullable(integer(1))}),
    fallback("chat_template_kwargs", {"properties": {"enable_thinking": NULL}}, {"reasoning_effort": nullable(STRING)}),
    fallback("prompt_cache_key", {"enum": [None, ""]}, {"user": nullable(STRING)})])

COMPLETION = obj({"id": STRING, "object": {"const": "chat.completion"}, "model": STRING, "choices": array(ANY_OBJECT)},
                 required=["id", "object", "model", "choices"], nulls=False)
CHAT_ANSWERS = answers({JSON: COMPLETION, SSE: SSE_EVENT}, OPENAI_ERROR)
