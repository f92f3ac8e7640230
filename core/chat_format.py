"""Chat formats: canonical messages and tools -> prompt text, contributed through
``register_chat_formats``.

The default, ``jinja``, renders the model's own chat template (the ``jinja_chat_format`` plugin).
Models that ship no template (DeepSeek DSML) get a whole-prompt encoder from their dialect plugin.
"""

from __future__ import annotations

import abc

from kvgate.core.dialect import Dialect
from kvgate.core.types import ChatRequest


class ChatFormat(abc.ABC):
    """Renders whole prompts. Registered formats (``register_chat_formats``) subclass it."""

    name: str = ""
    source: str = ""
    """The template text it renders with ("" for a format written in code); with ``name`` it is
    part of the cache namespace, so a changed template never hits another's prefixes."""
    dialect: Dialect
    """The dialect its prompts are written for; a format may bring its own variant of the
    configured one, which then parses and fences the output."""

    @abc.abstractmethod
    def render(self, request: ChatRequest, add_generation_prompt: bool = True) -> str:
        """The exact prompt text for ``request``."""

    def parser_start(self, request: ChatRequest) -> str:
        """Where the rendered prompt leaves the model: ``"content"``, ``"reasoning"`` (inside an
        open thinking block) or ``"after_reasoning"``; the parser and the fence start there."""
        return "content"
