"""CacheManager behaviour on the real runtime: namespaces, bad snapshots, almost-hits, metrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import (
    NS, assert_same_logits, full_prefill_logits, long_text, run_request, text_tokens)

pytestmark = pytest.mark.slow


def test_two_namespaces_never_share_state(tmp_path, cache_runtime):
    rt = cache_runtime
    manager = make_manager(cache_config(tmp_path), rt)
    tokens = text_tokens(rt, long_text(3, 40))
    run_request(manager, rt, tokens, cache_key="k", namespace="ns-a", output_tokens=1)
    probe = tokens + text_tokens(rt, " next")
    assert manager.plan("ns-b", probe, "k").source == "cold"
    assert manager.plan("ns-a", probe, "k").source == "device"
    manager.reclaim(10**9)
    manager.ssd.flush()
    assert manager.plan("ns-b", probe, "k").source == "cold"
    assert manager.plan("ns-a", probe, "k").source == "ssd"
    manager.close()


def test_damaged_snapshot_is_dropped_and_the_request_goes_colder(tmp_path, cache_runtime, caplog):
    rt = cache_runtime
    registry = CollectorRegistry()
    manager = make_manager(cache_config(tmp_path), rt, registry)
    tokens = text_tokens(rt, long_text(4, 40))
    _, _, stored = run_request(manager, rt, tokens, output_tokens=1)
    manager.reclaim(10**9)
    manager.ssd.flush()
    record = next(iter(manager.ssd.store.records.values()))
    path = manager.ssd.store.chunk_path(record.chunks[1])
    path.write_bytes(path.read_bytes()[:-7])  # truncated
    probe = stored + text_tokens(rt, " again")
    plan, logits, _ = run_request(manager, rt, probe)
    assert plan.source == "cold" and plan.cached_tokens == 0
    assert_same_logits(logits, full_prefill_logits(rt, probe))
    assert "dropping damaged snapshot" in caplog.text
    assert registry.get_sample_value("kvgate_cache_ssd_bad_snapshots_total") == 1
    manager.ssd.flush()
    assert record.id not in manager.ssd.store.records
    manager.close()


def test_almost_hit_is_recorded_with_fork_and_text(tmp_path, cache_runtime):
    rt = cache_runtime
    registry = CollectorRegistry()
    manager = make_manager(cache_config(tmp_path, almost_hit_min_tokens=64), rt, registry)
    base = text_tokens(rt, long_text(6, 60))
    _, _, stored = run_request(manager, rt, base, output_tokens=1)
    fork = len(stored) - 3
    changed = stored[:fork] + text_tokens(rt, " volatile header 12345")
    plan = manager.plan(NS, changed, None)
    assert plan.source == "device" and plan.cached_tokens == fork and plan.hit_type == "partial"
    (item,) = manager.diagnostics()["almost_hits"]
    assert item["fork_index"] == fork and item["stored_tokens"] == len(stored)
    assert item["prompt_after"] == rt.tokenizer.decode(changed[fork:fork + 24], skip_special_tokens=False)
    assert item["stored_after"] == rt.tokenizer.decode(stored[fork:], skip_special_tokens=False)
    assert registry.get_sample_value("kvgate_cache_almost_hits_total") == 1
    early = stored[:40] + text_tokens(rt, " a different story")  # shares too little: not an almost-hit
    manager.plan(NS, early, None)
    assert len(manager.diagnostics()["almost_hits"]) == 1
    manager.close()


def test_metrics_count_lookups_hits_and_prompt_tokens_by_source(tmp_path, cache_runtime):
    rt = cache_runtime
    registry = CollectorRegistry()
    manager = make_manager(cache_config(tmp_path), rt, registry)
    tokens = text_tokens(rt, long_text(7, 30))
    _, _, stored = run_request(manager, rt, tokens, output_tokens=1)
    probe = stored + text_tokens(rt, " more")
    run_request(manager, rt, probe, output_tokens=1)
    value = registry.get_sample_value
    assert value("kvgate:prefix_cache_hits_total", {"tier": "device"}) == len(stored)
    assert value("kvgate:prompt_tokens_by_source_total", {"source": "device"}) == len(stored)
    assert value("kvgate:prompt_tokens_by_source_total", {"source": "computed"}) == (
        len(tokens) + len(probe) - len(stored))
    assert value("kvgate_cache_lookups_total", {"tier": "device"}) >= 1
    manager.ssd.flush()
    assert value("kvgate_cache_ssd_backups_total") >= 2 and value("kvgate_cache_ssd_bytes") > 0
    manager.close()
