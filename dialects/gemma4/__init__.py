"""Gemma 4: the tool dialect (:mod:`.dialect`, its wire format in that module's docstring), its
parser (:mod:`.parser`) and argument values (:mod:`.values`), and the whole-prompt chat format
(:mod:`.chat_format`), registered as dialect ``gemma4`` and chat format ``gemma4``.

Entry point ``gemma4 = "kvgate.dialects.gemma4"``.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.dialects.gemma4.chat_format import Gemma4ChatFormat
from kvgate.dialects.gemma4.dialect import Gemma4


def format_factory(runtime=None, dialect=None) -> Gemma4ChatFormat:
    """The chat format around the dialect in use when it is Gemma 4's, else around a new one."""
    tokens = runtime.special_tokens if runtime is not None else {}  # ModelRuntime.special_tokens
    bos = tokens.get("bos_token") or ""
    return Gemma4ChatFormat(dialect if isinstance(dialect, Gemma4) else Gemma4(), bos)


@hookimpl
def register_dialects(register):
    register("gemma4", Gemma4)


@hookimpl
def register_chat_formats(register):
    register("gemma4", format_factory)
