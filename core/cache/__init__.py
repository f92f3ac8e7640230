"""The two-tier prefix cache: resident device state in a prefix graph, backups on SSD.

- :mod:`.namespace` -- the cache identity of a model setup, token packing and the hash chain;
- :mod:`.trie` -- a radix tree of token sequences (the prefix graph of both tiers);
- :mod:`.device` -- the device tier: resident sessions, byte budget, eviction order;
- :mod:`.chunk_format`, :mod:`.chunk_files`, :mod:`.manifest`, :mod:`.ssd_store`,
  :mod:`.ssd_index`, :mod:`.ssd_tier` -- the SSD tier;
- :mod:`.manager` -- :class:`~kvgate.core.cache.manager.CacheManager`, what the engine calls
  (``plan`` / ``load`` / ``attach`` / ``finish`` / ``discard`` / ``reclaim`` / ``diagnostics`` /
  ``close``); :func:`.build.build_cache_manager` builds it from the plugins and the config.

Cache tiers are contributed by the ``register_cache_tiers`` hook under the names ``device`` and
``ssd``; ``build_tier(config, runtime)`` returns the tier. The manager uses these methods:

- both: ``name``, ``longest(namespace, tokens) -> (entry, verified_length)``,
  ``exact(namespace, cache_key, tokens) -> (entry, verified_length)``; an entry has ``tokens``;
- device (:class:`.device.DeviceTier`): ``touch``, ``admit``, ``remove``, ``superseded``,
  ``next_victim``, ``over_budget``, ``entries``, ``resident_bytes``, ``stats``;
- ssd (:class:`.ssd_tier.SsdTier`): ``bind(metrics)``, ``pin_known``, ``unpin``, ``submit``, ``touch``,
  ``read`` (any thread), ``drop_bad``, ``flush``, ``stats``, ``close``.
"""
