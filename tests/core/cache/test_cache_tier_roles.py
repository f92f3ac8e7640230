"""Tiers register a role, not a name: a third-party backup tier is consulted, backed up to and
restored from, in order beside the SSD tier; two resident tiers are a configuration error."""

from __future__ import annotations

import pytest

from kvgate.core.cache.build import build_cache_manager, build_tier_set
from kvgate.core.cache.tiers import TierSpec
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from kvgate.plugins import cache_device
from tests.core.cache.conftest import cache_config
from tests.core.cache.memory_tier import MemoryStore, MemoryTierPlugin
from tests.core.cache.real_helpers import NS, assert_same_logits, full_prefill_logits, long_text, run_request, text_tokens


class SecondResident:
    @hookimpl
    def register_cache_tiers(self, register):
        register("second_device", TierSpec(role="resident", build=cache_device.build_tier))


class _NoRuntime:
    """Enough of a runtime for the device tier's constructor."""

    block_size = 16


class NotASpec:
    @hookimpl
    def register_cache_tiers(self, register):
        register("bare", cache_device.build_tier)


def test_two_enabled_resident_tiers_are_a_config_error_naming_both(tmp_path):
    pm = build_plugin_manager(extra_plugins=[("second_resident", SecondResident())])
    with pytest.raises(ConfigError, match="'device'.*'second_device'"):
        build_tier_set(cache_config(tmp_path), None, pm)
    disabled = build_plugin_manager(disabled=["device_cache"], extra_plugins=[("second_resident", SecondResident())])
    tiers = build_tier_set(cache_config(tmp_path, ssd_enabled=False), _NoRuntime(), disabled)
    assert tiers.resident_name == "second_device" and tiers.backups == {}


def test_a_registration_without_a_role_is_refused(tmp_path):
    pm = build_plugin_manager(extra_plugins=[("bare", NotASpec())])
    with pytest.raises(TypeError, match="'bare'.*not a TierSpec"):
        build_tier_set(cache_config(tmp_path), None, pm)
    with pytest.raises(ValueError):
        TierSpec(role="device", build=cache_device.build_tier)


def test_backups_follow_their_order_and_each_gets_the_snapshot(tmp_path, cache_runtime):
    rt, store = cache_runtime, MemoryStore()
    pm = build_plugin_manager(extra_plugins=[("memory_cache", MemoryTierPlugin(store, order=50))])
    manager = build_cache_manager(cache_config(tmp_path), rt, pm)
    assert list(manager.backup_tiers) == ["memory", "ssd"] and manager.resident_name == "device"
    tokens = text_tokens(rt, long_text(9, 40))
    _, _, stored = run_request(manager, rt, tokens, cache_key="conv", output_tokens=1)
    manager.reclaim(10**9)
    manager.ssd.flush()
    assert len(store.snapshots) == 1 and len(manager.ssd.store.records) == 1
    probe = stored + text_tokens(rt, " then more")
    plan, logits, _ = run_request(manager, rt, probe, cache_key="conv", output_tokens=1)
    assert plan.source == "memory" and plan.cached_ssd == len(stored) and store.restored == 1
    assert_same_logits(logits, full_prefill_logits(rt, probe))
    assert manager.diagnostics()["memory"] == {"snapshots": 2, "chunks": len(store.chunks)}
    manager.close()
    assert store.closed == 1


def test_later_backup_is_consulted_when_the_first_has_nothing(tmp_path, cache_runtime):
    rt, store = cache_runtime, MemoryStore()
    pm = build_plugin_manager(extra_plugins=[("memory_cache", MemoryTierPlugin(store, order=200))])
    manager = build_cache_manager(cache_config(tmp_path), rt, pm)
    assert list(manager.backup_tiers) == ["ssd", "memory"]
    tokens = text_tokens(rt, long_text(10, 40))
    _, _, stored = run_request(manager, rt, tokens, output_tokens=1)
    manager.reclaim(10**9)
    manager.ssd.flush()
    manager.ssd.store.clear()  # the first backup tier loses it: the second one still has it
    manager.ssd.index.tries.clear()
    plan, logits, _ = run_request(manager, rt, stored + text_tokens(rt, " next"), namespace=NS, output_tokens=1)
    assert plan.source == "memory" and plan.cached_tokens == len(stored)
    assert_same_logits(logits, full_prefill_logits(rt, stored + text_tokens(rt, " next")))
    manager.close()
