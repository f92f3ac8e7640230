"""Plugin: the tokenizer cache (entry point ``tokenizer_cache``), SMG's two layers in front of the
tokenizer, through ``register_tokenizer_caches``.

Its TOML section, with the defaults::

    [tokenizer_cache]
    enable_l0 = true            # exact-text cache of encodings
    enable_l1 = true            # prefix cache at special-token boundaries
    l0_max_entries = 10000
    l0_max_bytes = 67108864
    l1_max_bytes = 52428800
    reuse_output_ids = true     # a resent assistant turn keeps the ids the model sampled
    output_ids_max_bytes = 0    # their bound on disk; 0 = [cache] ssd_bytes / 256, at least 16 MiB

The service calls :class:`.prompt_cache.PromptCache`; the layers are in :mod:`.cache`,
:mod:`.cache_l1` and :mod:`.cache_lru`, the boundary choice in :mod:`.boundaries`, the resent
outputs' ids in :mod:`.outputs` (kept on disk beside the SSD tier by :mod:`.outputs_store`, so
that a restart or another worker on the same store tokenizes a resent turn the same) and the
metrics (SMG's names) in :mod:`.cache_metrics`. With the plugin disabled the server tokenizes every
prompt directly, to the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from kvgate.core.hookspecs import hookimpl
from kvgate.core.tokenizer_cache import CacheFactory, TokenizerCacheSetup
from kvgate.plugins.tokenizer_cache.cache_metrics import metrics_for
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.prompt_cache import PromptCache

SECTION = "tokenizer_cache"
MIN_OUTPUT_IDS_BYTES = 16 * 1024 * 1024
SSD_BYTES_PER_OUTPUT_BYTE = 256  # the registry spends ~9 bytes a token, the SSD tier >= 2 KiB


def cache_factory(config: Optional[TokenizerCacheConfig] = None, registry=None, special_tokens: Iterable[str] = (),
                  seed: Optional[int] = None, outputs_root: Optional[Path] = None,
                  outputs_max_bytes: int = MIN_OUTPUT_IDS_BYTES) -> CacheFactory:
    """What :class:`kvgate.core.tokenizer.service.TokenizerService` builds its caches with:
    ``config`` (default: the section's defaults), metrics in ``registry`` (None: a private one),
    outputs kept under ``outputs_root`` (None: in memory), at most ``outputs_max_bytes`` there."""
    config = config or TokenizerCacheConfig()
    metrics = metrics_for(registry)
    extra = tuple(special_tokens)

    def build(tokenizer, encode) -> PromptCache:
        return PromptCache(tokenizer, encode, config, metrics, extra, seed, outputs_root, outputs_max_bytes)

    return build


def outputs_on_disk(setup: TokenizerCacheSetup) -> tuple[Optional[Path], int]:
    """Where the outputs' ids are kept (beside the SSD tier; None when it is off) and their bound."""
    config, section = setup.config, setup.config.section(SECTION)
    if not (config.cache.ssd_enabled and section.reuse_output_ids):
        return None, MIN_OUTPUT_IDS_BYTES
    bound = section.output_ids_max_bytes or max(MIN_OUTPUT_IDS_BYTES,
                                                config.cache.ssd_bytes // SSD_BYTES_PER_OUTPUT_BYTE)
    return config.path_in_state(config.cache.ssd_path, "ssd") / "output_ids", bound


def build_prompt_cache(setup: TokenizerCacheSetup) -> PromptCache:
    root, bound = outputs_on_disk(setup)
    return cache_factory(setup.config.section(SECTION), setup.registry, outputs_root=root,
                         outputs_max_bytes=bound)(setup.tokenizer, setup.encode)


@hookimpl
def register_tokenizer_caches(register):
    register(SECTION, build_prompt_cache)


@hookimpl
def register_config_sections(register):
    register(SECTION, TokenizerCacheConfig)
