"""DeepSeek DSML tool dialect: V3.2 (``v32``, ``function_calls`` block) and V4 (``v4``, ``tool_calls``).

Wire format (byte-exact; ``D`` is ``'｜DSML｜'``, fullwidth bars; BLOCK is ``function_calls`` for
v32 and ``tool_calls`` for v4):

* An assistant turn is ``THINK + content + CALLS + '<｜end▁of▁sentence｜>'`` where
  CALLS = ``'\\n\\n<' + D + BLOCK + '>\\n' + '\\n'.join(INVOKES) + '\\n</' + D + BLOCK + '>'``
  (empty without calls), INVOKE = ``'<' + D + 'invoke name="' + NAME + '">\\n' + '\\n'.join(PARAMS)
  + '\\n</' + D + 'invoke>'`` and PARAM = ``'<' + D + 'parameter name="' + KEY + '" string="' +
  ('true' | 'false') + '">' + VALUE + '</' + D + 'parameter>'``. String values are written raw
  (``string="true"``); every other value is the raw JSON text the model generated. THINK is
  ``reasoning + '</think>'`` in thinking mode for turns after the last user message.
* v4 only: inside a string value ``</｜DSML｜parameter>`` is written ``&lt;/｜DSML｜parameter>`` (and
  text already spelled ``&(amp;)*lt;/｜DSML｜parameter>`` gains one ``amp;``, so reading inverts
  writing). v32 has no escaping: such a value cannot be represented.
* Tool definitions, user turns and tool results belong to the whole prompt: see
  :mod:`kvgate.dialects.deepseek_format` (chat formats ``deepseek_v32`` / ``deepseek_v4``).

Parsing: text before the block is content (the ``'\\n\\n'`` before it is syntax; one or no newline
is read too), ``<think>``/``</think>`` delimit reasoning, whitespace between tags is lenient, the
end-of-sentence token is swallowed. Arguments are rebuilt as ``{"k": value, ...}`` (default JSON
separators), string values streamed as they arrive. Duplicate parameters, an unknown tool, a
``string="false"`` value that is not JSON and unclosed invokes/blocks give ParseIssues.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import CallIdFactory, Dialect
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import Message, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import history_members, wire_value
from kvgate.dialects._dsml_parser import DSML, EOS, DsmlParser, escape_value

VARIANTS = {"v32": "function_calls", "v4": "tool_calls"}


class DeepseekDsml(Dialect):
    name = "deepseek_dsml"

    def __init__(self, variant: str = "v32"):
        if variant not in VARIANTS:
            raise ValueError(f"deepseek_dsml variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.block = VARIANTS[variant]

    @property
    def literals(self) -> dict[str, str]:
        return {
            "trigger": f"<{DSML}{self.block}>", "block_open": f"\n\n<{DSML}{self.block}>\n",
            "block_close": f"</{DSML}{self.block}>", "invoke_open": f'<{DSML}invoke name="',
            "invoke_head_close": '">\n', "invoke_close": f"</{DSML}invoke>",
            "param_open": f'<{DSML}parameter name="', "param_string_true": '" string="true">',
            "param_string_false": '" string="false">', "param_close": f"</{DSML}parameter>",
            "think_open": "<think>", "think_close": "</think>", "eos": EOS, "dsml": DSML,
        }

    def render_param(self, key: str, raw: str) -> str:
        is_string, value = wire_value(raw)
        if is_string and self.variant == "v4":
            value = escape_value(value)
        flag = "true" if is_string else "false"
        return f'<{DSML}parameter name="{key}" string="{flag}">{value}</{DSML}parameter>'

    def render_tool_call(self, name: str, arguments: str) -> str:
        params = [self.render_param(k, raw) for k, raw in history_members(arguments, f"tool call {name!r}")]
        return f'<{DSML}invoke name="{name}">\n' + "\n".join(params) + f"\n</{DSML}invoke>"

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        invokes = "\n".join(self.render_tool_call(qualified(c), c.arguments) for c in calls)
        return f"\n\n<{DSML}{self.block}>\n" + invokes + f"\n</{DSML}{self.block}>"

    def assistant_body(self, message: Message, with_reasoning: bool) -> str:
        """What the model generated for this turn, end-of-sentence token included."""
        think = (message.reasoning or "") + "</think>" if with_reasoning else ""
        return think + message.content + self.render_calls(message.tool_calls) + EOS

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Per-message text of the chat format as role/content dicts (see deepseek_format)."""
        from kvgate.dialects.deepseek_format import DeepseekChatFormat

        return DeepseekChatFormat(self).message_texts(messages, tools, bool(thinking))

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> DsmlParser:
        return DsmlParser(tools, call_id, start_in=start_in, block=self.block,
                          escaping=self.variant == "v4")


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


@hookimpl
def register_dialects(register):
    register("deepseek_dsml", DeepseekDsml)


@hookimpl
def register_chat_formats(register):
    from kvgate.dialects.deepseek_format import format_factory

    register("deepseek_v32", format_factory("v32"))
    register("deepseek_v4", format_factory("v4"))
