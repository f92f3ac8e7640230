"""Harmony (gpt-oss): the tool dialect (``dialect``), its output parser (``parser``), the tools
section (``typescript``) and the whole-prompt chat format (``chat_format``), registered as dialect
``harmony`` and chat format ``harmony``.

Entry point ``harmony = "kvgate.dialects.harmony"``.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.dialects.harmony.chat_format import HarmonyChatFormat
from kvgate.dialects.harmony.dialect import Harmony


def format_factory(runtime=None, dialect=None) -> HarmonyChatFormat:
    """The chat format around the dialect in use when it is Harmony, else around a new one."""
    return HarmonyChatFormat(dialect if isinstance(dialect, Harmony) else Harmony())


@hookimpl
def register_dialects(register):
    register("harmony", Harmony)


@hookimpl
def register_chat_formats(register):
    register("harmony", format_factory)
