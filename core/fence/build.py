"""Composing one request's fence: plan -> dialect grammar -> backend matcher, plus guards."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import attrs

from kvgate.core.config import Config
from kvgate.core.fence.backend import grammar_backend
from kvgate.core.fence.budget import BudgetPlan
from kvgate.core.fence.closing import Closer
from kvgate.core.fence.custom import refuse_relaxed_grammars, with_fenced_custom_tools
from kvgate.core.fence.grammar import Node, literals_in
from kvgate.core.fence.guards import GuardSetup, build_guards
from kvgate.core.fence.plan import FencePlan, plan_for
from kvgate.core.fence.refiners import mask_refiners
from kvgate.core.fence.request import RequestFence
from kvgate.core.fence.schema import properties
from kvgate.core.fence.schema_preparer import schema_preparer
from kvgate.core.fence.tokens import TokenizerInfo
from kvgate.core.dialect import Dialect
from kvgate.core.types import ChatRequest

CONSTRAINT_CACHE_SIZE = 64


def closer_for(info: TokenizerInfo, dialect: Dialect) -> Closer:
    reasoning_close = dialect.literals.get("think_close", "")
    key = (*dialect.closing_literals, reasoning_close)
    with info.lock:
        closer = info.backends.closers.get(key)
    if closer is None:
        closer = Closer(info, list(dialect.closing_literals), reasoning_close)
        with info.lock:
            info.backends.closers[key] = closer
    return closer


def grammar_for(dialect: Dialect, plan: FencePlan) -> Optional[Node]:
    """The grammar node of ``plan`` in ``dialect``'s syntax (``dialect.fence_grammar``), or None
    when nothing is constrained."""
    if not plan.constrains:
        return None
    return dialect.fence_grammar(plan)


def verify_dialect(info: TokenizerInfo, dialect: Dialect) -> None:
    info.verify_literals(f"dialect {dialect.name!r}", dialect.literals.values())


def prepare_fences(tokenizer_info: TokenizerInfo, dialect: Dialect, config: Config, pm) -> None:
    """Do the one-time work (tokenizer tables, backend, literal check) before the first request."""
    if config.fence.enabled:
        verify_dialect(tokenizer_info, dialect)
        grammar_backend(pm, config.fence.backend, tokenizer_info)
        schema_preparer(pm, config, tokenizer_info)  # a bad [fence] schema_preparer fails at startup
        closer_for(tokenizer_info, dialect)
        mask_refiners(pm, tokenizer_info)


def build_request_fence(request: ChatRequest, dialect: Dialect, tokenizer_info: TokenizerInfo, config: Config,
                        pm, *, start_in: str = "content") -> Optional[RequestFence]:
    """The fence of one request, or None when nothing constrains it (and guards are off).

    ``start_in`` says where the completion starts for the dialect's parser ("content",
    "reasoning", "after_reasoning"). Raises FenceError for an incompatible tokenizer and
    FenceRequestError for a constraint that cannot compile.
    """
    relaxed: list[str] = []
    if config.fence.enabled and plan_for(request, start_in).constrains:
        verify_dialect(tokenizer_info, dialect)  # a tokenizer that cannot spell the markup fails first
        request = with_fenced_custom_tools(request, pm)
        preparer = schema_preparer(pm, config, tokenizer_info)
        if preparer is not None:  # none registered: the backend compiles the schemas as sent
            request, relaxed = preparer.prepare_request(request)
            refuse_relaxed_grammars(request, relaxed)
    plan = plan_for(request, start_in)
    matcher = closer = prefer = call_cost = None
    if config.fence.enabled and plan.constrains:
        verify_dialect(tokenizer_info, dialect)
        closer = closer_for(tokenizer_info, dialect)
        prefer = closer.preferred(required_names(plan.tools))
        template, call_cost = compiled_constraint(pm, config, tokenizer_info, dialect, plan, closer, prefer)
        matcher = template.copy()
    literals = dialect.literals
    setup = GuardSetup(config, tokenizer_info, literals.get("think_open", ""),
                       literals.get("think_close", ""), start_in == "reasoning")
    guards = build_guards(pm, setup)
    if matcher is None and not guards:
        return None
    plan_state = None
    if matcher is not None:
        plan_state = BudgetPlan(closer, prefer, dialect.trigger, call_cost, plan.mode,
                                plan.start_in)
    refiners = mask_refiners(pm, tokenizer_info) if matcher is not None else []
    fence = RequestFence(tokenizer_info.vocab_size, matcher, guards, plan_state, tokenizer_info.eos_ids, refiners)
    fence.relaxed = relaxed
    return fence


def compiled_constraint(pm, config: Config, info: TokenizerInfo, dialect: Dialect, plan: FencePlan, closer: Closer,
                        prefer) -> tuple[Any, Optional[int]]:
    """(template matcher, shortest call cost) of ``plan``, cached by the plan's content: an agent
    that repeats its tool list composes and compiles its grammar once."""
    key = plan_key(dialect, plan, config.fence.backend)
    with info.lock:
        cache = info.backends.constraints
        hit = cache.get(key)
        if hit is not None and hit[0] is dialect:  # the entry holds its dialect, so ids are not reused
            cache.move_to_end(key)
            return hit[1], hit[2]
    grammar = grammar_for(dialect, plan)
    info.verify_literals(f"the fence grammar of dialect {dialect.name!r}", literals_in(grammar))
    backend = grammar_backend(pm, config.fence.backend, info)
    entry = (dialect, backend.matcher(grammar), shortest_call(backend, closer, dialect, plan, prefer))
    with info.lock:
        cache[key] = entry
        while len(cache) > CONSTRAINT_CACHE_SIZE:
            cache.popitem(last=False)
    return entry[1], entry[2]


def plan_key(dialect: Dialect, plan: FencePlan, backend: str) -> str:
    """A digest of everything a fence grammar depends on."""
    tools = [[tool.name, tool.namespace, tool.parameters] for tool in plan.tools]
    text = json.dumps([id(dialect), dialect.name, backend, tools, plan.mode, plan.max_calls, plan.response_schema,
                       plan.start_in], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def shortest_call(backend, closer: Closer, dialect: Dialect, plan, prefer) -> Optional[int]:
    """Tokens of the shortest complete call of ``plan``'s tools (cached per tool set), or None when
    no second structure can start (one call at most, or no tools)."""
    if not plan.tools or plan.mode == "none" or (plan.mode == "required" and plan.max_calls == 1):
        return None
    single = attrs.evolve(plan, mode="required", max_calls=1, response_schema=None, start_in="content")
    grammar = grammar_for(dialect, single)
    with closer.info.lock:
        cached = closer.costs.get(grammar)
    if cached is None:
        path = closer.path(backend.matcher(grammar), prefer=prefer)
        cached = len(path) if path is not None else -1
        with closer.info.lock:
            closer.costs[grammar] = cached
    return cached if cached >= 0 else None


def required_names(tools) -> list[str]:
    return [name for tool in tools for name, _, required in properties(tool) if required]
