"""Prometheus counters of the tokenizer caches, under SMG's names so SMG dashboards work.

* ``smg_tokenizer_cache_lookups_total{layer="l0"|"l1", result="hit"|"miss"}``
* ``smg_tokenizer_cache_evictions_total{layer}``
* ``smg_tokenizer_cache_reused_bytes_total{layer}`` -- input bytes whose tokens came from the cache
* ``kvgate_tokenizer_output_ids_reused_total`` and ``kvgate_tokenizer_output_ids_reused_tokens_total``
  -- resent assistant turns given the ids the model sampled for them, and those ids
  (:mod:`.outputs`)

Metric objects belong to one :class:`prometheus_client.CollectorRegistry`: :func:`metrics_for`
creates them once per registry and hands the same objects to every service that shares it (their
counts add up, as SMG's do), so tests can build as many services and registries as they like.
With no registry a cache gets a private one, and its numbers are still in its ``stats()``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Optional

from prometheus_client import CollectorRegistry, Counter

LAYERS = ("l0", "l1")

_by_registry: "weakref.WeakKeyDictionary[CollectorRegistry, TokenizerCacheMetrics]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class TokenizerCacheMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.lookups = Counter(
            "smg_tokenizer_cache_lookups", "Tokenizer cache lookups by layer and result.",
            ["layer", "result"], registry=registry,
        )
        self.evictions = Counter(
            "smg_tokenizer_cache_evictions", "Tokenizer cache entries evicted, by layer.",
            ["layer"], registry=registry,
        )
        self.reused_bytes = Counter(
            "smg_tokenizer_cache_reused_bytes", "Input bytes whose token ids came from the cache.",
            ["layer"], registry=registry,
        )
        self.output_spans = Counter(
            "kvgate_tokenizer_output_ids_reused", "Resent outputs tokenized as the ids the model sampled.",
            registry=registry,
        )
        self.output_tokens = Counter(
            "kvgate_tokenizer_output_ids_reused_tokens", "Token ids reused from sampled outputs.",
            registry=registry,
        )
        for layer in LAYERS:  # expose zeros from the start
            for result in ("hit", "miss"):
                self.lookups.labels(layer=layer, result=result)
            self.evictions.labels(layer=layer)
            self.reused_bytes.labels(layer=layer)

    def lookup(self, layer: str, hit: bool, reused_bytes: int = 0) -> None:
        self.lookups.labels(layer=layer, result="hit" if hit else "miss").inc()
        if reused_bytes:
            self.reused_bytes.labels(layer=layer).inc(reused_bytes)

    def output_reused(self, tokens: int) -> None:
        self.output_spans.inc()
        self.output_tokens.inc(tokens)

    def evicted(self, layer: str, count: int) -> None:
        if count:
            self.evictions.labels(layer=layer).inc(count)


def metrics_for(registry: Optional[CollectorRegistry]) -> TokenizerCacheMetrics:
    """The tokenizer-cache metrics of ``registry`` (a private registry when None)."""
    if registry is None:
        return TokenizerCacheMetrics(CollectorRegistry())
    with _lock:
        metrics = _by_registry.get(registry)
        if metrics is None:
            metrics = _by_registry[registry] = TokenizerCacheMetrics(registry)
        return metrics
