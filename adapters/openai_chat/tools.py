"""Chat Completions ``tools``, ``tool_choice`` and ``response_format`` -> canonical types.

* ``function`` and ``custom`` tools (``{type:"custom", custom:{name, description, format: {type:
  "text"} | {type: "grammar", grammar: {syntax: "lark"|"regex", definition}}}}``, canonical custom
  tools: :mod:`kvgate.adapters.custom_tools`); a grammar that cannot be enforced is a 400 naming it.
* ``tool_choice``: ``none`` / ``auto`` / ``required`` / ``{type:function, function:{name}}`` /
  ``{type:custom, custom:{name}}``; the
  default is ``auto`` with tools and ``none`` without. ``{type:allowed_tools, allowed_tools:{mode,
  tools}}`` keeps every tool in the prompt (prefix stability), sets the mode, and lists the allowed
  names in ``ChatRequest.extra["allowed_tools"]`` for the fence; a single allowed tool under
  ``required`` becomes a named choice.
"""

from __future__ import annotations

from typing import Any

from kvgate.adapters.openai_chat.fields import choice, element, join, typed
from kvgate.adapters.custom_tools import custom_tool
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import InputFormat, ResponseFormat, Tool, ToolChoice


def convert_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("Invalid type for 'tools': expected an array of tools.", param="tools")
    tools = [convert_tool(item, join("tools", i)) for i, item in enumerate(raw)]
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise InvalidRequest(f"Duplicate tool name {tool.name!r} in 'tools'.", param=f"tools[{i}].function.name")
        seen.add(tool.name)
    return tools


def convert_tool(item: Any, path: str) -> Tool:
    element(item, dict, path)
    kind = typed(item, "type", str, path, default="function")
    if kind == "custom":
        return convert_custom_tool(typed(item, "custom", dict, path, required=True), join(path, "custom"))
    if kind != "function":
        raise InvalidRequest(f"Invalid value for '{join(path, 'type')}': {kind!r}. Supported values are: "
                             "'function', 'custom'.", param=join(path, "type"))
    function = typed(item, "function", dict, path, required=True)
    fpath = join(path, "function")
    name = typed(function, "name", str, fpath, required=True)
    if not name:
        raise InvalidRequest(f"'{join(fpath, 'name')}' must not be empty.", param=join(fpath, "name"))
    parameters = typed(function, "parameters", dict, fpath, default=None)
    return Tool(name=name, description=typed(function, "description", str, fpath, default=""),
                parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
                strict=bool(typed(function, "strict", bool, fpath, default=False)))


def convert_custom_tool(custom: dict, path: str) -> Tool:
    name = typed(custom, "name", str, path, required=True)
    if not name:
        raise InvalidRequest(f"'{join(path, 'name')}' must not be empty.", param=join(path, "name"))
    fmt = typed(custom, "format", dict, path, default=None)
    fpath = join(path, "format")
    kind = choice(fmt, "type", ("text", "grammar"), fpath, default="text") if fmt is not None else "text"
    grammar = InputFormat()
    if kind == "grammar":
        spec = typed(fmt, "grammar", dict, fpath, required=True)
        gpath = join(fpath, "grammar")
        grammar = InputFormat(typed(spec, "syntax", str, gpath, required=True),
                              typed(spec, "definition", str, gpath, required=True))
    return custom_tool(name, typed(custom, "description", str, path, default=""), grammar)


def convert_tool_choice(raw: Any, tools: list[Tool]) -> tuple[ToolChoice, list[str]]:
    """The canonical choice and, for ``allowed_tools``, the allowed names (else an empty list)."""
    names = {tool.name for tool in tools}
    if raw is None:
        return ToolChoice(mode="auto" if tools else "none"), []
    if isinstance(raw, str):
        mode = choice({"tool_choice": raw}, "tool_choice", ("none", "auto", "required"))
        if mode == "required" and not tools:
            raise InvalidRequest("'tool_choice' is 'required' but no tools were given.", param="tool_choice")
        return ToolChoice(mode=mode), []
    element(raw, dict, "tool_choice")
    kind = choice(raw, "type", ("function", "allowed_tools", "custom"), "tool_choice", default="function")
    if kind == "custom":
        custom = typed(raw, "custom", dict, "tool_choice", required=True)
        name = typed(custom, "name", str, "tool_choice.custom", required=True)
        _require_known(name, names, "tool_choice.custom.name")
        return ToolChoice(mode="named", name=name), []
    if kind == "function":
        function = typed(raw, "function", dict, "tool_choice", required=True)
        name = typed(function, "name", str, "tool_choice.function", required=True)
        _require_known(name, names, "tool_choice.function.name")
        return ToolChoice(mode="named", name=name), []
    return allowed_tools_choice(raw, names)


def allowed_tools_choice(raw: dict, names: set[str]) -> tuple[ToolChoice, list[str]]:
    spec = typed(raw, "allowed_tools", dict, "tool_choice", required=True)
    path = "tool_choice.allowed_tools"
    mode = choice(spec, "mode", ("auto", "required"), path, default="auto")
    allowed: list[str] = []
    for i, entry in enumerate(typed(spec, "tools", list, path, required=True)):
        epath = join(join(path, "tools"), i)
        element(entry, dict, epath)
        key = "custom" if entry.get("type") == "custom" else "function"
        function = typed(entry, key, dict, epath, required=True)
        name = typed(function, "name", str, join(epath, key), required=True)
        _require_known(name, names, join(join(epath, key), "name"))
        allowed.append(name)
    if not allowed:
        raise InvalidRequest(f"'{path}.tools' must name at least one tool.", param=f"{path}.tools")
    if mode == "required" and len(allowed) == 1:
        return ToolChoice(mode="named", name=allowed[0]), allowed
    return ToolChoice(mode=mode), allowed


def _require_known(name: str, names: set[str], param: str) -> None:
    if name not in names:
        raise InvalidRequest(f"Tool {name!r} named in '{param}' is not in 'tools'.", param=param)


def convert_response_format(raw: Any) -> ResponseFormat:
    if raw is None:
        return ResponseFormat()
    element(raw, dict, "response_format")
    kind = choice(raw, "type", ("text", "json_object", "json_schema"), "response_format", default="text")
    if kind != "json_schema":
        return ResponseFormat(type=kind)
    spec = typed(raw, "json_schema", dict, "response_format", required=True)
    path = "response_format.json_schema"
    return ResponseFormat(type="json_schema", name=typed(spec, "name", str, path, required=True),
                          schema=typed(spec, "schema", dict, path), strict=bool(typed(spec, "strict", bool, path)))
