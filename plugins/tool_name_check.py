"""Plugin: which tool names the model can carry, a request check (``register_request_checks``) run
once per request, before the prompt is rendered.

A name is refused (400 naming the tool) when

* it contains the text of one of the tokenizer's added tokens (``<|endoftext|>``, ``<|im_end|>``):
  in the prompt that text becomes the control token, and the model could never write it back;
* it contains markup of the dialect (a literal with ``<``, ``>`` or ``|``, e.g. ``</tool_call>``);
* the dialect cannot round-trip it: its own rendering of a call to that name, fed to its own
  parser, does not come back as exactly one call to that name.

Results are remembered per name (agents resend the same tools every turn), in a bounded map.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from kvgate.core.errors import InvalidRequest
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import ChatRequest, ParseIssue, Tool, ToolCall, ToolCallStart

MAX_REMEMBERED = 4096
_MARKUP = re.compile(r"[<>|]")


class ToolNameCheck:
    """The tool-name rule of one dialect and tokenizer."""

    def __init__(self, dialect: Any, tokenizer: Any = None):
        self.dialect = dialect
        self.forbidden = sorted(set(_added_token_texts(tokenizer)) | set(_markup_literals(dialect)))
        self._verdicts: dict[str, Optional[str]] = {}

    def check_request(self, request: ChatRequest) -> None:
        """:class:`kvgate.core.pipeline.request_checks.RequestCheck`: every tool's name."""
        self.check(request.tools)

    def check(self, tools: list[Tool]) -> None:
        for index, tool in enumerate(tools):
            name = tool.qualified_name
            problem = self.problem(name)
            if problem:
                raise InvalidRequest(f"Tool name {name!r} (tools[{index}]) cannot be used with this model: {problem}.",
                                     param=f"tools[{index}].name")

    def problem(self, name: str) -> Optional[str]:
        """Why ``name`` cannot be used, or None."""
        if name not in self._verdicts:
            if len(self._verdicts) >= MAX_REMEMBERED:
                self._verdicts.clear()
            self._verdicts[name] = self._judge(name)
        return self._verdicts[name]

    def _judge(self, name: str) -> Optional[str]:
        for text in self.forbidden:
            if text in name:
                return f"it contains {text!r}, which is control text for the model"
        return self._round_trip(name)

    def _round_trip(self, name: str) -> Optional[str]:
        texts = _renderings(self.dialect, name)
        if not texts:
            return None
        issue = ""
        for text in texts:
            parser = self.dialect.new_parser([Tool(name=name)], lambda index, called: f"check_{index}")
            events = parser.feed(text) + parser.finish()
            calls = [event.name for event in events if isinstance(event, ToolCallStart)]
            issues = [event.message for event in events if isinstance(event, ParseIssue)]
            if calls == [name] and not issues:
                return None
            issue = issue or (issues[0] if issues else "")
        return "the model's tool-call syntax cannot carry it" + (f" ({issue})" if issue else "")


def _renderings(dialect: Any, name: str) -> list[str]:
    """The texts of a call to ``name`` as the dialect writes it: in a history turn (with any
    block around it) and alone."""
    texts = []
    texts.append(dialect.render_calls([ToolCall("call_check", name, "{}")]))
    try:
        texts.append(dialect.render_tool_call(name, "{}"))
    except NotImplementedError:  # a dialect without a single-call rendering
        pass
    return [text for text in texts if text]


def _added_token_texts(tokenizer: Any) -> list[str]:
    """Markup-like added tokens of the model's ``tokenizers.Tokenizer`` (None: no tokenizer given)."""
    if tokenizer is None:
        return []
    return [token.content for token in tokenizer.get_added_tokens_decoder().values() if _MARKUP.search(token.content)]


def _markup_literals(dialect: Any) -> list[str]:
    return [text.strip() for text in dialect.literals.values() if isinstance(text, str) and _MARKUP.search(text)]


@hookimpl
def register_request_checks(register):
    register("tool_name_check", ToolNameCheck)
