"""Fixtures of the cache tests: the real SmolLM2 runtime (fp32) and cache managers on tmp dirs."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from kvgate.core.cache.lookup_observers import build_lookup_observers
from kvgate.core.cache.manager import CacheManager
from kvgate.core.cache.tiers import Tiers
from kvgate.core.config import config_from_dict
from kvgate.core.plugins import build_plugin_manager


@pytest.fixture(scope="session")
def cache_runtime(request):
    """The shared fp32 runtime when the suite provides one, else one loaded here."""
    try:
        return request.getfixturevalue("smollm2_runtime")
    except pytest.FixtureLookupError:
        from kvgate.core.config import EngineConfig, ModelConfig
        from kvgate.models.formats import resolve_source
        from kvgate.models.loading import load_runtime

        cache_dir = os.environ.get("KVGATE_TEST_MODEL_CACHE", os.path.expanduser("~/.cache/kvgate-test/models"))
        return load_runtime(resolve_source(""), ModelConfig(dtype="fp32"), EngineConfig(), cache_dir)


def small_pool_runtime(runtime, pool_tokens: int):
    """A second runtime over the same weights with a KV pool of only ``pool_tokens`` tokens."""
    from kvgate.models.kv_runtime import KVRuntime

    return KVRuntime(runtime.parts, runtime.arch, runtime.weights, runtime.info, runtime.tokenizer, runtime.chat_template,
                     runtime.special_tokens, block_size=runtime.block_size, kv_pool_tokens=pool_tokens)


def cache_config(tmp_path, **cache):
    settings = {"chunk_tokens": 32, "almost_hit_min_tokens": 64, **cache}
    return config_from_dict({"state_dir": str(tmp_path), "cache": settings, "engine": {"max_batch": 4}})


def make_manager(config, runtime, registry=None, ssd=True, pm=None) -> CacheManager:
    """A manager over the built-in tiers: the device tier, and the SSD tier unless ``ssd`` is False;
    with the lookup observers of ``pm`` (default: the installed plugins)."""
    from kvgate.plugins import cache_device, cache_ssd

    backups = {"ssd": cache_ssd.build_tier(config, runtime)} if ssd else {}
    tiers = Tiers(resident=cache_device.build_tier(config, runtime), resident_name="device", backups=backups,
                  registered=("device", "ssd"))
    registry = registry if registry is not None else CollectorRegistry()
    return CacheManager(config, runtime, tiers, registry, build_lookup_observers(pm or build_plugin_manager(), config,
                                                                                  runtime, registry))
