"""JSON Schemas of the Responses ``input`` items, content parts and tools, as
:mod:`.input_items` and :mod:`.tools` read them (they stay the authority; every item they accept
validates). Part of the request schema in :mod:`.schema`.
"""

from __future__ import annotations

from kvgate.adapters.responses.compaction_item import PREFIX as COMPACTION_PREFIX
from kvgate.adapters.responses.input_items import ROLES, TEXT_PARTS
from kvgate.core.http.schema_parts import ANY_OBJECT, NAME, STRING, array, needs, nullable, obj, when

FALSY = {"enum": [False, 0, "", None, [], {}]}  # read as ``value or default``: any falsy value is the default
PART = obj({"type": {"enum": [*TEXT_PARTS, "input_file"]}}, required=["type"], nulls=False, allOf=[
    *(when("type", kind, needs(field, STRING)) for kind, field in TEXT_PARTS.items()),
    when("type", "input_file", needs("file_data", NAME))])
CONTENT = {"anyOf": [STRING, array(PART)]}
GRAMMAR = obj({"type": {"const": "grammar"}, "syntax": NAME, "definition": STRING},
              required=["type", "syntax", "definition"])
CUSTOM_FORMAT = {"anyOf": [obj({"type": {"const": "text"}}, required=["type"]), GRAMMAR]}
FUNCTION = {"required": ["name"], "properties": {"name": NAME, "parameters": nullable(ANY_OBJECT)}}
CUSTOM = {"required": ["name"], "properties": {"name": NAME, "format": nullable(CUSTOM_FORMAT)}}
INNER_TOOL = {"allOf": [{"if": {"not": {"required": ["type"]}}, "then": FUNCTION}, when("type", "function", FUNCTION),
                        when("type", "custom", CUSTOM)]}
TOOL = obj({}, allOf=[when("type", "function", FUNCTION), when("type", "custom", CUSTOM),
                      when("type", "namespace", {"required": ["name", "tools"], "properties": {
                          "name": NAME, "tools": array(INNER_TOOL)}})])
CALL = {"required": ["call_id", "name"], "properties": {"call_id": NAME, "name": NAME}}
MESSAGE = {"required": ["role"], "properties": {"role": {"enum": list(ROLES)}, "content": nullable(CONTENT)}}
ITEM = obj({"type": {"not": {"const": "item_reference"}}}, allOf=[  # any other type, even not a string, is skipped
    {"if": {"not": {"required": ["type"]}}, "then": MESSAGE}, when("type", "message", MESSAGE),
    when("type", "reasoning", {"properties": {"content": {"anyOf": [CONTENT, FALSY]}}}),
    when("type", "function_call", {"allOf": [CALL, needs("arguments", STRING)]}),
    when("type", "custom_tool_call", {"allOf": [CALL, needs("input", STRING)]}),
    when("type", "function_call_output", {"allOf": [needs("call_id", NAME),
                                                    {"properties": {"output": nullable(CONTENT)}}]}),
    when("type", "custom_tool_call_output", {"allOf": [needs("call_id", NAME),
                                                       {"properties": {"output": nullable(CONTENT)}}]}),
    when("type", "compaction", needs("encrypted_content", {"type": "string", "pattern": f"^{COMPACTION_PREFIX}"})),
    when("type", "additional_tools", {"properties": {"tools": nullable(array(TOOL))}}),
])
INPUT = {"anyOf": [STRING, array(ITEM)]}

TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]}, obj({"type": STRING}, allOf=[
    when("type", "function", needs("name", NAME)), when("type", "custom", needs("name", NAME)),
    when("type", "allowed_tools", {"properties": {"mode": {"enum": ["auto", "required"]},
                                                  "tools": {"anyOf": [{"type": "array"}, FALSY]}}})])]}
