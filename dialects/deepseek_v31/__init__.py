"""DeepSeek tool-call tokens: the tool dialect (``dialect``, V3.1 / V3.2-Exp and V3 / R1), its
markers (``markers``) and the whole-prompt chat formats (``chat_format``), registered as dialect
``deepseek_v31`` and chat formats ``deepseek_v31`` / ``deepseek_r1``.

Entry point ``deepseek_v31 = "kvgate.dialects.deepseek_v31"``.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.dialects._formats import variant_format
from kvgate.dialects.deepseek_v31.chat_format import DeepseekV31ChatFormat
from kvgate.dialects.deepseek_v31.dialect import DeepseekV31


def format_factory(variant: str):
    """The chat format of ``variant``, around the dialect in use when it is that variant."""
    return variant_format(variant, DeepseekV31, DeepseekV31ChatFormat)


@hookimpl
def register_dialects(register):
    register("deepseek_v31", DeepseekV31)


@hookimpl
def register_chat_formats(register):
    register("deepseek_v31", format_factory("v31"))
    register("deepseek_r1", format_factory("r1"))
