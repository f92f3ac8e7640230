"""The plugin's cache behind a TokenizerService: L0 and L1 semantics, budgets, metrics, fingerprints
and bad input."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from prometheus_client import CollectorRegistry
from tokenizers import AddedToken, Tokenizer

from kvgate.core.errors import InvalidRequest
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig

from tests.plugins.tokenizer_cache.services import cached_service


def chatml(turns: int, start: int = 0) -> str:
    parts = ["<|im_start|>system\nYou are helpful.<|im_end|>\n"]
    for turn in range(start, start + turns):
        parts.append(f"<|im_start|>user\nquestion {turn}: héllo 中文 😀<|im_end|>\n")
        parts.append(f"<|im_start|>assistant\nanswer {turn}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def l0_only(entries: int) -> TokenizerCacheConfig:
    return TokenizerCacheConfig(enable_l0=True, enable_l1=False, l0_max_entries=entries)


def l1_only(max_bytes: int = 50 * 1024 * 1024) -> TokenizerCacheConfig:
    return TokenizerCacheConfig(enable_l0=False, enable_l1=True, l1_max_bytes=max_bytes)


def test_l0_exact_hit_and_entry_cap(small_bpe):
    service = cached_service(small_bpe, l0_only(3), seed=0)
    for text in ["a", "b", "c"]:
        service.encode(text)
    service.encode("a")  # a is now the most recently used
    service.encode("d")  # with few entries the sample is all of them: exact LRU evicts b
    stats = service.cache_stats()["l0"]
    assert (stats["entries"], stats["evictions"], stats["hits"]) == (3, 1, 1)
    service.encode("a")
    service.encode("b")
    stats = service.cache_stats()["l0"]
    assert (stats["hits"], stats["misses"]) == (2, 5)
    assert stats["reused_bytes"] == 2


def test_l0_stays_within_entry_cap_under_churn(small_bpe):
    service = cached_service(small_bpe, l0_only(20), seed=0)
    for i in range(300):
        assert service.encode(f"text {i % 50} 中") == service.encode_uncached(f"text {i % 50} 中")
    stats = service.cache_stats()["l0"]
    assert stats["entries"] == 20 and stats["evictions"] == stats["misses"] - 20


def test_l1_without_special_tokens_always_misses(small_bpe):
    service = cached_service(small_bpe, l1_only(), seed=0)
    for _ in range(3):
        service.encode("no special tokens here")
    stats = service.cache_stats()["l1"]
    assert (stats["hits"], stats["misses"], stats["entries"]) == (0, 3, 0)


def test_l1_miss_stores_every_boundary_and_hit_adds_the_deepest(small_bpe):
    service = cached_service(small_bpe, l1_only(), seed=0)
    first = chatml(2)
    service.encode(first)
    boundaries = sum(first.count(s) for s in ("<|im_start|>", "<|im_end|>"))
    assert service.cache_stats()["l1"]["entries"] == boundaries
    grown = first + "reply<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"
    assert service.encode(grown) == service.encode_uncached(grown)
    stats = service.cache_stats()["l1"]
    assert (stats["hits"], stats["entries"]) == (1, boundaries + 1)
    deepest = first.rindex("<|im_start|>") + len("<|im_start|>")
    assert stats["reused_bytes"] == len(first[:deepest].encode("utf-8"))
    service.encode(grown + "tail without specials")  # deepest boundary already cached: no new entry
    assert service.cache_stats()["l1"]["entries"] == boundaries + 1


def test_l1_byte_budget_holds_and_evicts(small_bpe):
    budget = 20_000
    service = cached_service(small_bpe, l1_only(budget), seed=0)
    for turns in range(1, 40):
        text = chatml(turns)
        assert service.encode(text) == service.encode_uncached(text)
        assert service.cache_stats()["l1"]["bytes"] <= budget
    stats = service.cache_stats()["l1"]
    assert stats["evictions"] > 0 and stats["hits"] > 0


def test_metrics_use_smg_names_and_the_given_registry(small_bpe):
    registry = CollectorRegistry()
    service = cached_service(small_bpe, TokenizerCacheConfig(l1_max_bytes=3000), registry=registry)
    other = cached_service(small_bpe, registry=CollectorRegistry())  # separate registry: no clash
    for turns in range(1, 12):
        service.encode(chatml(turns))
    service.encode(chatml(3))
    other.encode(chatml(1))

    def value(name: str, **labels) -> float:
        return registry.get_sample_value(f"smg_tokenizer_cache_{name}_total", labels)

    stats = service.cache_stats()
    for layer in ("l0", "l1"):
        assert value("lookups", layer=layer, result="hit") == stats[layer]["hits"]
        assert value("lookups", layer=layer, result="miss") == stats[layer]["misses"]
        assert value("evictions", layer=layer) == stats[layer]["evictions"]
        assert value("reused_bytes", layer=layer) == stats[layer]["reused_bytes"]
    assert stats["l0"]["hits"] == 1 and stats["l1"]["evictions"] > 0
    shared = cached_service(small_bpe, registry=registry)  # same registry: counters are shared
    shared.encode("x")
    assert value("lookups", layer="l0", result="miss") == stats["l0"]["misses"] + 1


def test_fingerprint_scopes_the_caches(small_bpe):
    service = cached_service(small_bpe, seed=0)
    text = chatml(2) + "<new_special> after"
    before = service.encode(text)
    assert service.reload(Tokenizer.from_str(small_bpe.to_str())) is False
    changed = Tokenizer.from_str(small_bpe.to_str())
    changed.add_special_tokens([AddedToken("<new_special>", special=True, normalized=False)])
    old_fingerprint = service.fingerprint
    assert service.reload(changed) is True and service.fingerprint != old_fingerprint
    after = service.encode(text)
    assert after == changed.encode(text, add_special_tokens=False).ids and after != before
    assert service.cache_stats()["l0"]["hits"] == 0


def test_service_ignores_later_changes_and_truncation_of_the_callers_tokenizer(small_bpe):
    callers = Tokenizer.from_str(small_bpe.to_str())
    callers.enable_truncation(4)
    service = cached_service(callers)
    text = chatml(3)
    callers.add_special_tokens([AddedToken("question", special=True, normalized=False)])
    assert service.encode(text) == small_bpe.encode(text, add_special_tokens=False).ids
    assert len(service.encode(text)) > 4


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["list"], "lone \ud800 surrogate<|im_end|>"])
def test_encode_rejects_what_is_not_text(small_bpe, bad):
    with pytest.raises(InvalidRequest):
        cached_service(small_bpe).encode(bad)


def test_l1_memory_really_held_stays_within_the_budget(small_bpe):
    """Measured with tracemalloc: entries of many sizes, under eviction pressure."""
    budget = 300_000
    texts = [chatml(turns) for turns in range(1, 80)] + [f"<|im_start|>{i}<|im_end|>" for i in range(3000)]
    service = cached_service(small_bpe, l1_only(budget), seed=0)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for text in texts:
        service.encode(text)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    stats = service.cache_stats()["l1"]
    assert stats["evictions"] > 0 and stats["bytes"] <= budget
    assert held <= budget, f"{held} bytes held for a {budget}-byte budget"


def test_l0_is_bounded_in_bytes_as_well_as_entries(smollm2_tokenizer):
    from kvgate.plugins.tokenizer_cache.cache import TokenizerCache
    from kvgate.plugins.tokenizer_cache.cache_metrics import TokenizerCacheMetrics
    from prometheus_client import CollectorRegistry

    config = TokenizerCacheConfig(enable_l0=True, enable_l1=False, l0_max_entries=1000, l0_max_bytes=200_000)
    cache = TokenizerCache(lambda text: smollm2_tokenizer.encode(text, add_special_tokens=False), config, {},
                           TokenizerCacheMetrics(CollectorRegistry()), seed=1)
    texts = [f"text {i} " + "lorem ipsum " * 3000 for i in range(20)]  # ~36 kB each, 20 distinct
    for text in texts:
        assert cache.encode(text) == smollm2_tokenizer.encode(text, add_special_tokens=False).ids
    l0 = cache.stats()["l0"]
    assert 0 < l0["bytes"] <= l0["max_bytes"] == 200_000 and l0["entries"] < len(texts) and l0["evictions"] > 0
