"""The prefix cache host: the cache manager over tiers that plugins contribute.

- :mod:`.namespace` -- the cache identity of a model setup, token packing and the hash chain;
- :mod:`.tiers` -- :class:`~.tiers.TierSpec` (what ``register_cache_tiers`` registers: a role and a
  builder) and the Protocols of a resident tier and a backup tier: exactly what the manager calls;
- :mod:`.snapshot` -- the types the manager shares with backup tiers (``PendingSnapshot``, ``BadChunk``);
- :mod:`.manager` -- :class:`~kvgate.core.cache.manager.CacheManager`, what the engine calls
  (``plan`` / ``load`` / ``attach`` / ``finish`` / ``discard`` / ``reclaim`` / ``diagnostics`` /
  ``close``): lookup order (:mod:`.lookup`), eviction order (:mod:`.residency`), backups
  (:mod:`.backup`), restores (:mod:`.restore`, :mod:`.restore_pool`), lookup observers
  (:mod:`.lookup_observers`), retention pins (:mod:`.pinning` over the :mod:`.pins` table, requests' marks in :mod:`.retention`) and
  metrics (:mod:`.metrics`); :func:`.build.build_cache_manager` builds it
  from the plugins and the config.

The concrete tiers are plugins: ``kvgate.plugins.cache_device`` (resident) and
``kvgate.plugins.cache_ssd`` (backup).
"""
