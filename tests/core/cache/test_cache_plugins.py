"""The cache plugins: tiers, CLI and diagnostics route are entry points that build from the config."""

from __future__ import annotations

import os
import sys
import time

import click
import pytest

from kvgate.core.cache.build import build_cache_manager, build_tiers
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.plugins.cache_device.tier import DeviceTier
from kvgate.plugins.cache_ssd.store import SsdStore
from kvgate.plugins.cache_ssd.tier import WRITER_NICENESS, SsdTier
from tests.core.cache.conftest import cache_config


def test_entry_points_register_both_tiers_the_cli_and_the_route():
    pm = build_plugin_manager()
    tiers = collect(pm, "register_cache_tiers", "cache tier")
    assert tiers.owners == {"device": "device_cache", "ssd": "ssd_cache"}
    assert "cache_diagnostics" in collect(pm, "register_adapters", "adapter").names()
    root = click.Group()
    pm.hook.register_commands(cli=root)
    assert set(root.commands["cache"].commands) == {"ls", "inspect", "diagnose", "clear"}


def test_tiers_follow_the_config(tmp_path, cache_runtime):
    pm = build_plugin_manager()
    tiers = build_tiers(cache_config(tmp_path), cache_runtime, pm)
    assert isinstance(tiers["device"], DeviceTier) and isinstance(tiers["ssd"], SsdTier)
    assert tiers["ssd"].store.root == tmp_path / "ssd"
    tiers["ssd"].close()
    assert set(build_tiers(cache_config(tmp_path, ssd_enabled=False), cache_runtime, pm)) == {"device"}
    assert build_tiers(cache_config(tmp_path, enabled=False), cache_runtime, pm) == {}
    custom = cache_config(tmp_path, ssd_path=str(tmp_path / "elsewhere"))
    other = build_tiers(custom, cache_runtime, pm)["ssd"]
    assert other.store.root == tmp_path / "elsewhere"
    other.close()
    disabled = build_plugin_manager(disabled=["ssd_cache"])
    assert set(build_tiers(cache_config(tmp_path), cache_runtime, disabled)) == {"device"}


def test_a_store_another_worker_uses_is_shared_not_disabled(tmp_path, cache_runtime, caplog):
    holder = SsdStore(tmp_path / "ssd", chunk_tokens=32, capacity_bytes=10**9)
    manager = build_cache_manager(cache_config(tmp_path, ssd_worker_id="worker-2"), cache_runtime,
                                  build_plugin_manager())
    assert manager.ssd is not None and manager.device is not None
    assert manager.ssd.store.others_live() == {holder.worker} and manager.ssd.stats()["worker"] == "worker-2"
    assert holder.others_live() == {"worker-2"}
    assert "disabled" not in caplog.text
    manager.close()
    holder.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_ssd_writer_runs_at_a_low_cpu_priority(tmp_path, cache_runtime):
    tier = build_tiers(cache_config(tmp_path), cache_runtime, build_plugin_manager())["ssd"]
    try:
        deadline, niceness = time.monotonic() + 5, None
        while niceness != WRITER_NICENESS and time.monotonic() < deadline:  # the thread lowers itself when it starts
            time.sleep(0.01)
            niceness = os.getpriority(os.PRIO_PROCESS, tier.writer.native_id) if tier.writer.native_id else None
        assert niceness == WRITER_NICENESS and os.getpriority(os.PRIO_PROCESS, 0) < WRITER_NICENESS  # the writer only, not the process
    finally:
        tier.close()
