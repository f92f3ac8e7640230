"""Kimi K2: the tool dialect (``dialect``, K2-Instruct and K2-Thinking) and the whole-prompt chat
format (``chat_format``), registered as dialect ``kimi_k2`` and chat format ``kimi_k2``.

Entry point ``kimi_k2 = "kvgate.dialects.kimi_k2"``.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.dialects.kimi_k2.chat_format import KimiChatFormat
from kvgate.dialects.kimi_k2.dialect import KimiK2


def format_factory(runtime=None, dialect=None) -> KimiChatFormat:
    """The chat format around the dialect in use when it is Kimi K2's, else around a new one."""
    return KimiChatFormat(dialect if isinstance(dialect, KimiK2) else KimiK2())


@hookimpl
def register_dialects(register):
    register("kimi_k2", KimiK2)


@hookimpl
def register_chat_formats(register):
    register("kimi_k2", format_factory)
