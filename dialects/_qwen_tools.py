"""The tool definitions of the Qwen3-Coder system turn, as its chat template writes them (XML).

Format in :mod:`kvgate.dialects.qwen3_coder_xml`. ``jinja_string`` is the template's ``| string``
(Python ``str()``), ``extra_keys`` its ``render_extra_keys`` macro.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.types import Tool
from kvgate.dialects._args import dumps, openai_tool

DEFAULT_SYSTEM = "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks."
TOOLS_HEAD = "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>"
INSTRUCTIONS = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must "
    "be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call available, answer the question like "
    "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
)


def jinja_string(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def extra_keys(fields: Any, handled: tuple[str, ...]) -> str:
    if not isinstance(fields, dict):
        return ""
    out = []
    for key, value in fields.items():
        if key in handled:
            continue
        text = dumps(value) if isinstance(value, (dict, list, tuple)) else jinja_string(value)
        out.append(f"\n<{key}>{text}</{key}>")
    return "".join(out)


def one_tool(tool: Tool) -> str:
    function = openai_tool(tool)
    text = "\n<function>\n<name>" + function["name"] + "</name>"
    if "description" in function:
        text += "\n<description>" + function["description"].strip() + "</description>"
    text += "\n<parameters>"
    params = function.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    if isinstance(props, dict):
        for name, fields in props.items():
            text += "\n<parameter>\n<name>" + name + "</name>"
            if isinstance(fields, dict) and "type" in fields:
                text += "\n<type>" + jinja_string(fields["type"]) + "</type>"
            if isinstance(fields, dict) and "description" in fields:
                text += "\n<description>" + jinja_string(fields["description"]).strip() + "</description>"
            text += extra_keys(fields, ("name", "type", "description")) + "\n</parameter>"
    text += extra_keys(params, ("type", "properties")) + "\n</parameters>"
    return text + extra_keys(function, ("type", "name", "description", "parameters")) + "\n</function>"


def tools_block(tools: list[Tool]) -> str:
    """The text after the system prompt: empty without tools."""
    if not tools:
        return ""
    return TOOLS_HEAD + "".join(one_tool(t) for t in tools) + "\n</tools>" + INSTRUCTIONS
