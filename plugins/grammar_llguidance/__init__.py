"""The built-in grammar backend ``llguidance``: the backend and its matcher (:mod:`.backend`) and
the translation of the fence's neutral grammar into llguidance's Lark dialect (:mod:`.lark`), and the
trial of a compiled grammar's first steps that refuses one llguidance cannot run (:mod:`.trial`)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.grammar_llguidance.backend import LlgBackend


@hookimpl
def register_grammar_backends(register):
    register("llguidance", LlgBackend)
