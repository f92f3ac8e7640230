"""Plugin: the tokenizer cache (entry point ``tokenizer_cache``), SMG's two layers in front of the
tokenizer, through ``register_tokenizer_caches``.

Its TOML section, with the defaults::

    [tokenizer_cache]
    enable_l0 = true            # exact-text cache of encodings
    enable_l1 = true            # prefix cache at special-token boundaries
    l0_max_entries = 10000
    l0_max_bytes = 67108864
    l1_max_bytes = 52428800
    reuse_output_ids = false    # true: a resent assistant turn keeps the ids the model sampled

The service calls :class:`.prompt_cache.PromptCache`; the layers are in :mod:`.cache`,
:mod:`.cache_l1` and :mod:`.cache_lru`, the boundary choice in :mod:`.boundaries`, the resent
outputs' ids in :mod:`.outputs` and the metrics (SMG's names) in :mod:`.cache_metrics`. With the
plugin disabled the server tokenizes every prompt directly, to the same ids.
"""

from __future__ import annotations

from typing import Iterable, Optional

from kvgate.core.hookspecs import hookimpl
from kvgate.core.tokenizer_cache import CacheFactory, TokenizerCacheSetup
from kvgate.plugins.tokenizer_cache.cache_metrics import metrics_for
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.prompt_cache import PromptCache

SECTION = "tokenizer_cache"


def cache_factory(config: Optional[TokenizerCacheConfig] = None, registry=None, special_tokens: Iterable[str] = (),
                  seed: Optional[int] = None) -> CacheFactory:
    """What :class:`kvgate.core.tokenizer.service.TokenizerService` builds its caches with:
    ``config`` (default: the section's defaults), metrics in ``registry`` (None: a private one)."""
    config = config or TokenizerCacheConfig()
    metrics = metrics_for(registry)
    extra = tuple(special_tokens)

    def build(tokenizer, encode) -> PromptCache:
        return PromptCache(tokenizer, encode, config, metrics, extra, seed)

    return build


def build_prompt_cache(setup: TokenizerCacheSetup) -> PromptCache:
    return cache_factory(setup.config.section(SECTION), setup.registry)(setup.tokenizer, setup.encode)


@hookimpl
def register_tokenizer_caches(register):
    register(SECTION, build_prompt_cache)


@hookimpl
def register_config_sections(register):
    register(SECTION, TokenizerCacheConfig)
