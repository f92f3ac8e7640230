"""``register_lookup_observers``: almost-hits are the almost_hits plugin's (disabled, the cache keeps
and counts none), and a third party's observer sees each lookup's nearest stored sequences."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


def forked_lookup(manager, rt) -> tuple[list[int], int]:
    """Store a sequence, then look up a prompt that forks 3 tokens before its end."""
    _, _, stored = run_request(manager, rt, text_tokens(rt, long_text(6, 60)), output_tokens=1)
    fork = len(stored) - 3
    manager.plan(NS, stored[:fork] + text_tokens(rt, " volatile header 12345"), None)
    return stored, fork


def test_without_the_plugin_no_almost_hit_is_kept_or_counted(tmp_path, cache_runtime):
    registry = CollectorRegistry()
    manager = make_manager(cache_config(tmp_path, almost_hit_min_tokens=64), cache_runtime, registry,
                           pm=build_plugin_manager(disabled=["almost_hits"]))
    forked_lookup(manager, cache_runtime)
    assert "almost_hits" not in manager.diagnostics()
    assert registry.get_sample_value("kvgate_cache_almost_hits_total") is None
    manager.close()


class Recorder:
    def __init__(self, config, runtime, registry):
        self.lookups = []

    def looked_up(self, lookup):
        self.lookups.append(lookup)

    def diagnostics(self):
        return {"looked_up": len(self.lookups)}


class ThirdParty:
    def __init__(self):
        self.built: list[Recorder] = []

    @hookimpl
    def register_lookup_observers(self, register):
        register("recorder", lambda *args: self.built.append(Recorder(*args)) or self.built[-1])


def test_a_third_party_observer_sees_each_lookups_nearest_stored_sequences(tmp_path, cache_runtime):
    plugin = ThirdParty()
    pm = build_plugin_manager(extra_plugins=[("recorder", plugin)])
    manager = make_manager(cache_config(tmp_path, almost_hit_min_tokens=64), cache_runtime, pm=pm)
    stored, fork = forked_lookup(manager, cache_runtime)
    (recorder,) = plugin.built
    last = recorder.lookups[-1]
    assert last.namespace == NS and last.candidates[0].tier == "device"
    assert list(last.candidates[0].tokens) == stored and last.candidates[0].shared == fork
    diagnostics = manager.diagnostics()
    assert diagnostics["looked_up"] == len(recorder.lookups) >= 2
    assert len(diagnostics["almost_hits"]) == 1  # the installed observer beside it
    manager.close()
