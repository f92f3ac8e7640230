"""A tokenizer service with the plugin's cache in front, built as the server builds it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from prometheus_client import CollectorRegistry
from tokenizers import Tokenizer

from kvgate.core.tokenizer.service import TokenizerService
from kvgate.plugins.tokenizer_cache import cache_factory
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig


def cached_service(tokenizer: Tokenizer, config: Optional[TokenizerCacheConfig] = None,
                   registry: Optional[CollectorRegistry] = None, special_tokens: Iterable[str] = (),
                   seed: Optional[int] = None, outputs_root: Optional[Path] = None,
                   outputs_max_bytes: int = 16 * 1024 * 1024) -> TokenizerService:
    """``outputs_root``: keep registered outputs on disk there (as beside the SSD tier)."""
    factory = cache_factory(config, registry, special_tokens, seed, outputs_root, outputs_max_bytes)
    return TokenizerService(tokenizer, factory)
