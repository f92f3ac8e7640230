"""Every schema a request carries made servable before the request is admitted.

:class:`JsonSchemaPreparer` (a :class:`kvgate.core.fence.schema_preparer.SchemaPreparer`) checks a
schema against the JSON Schema meta-schema (short 400 when it is not one), normalises what
constrains nothing away, relaxes what the grammar backend cannot enforce
(:mod:`kvgate.plugins.json_schema.normalize`), unrolls recursion
(:mod:`kvgate.plugins.json_schema.refs`) and test-compiles the result alone. If that fails, the
numeric keywords the backend cannot express are dropped (:mod:`kvgate.plugins.json_schema.numbers`),
keeping ``type``, ``properties``, ``required`` and the rest; a schema that still does not compile is
refused with a 400 -- never reduced to a bare type whose calls would break ``required``. Results
are cached by the schema's hash, so an agent's repeated tool list is prepared once; each relaxation is logged once,
when first seen.

A schema past the cheap size limits (:mod:`kvgate.plugins.json_schema.limits`) is refused first.
A large one is prepared in a worker process (:mod:`kvgate.plugins.json_schema.worker`), so its
pure-Python work does not slow the server's other threads.

What the backend cannot enforce it says through :class:`kvgate.core.fence.backend.GrammarBackend`:
``unsupported_keywords``, ``formats`` and ``schema_error(schema)``. ``[fence] schema_recursion_depth``
and ``max_pattern_chars`` tune it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from typing import Any

import attrs

from kvgate.core.config import FenceConfig
from kvgate.core.fence.backend import GrammarBackend
from kvgate.core.fence.cancel import checkpoint
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.fence.schema import tool_parameters
from kvgate.core.types import ChatRequest, ResponseFormat
from kvgate.plugins.json_schema.check import check_schema
from kvgate.plugins.json_schema.limits import check_limits, check_request_limits
from kvgate.plugins.json_schema.normalize import Rules, normalize
from kvgate.plugins.json_schema.numbers import drop_unenforceable_numbers
from kvgate.plugins.json_schema.refs import bound_recursion
from kvgate.plugins.json_schema.worker import SchemaWorkers, is_costly

log = logging.getLogger("kvgate.fence")
CACHE_SIZE = 512


@attrs.frozen
class Prepared:
    schema: Any
    relaxed: tuple[str, ...] = ()


def build_preparer(backend: GrammarBackend, fence_config: FenceConfig) -> "JsonSchemaPreparer":
    """The preparer for ``backend`` with the ``[fence]`` limits (the ``build`` this plugin registers)."""
    return JsonSchemaPreparer(backend, fence_config.schema_recursion_depth, fence_config.max_pattern_chars)


class JsonSchemaPreparer:
    """One backend's schema preparer, with its caches of prepared schemas and of probed small
    schemas (patterns, numeric keywords)."""

    def __init__(self, backend: GrammarBackend, depth: int = 5, max_pattern_chars: int = 4096, workers: bool = True):
        """``workers``: prepare a large schema in a worker process (:mod:`.worker`)."""
        self.backend = backend
        self.depth, self.max_pattern_chars = depth, max_pattern_chars
        self.workers = SchemaWorkers(
            functools.partial(JsonSchemaPreparer, backend, depth, max_pattern_chars, workers=False)) if workers else None
        self.cache: OrderedDict[str, Prepared] = OrderedDict()
        self.probes: OrderedDict[str, str] = OrderedDict()  # probed small schema (JSON) -> its error
        self.lock = threading.Lock()

    def prepare_request(self, request: ChatRequest) -> tuple[ChatRequest, list[str]]:
        """``request`` with every tool's parameters and the response schema prepared, and the
        relaxations made ("<where>: <keyword> at <path> ...")."""
        notes: list[str] = []
        tools = []
        for tool in request.tools:
            where = f"tool {tool.name!r}"
            prepared = self.prepare(tool_parameters(tool), where, "tools")
            notes.extend(f"{where}: {note}" for note in prepared.relaxed)
            tools.append(attrs.evolve(tool, parameters=prepared.schema))
        fmt = request.response_format
        if fmt.type == "json_schema" and isinstance(fmt.schema, (dict, bool)):
            prepared = self.prepare(fmt.schema, "response_format", "response_format")
            notes.extend(f"response_format: {note}" for note in prepared.relaxed)
            fmt = ResponseFormat(fmt.type, prepared.schema if isinstance(prepared.schema, dict) else {},
                                 fmt.name, fmt.strict)
        return attrs.evolve(request, tools=tools, response_format=fmt), notes

    def check_limits(self, request: ChatRequest) -> None:
        """Refuse a schema past the cheap size limits (:mod:`kvgate.plugins.json_schema.limits`)."""
        check_request_limits(request)

    def prepare(self, schema: Any, where: str, param: str) -> Prepared:
        key = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
                return hit
        checkpoint()
        prepared = self.prepare_apart(schema, where, param) if is_costly(schema) else self.prepare_here(
            schema, where, param)
        if prepared.relaxed:
            log.warning("%s: schema relaxed for the grammar engine: %s", where, "; ".join(prepared.relaxed))
        with self.lock:
            self.cache[key] = prepared
            while len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)
        return prepared

    def prepare_apart(self, schema: Any, where: str, param: str) -> Prepared:
        """A large schema, prepared in a worker process (on this thread when none can run)."""
        prepared = self.workers.prepare(schema, where, param) if self.workers is not None else None
        return prepared if prepared is not None else self.prepare_here(schema, where, param)

    def prepare_here(self, schema: Any, where: str, param: str) -> Prepared:
        """``schema`` prepared on this thread (uncached)."""
        check_limits(schema, where, param)  # before any costly work
        check_schema(schema, where, param)
        checkpoint()
        rules = Rules(frozenset(self.backend.unsupported_keywords), self.backend.formats,
                      self.max_pattern_chars, self.pattern_error)
        out = normalize(schema, rules)
        checkpoint()
        out, recursive = bound_recursion(out, self.depth, where, param)
        checkpoint()
        if recursive:
            rules.notes.append(f"recursive $ref unrolled {self.depth} levels deep (any value below)")
        error = self.schema_error(out)
        if error:
            out = drop_unenforceable_numbers(out, self.probe_error, rules.notes)
            checkpoint()
            error = self.schema_error(out)
        if error:
            raise FenceRequestError(f"{where}: the grammar engine cannot enforce this schema "
                                    f"({error.splitlines()[0][:160]}); simplify it", param=param)
        return Prepared(out, tuple(rules.notes))

    def schema_error(self, schema: Any) -> str:
        return self.backend.schema_error(schema)

    def pattern_error(self, pattern: str) -> str:
        return self.probe_error({"type": "string", "pattern": pattern})

    def probe_error(self, schema: dict) -> str:
        """Why the small ``schema`` alone does not compile (one line), or ''; cached."""
        key = json.dumps(schema, sort_keys=True)
        with self.lock:
            if key in self.probes:
                return self.probes[key]
        checkpoint()  # each probe is a compile: a cancelled build stops between them
        error = self.schema_error(schema)
        error = error.splitlines()[0] if error else ""
        with self.lock:
            self.probes[key] = error
            while len(self.probes) > CACHE_SIZE:
                self.probes.popitem(last=False)
        return error
