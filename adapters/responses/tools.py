"""Responses tool definitions and ``tool_choice`` -> canonical :class:`Tool` / :class:`ToolChoice`.

Function tools are flat (``{type:"function", name, parameters, strict, description}``). Namespace
tools (``{type:"namespace", name, tools:[...]}``) are flattened into ``Tool(name=inner,
namespace=ns)``. Custom (freeform) tools (``{type:"custom", name, description, format}``, at the
top level or in a namespace) become custom canonical tools (:mod:`kvgate.adapters.custom_tools`); a
grammar that cannot be enforced is a 400 naming the tool. Hosted and provider-executed types
(web_search, local_shell, tool_search, ...) are skipped, never rejected.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.adapters.custom_tools import custom_tool
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import InputFormat, Tool, ToolChoice

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def _function_tool(spec: dict[str, Any], where: str, namespace: Optional[str] = None) -> Tool:
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    parameters = spec.get("parameters")
    if parameters is None:
        parameters = dict(EMPTY_PARAMETERS)
    if not isinstance(parameters, dict):
        raise InvalidRequest(f"{where}.parameters must be a JSON Schema object.", param=f"{where}.parameters")
    description = spec.get("description")
    return Tool(name=name, description=description if isinstance(description, str) else "",
                parameters=parameters, namespace=namespace, strict=spec.get("strict") is True)


def _custom_tool(spec: dict[str, Any], where: str, namespace: Optional[str] = None) -> Tool:
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    fmt = spec.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        fmt = InputFormat()
    elif isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if not isinstance(syntax, str) or not syntax or not isinstance(definition, str):
            raise InvalidRequest(f"{where}.format needs a syntax ('lark' or 'regex') and a string definition.",
                                 param=f"{where}.format")
        fmt = InputFormat(syntax, definition)
    else:
        raise InvalidRequest(f"{where}.format must be {{type: 'text'}} or {{type: 'grammar', syntax, definition}}.",
                             param=f"{where}.format")
    description = spec.get("description")
    return custom_tool(name, description if isinstance(description, str) else "", fmt, namespace)


def _namespace_tools(spec: dict[str, Any], where: str) -> list[Tool]:
    namespace = spec.get("name")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    inner = spec.get("tools")
    if not isinstance(inner, list):
        raise InvalidRequest(f"{where}.tools must be an array.", param=f"{where}.tools")
    tools = []
    for index, item in enumerate(inner):
        if isinstance(item, dict) and item.get("type", "function") == "function":
            tools.append(_function_tool(item, f"{where}.tools[{index}]", namespace))
        elif isinstance(item, dict) and item.get("type") == "custom":
            tools.append(_custom_tool(item, f"{where}.tools[{index}]", namespace))
    return tools


def convert_tools(specs: Any, param: str = "tools") -> list[Tool]:
    """Canonical tools for a ``tools`` array; unsupported tool types are dropped."""
    if specs is None:
        return []
    if not isinstance(specs, list):
        raise InvalidRequest(f"{param} must be an array.", param=param)
    tools: list[Tool] = []
    for index, spec in enumerate(specs):
        where = f"{param}[{index}]"
        if not isinstance(spec, dict):
            raise InvalidRequest(f"{where} must be an object.", param=where)
        kind = spec.get("type")
        if kind == "function":
            tools.append(_function_tool(spec, where))
        elif kind == "custom":
            tools.append(_custom_tool(spec, where))
        elif kind == "namespace":
            tools.extend(_namespace_tools(spec, where))
    return tools


def _named(name: Any, tools: list[Tool], param: str) -> ToolChoice:
    if not isinstance(name, str) or not name:
        raise InvalidRequest("tool_choice.name must be a non-empty string.", param=param)
    for tool in tools:
        if name in (tool.name, tool.qualified_name):
            return ToolChoice(mode="named", name=tool.qualified_name)
    raise InvalidRequest(f"tool_choice names the tool '{name}', which is not in tools.", param=param)


def convert_tool_choice(choice: Any, tools: list[Tool]) -> ToolChoice:
    """``none`` / ``auto`` / ``required`` / ``{type:function|custom, name}`` / ``{type:allowed_tools}``.

    Hosted-tool selectors fall back to ``auto``. The shape is checked even without tools; then
    ``required`` (or a named tool) is a 400, as in Chat Completions, and the rest is ``auto``.
    """
    if choice is None:
        return ToolChoice(mode="auto")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequest("tool_choice must be 'none', 'auto', 'required' or an object.",
                                 param="tool_choice")
        if choice == "required" and not tools:
            raise InvalidRequest("tool_choice is 'required' but no tools were given.", param="tool_choice")
        return ToolChoice(mode=choice if tools else "auto")
    if not isinstance(choice, dict):
        raise InvalidRequest("tool_choice must be a string or an object.", param="tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return _named(choice.get("name"), tools, "tool_choice.name")
    if kind == "allowed_tools":
        return _allowed(choice, tools)
    if kind is not None and not isinstance(kind, str):
        raise InvalidRequest("tool_choice.type must be a string.", param="tool_choice.type")
    return ToolChoice(mode="auto")


def _allowed(choice: dict[str, Any], tools: list[Tool]) -> ToolChoice:
    mode = choice.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise InvalidRequest("tool_choice.mode must be 'auto' or 'required'.", param="tool_choice.mode")
    listed = choice.get("tools") or []
    if not isinstance(listed, list):
        raise InvalidRequest("tool_choice.tools must be an array.", param="tool_choice.tools")
    if mode == "required" and not tools:
        raise InvalidRequest("tool_choice requires a tool but no tools were given.", param="tool_choice")
    allowed = [t for t in listed if isinstance(t, dict) and t.get("type") in ("function", "custom")]
    if mode == "required" and len(allowed) == 1:
        return _named(allowed[0].get("name"), tools, "tool_choice.tools[0].name")
    return ToolChoice(mode="required" if mode == "required" else "auto")
