"""DeepSeek DSML: the tool dialect (``dialect``) and the whole-prompt chat formats of V3.2 and V4
(``chat_format``), registered as dialect ``deepseek_dsml`` and chat formats ``deepseek_v32`` /
``deepseek_v4``.

Entry point ``deepseek_dsml = "kvgate.dialects.deepseek_dsml"``.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.dialects._formats import variant_format
from kvgate.dialects.deepseek_dsml.chat_format import DeepseekChatFormat
from kvgate.dialects.deepseek_dsml.dialect import DeepseekDsml


def format_factory(variant: str):
    """The chat format of ``variant``, around the dialect in use when it is that DSML variant."""
    return variant_format(variant, DeepseekDsml, DeepseekChatFormat)


@hookimpl
def register_dialects(register):
    register("deepseek_dsml", DeepseekDsml)


@hookimpl
def register_chat_formats(register):
    register("deepseek_v32", format_factory("v32"))
    register("deepseek_v4", format_factory("v4"))
