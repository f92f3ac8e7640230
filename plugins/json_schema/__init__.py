"""The built-in schema preparer ``json_schema``: a client's JSON Schema checked (:mod:`.check`),
held to size limits (:mod:`.limits`), normalised and relaxed to what the grammar backend enforces
(:mod:`.normalize`, :mod:`.keywords`) and its recursion unrolled (:mod:`.refs`), by
:class:`.prepare.JsonSchemaPreparer`."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.json_schema.prepare import build_preparer


@hookimpl
def register_schema_preparers(register):
    register("json_schema", build_preparer)
