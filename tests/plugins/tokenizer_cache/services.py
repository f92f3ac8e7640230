"""A tokenizer service with the plugin's cache in front, built as the server builds it."""

from __future__ import annotations

from typing import Iterable, Optional

from prometheus_client import CollectorRegistry
from tokenizers import Tokenizer

from kvgate.core.tokenizer.service import TokenizerService
from kvgate.plugins.tokenizer_cache import cache_factory
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig


def cached_service(tokenizer: Tokenizer, config: Optional[TokenizerCacheConfig] = None,
                   registry: Optional[CollectorRegistry] = None, special_tokens: Iterable[str] = (),
                   seed: Optional[int] = None) -> TokenizerService:
    return TokenizerService(tokenizer, cache_factory(config, registry, special_tokens, seed))
