"""Plugin: the ``jinja`` chat format, the default -- the model's own Jinja chat template (sandboxed,
with the helpers Hugging Face templates use) over the messages the dialect prepared."""

from __future__ import annotations

import datetime
import json
from typing import Any, Optional

import attrs
from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvgate.core.chat_format import ChatFormat
from kvgate.core.dialect import Dialect
from kvgate.core.errors import InvalidRequest
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import ChatRequest, Message


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: Optional[int] = None, ensure_ascii: bool = False, sort_keys: bool = False,
            separators: Optional[tuple[str, str]] = None) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys,
                      separators=tuple(separators) if separators is not None else None)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def template_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class JinjaChatFormat(ChatFormat):
    """The model's Jinja template over the dialect's rendering of messages and tools."""

    name = "jinja"

    def __init__(self, template: str, dialect: Dialect, special_tokens: dict[str, str]):
        self.source = template
        self.template = template_environment().from_string(template)
        self.dialect = dialect
        self.special_tokens = special_tokens
        self._starts: dict[Optional[bool], str] = {}  # reasoning switch -> parser_start's answer

    def parser_start(self, request: ChatRequest) -> str:
        """``"reasoning"`` where the template's generation prompt opens a thinking block it leaves
        open (MiniMax M2's template ends with ``<think>\\n``, so the model's first words are
        reasoning), else ``"content"``. Read once per reasoning switch from a one-message probe."""
        if request.reasoning not in self._starts:
            self._starts[request.reasoning] = self._probe_start(request.reasoning)
        return self._starts[request.reasoning]

    def _probe_start(self, reasoning: Optional[bool]) -> str:
        opener, closer = self.dialect.literals.get("think_open"), self.dialect.literals.get("think_close")
        if not opener or not closer:
            return "content"
        probe = ChatRequest(model="", messages=[Message(role="user", content="?")], reasoning=reasoning)
        try:
            prompt, bare = self.render(probe), self.render(probe, add_generation_prompt=False)
        except InvalidRequest:  # a template that refuses the probe: nothing known, as before
            return "content"
        generation = prompt[len(bare):] if prompt.startswith(bare) else prompt
        opened = generation.rfind(opener)
        return "reasoning" if opened >= 0 and closer not in generation[opened:] else "content"

    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        messages = self.dialect.render_messages(
            request.messages, request.tools, request.tool_choice, thinking=request.reasoning
        )
        variables = dict(self.special_tokens)
        listed = self.dialect.template_tools(request.tools) if request.tools else None
        if listed is not None:
            variables["tools"] = listed
        if request.reasoning is not None:
            variables["enable_thinking"] = request.reasoning
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, **variables)
        except TemplateError as exc:
            if has_late_system(request.messages):  # a template that allows system messages only first
                return self.render(attrs.evolve(request, messages=fold_late_system(request.messages)),
                                   add_generation_prompt)
            raise InvalidRequest(f"The chat template rejected these messages: {exc}") from None
        except TypeError as exc:
            raise InvalidRequest(f"The chat template could not render these messages: {exc}") from None


def has_late_system(messages: list[Message]) -> bool:
    return any(message.role == "system" for message in messages[1:])


def fold_late_system(messages: list[Message]) -> list[Message]:
    """``messages`` with every system message after the first message appended, in order, to the
    leading system message (created when there is none)."""
    leading = bool(messages) and messages[0].role == "system"
    head = messages[0] if leading else Message(role="system", content="")
    rest = messages[1:] if leading else list(messages)
    texts = [head.content] + [m.content for m in rest if m.role == "system"]
    folded = attrs.evolve(head, content="\n\n".join(text for text in texts if text))
    return [folded] + [m for m in rest if m.role != "system"]


@hookimpl
def register_chat_formats(register):
    register("jinja", lambda runtime, dialect: JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens))
