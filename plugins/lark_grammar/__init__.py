"""The ``lark`` grammar syntax of custom tools: a non-recursive Lark grammar (Codex's ``exec`` and
``apply_patch``) translated into one regex (:mod:`.to_regex`, reading the grammar with
:mod:`.tokens`), which the fence enforces as the tool input's pattern.

Entry point ``lark_grammar = "kvgate.plugins.lark_grammar"``; hook ``register_tool_grammars``.
"""

from __future__ import annotations

import functools

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.lark_grammar.to_regex import lark_to_regex


class LarkSyntax:
    """:class:`kvgate.core.fence.custom.ToolGrammarSyntax` for Lark (translations cached: an agent
    sends the same grammars every turn)."""

    @functools.lru_cache(maxsize=256)
    def to_regex(self, definition: str) -> str:
        return lark_to_regex(definition)


@hookimpl
def register_tool_grammars(register):
    register("lark", LarkSyntax())
