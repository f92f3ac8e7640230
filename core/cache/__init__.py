"""The two-tier prefix cache: resident device state in a prefix graph, backups on SSD.

- :mod:`.namespace` -- the cache identity of a model setup, token packing and the hash chain;
- :mod:`.trie` -- a radix tree of token sequences (the prefix graph of both tiers);
- :mod:`.device` -- the device tier: resident sessions, byte budget, eviction order;
- :mod:`.chunk_format`, :mod:`.ssd_store`, :mod:`.ssd_tier` -- the SSD tier;
- :mod:`.manager` -- :class:`~kvgate.core.cache.manager.CacheManager`, what the engine calls.
"""
