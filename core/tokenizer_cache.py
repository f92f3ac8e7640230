"""What a tokenizer cache does for the tokenizer service, and how the host builds the one in use.

A tokenizer cache sits in front of one tokenizer (``register_tokenizer_caches``): the service
asks it for the ids of each text it does not tokenize directly (empty, over-long and invalid texts
never reach it). A cache belongs to one tokenizer fingerprint: the service builds a fresh one from
the same factory when it reloads a different tokenizer. At most one cache is in use; with none the
service tokenizes every text directly.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence

import attrs
import pluggy
from prometheus_client import CollectorRegistry
from tokenizers import Encoding, Tokenizer

from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import collect


class TokenizerCache(Protocol):
    """Ids of texts for one tokenizer, exactly as its uncached ``encode`` would give them."""

    def encode(self, text: str, namespace: str = "") -> list[int]:
        """The ids of non-empty ``text`` (no special tokens added; those written in it are kept).

        Entries are scoped by the cache ``namespace`` (a tenant's, as the KV cache's): a text
        cached in one namespace is never a hit in another, so no tenant can time another's texts."""

    def encode_prompt(self, text: str, namespace: str) -> list[int]:
        """The ids of a non-empty prompt of cache ``namespace`` (entries scoped as :meth:`encode`'s);
        may differ from ``encode`` only where the cache keeps ids registered for that namespace by
        :meth:`register_output`."""

    def register_output(self, namespace: str, prompt: Sequence[int], output: Sequence[int]) -> bool:
        """Offer ``output``, sampled after ``prompt`` in ``namespace``, for later prompts that
        resend it; returns whether it was kept."""

    def stats(self) -> dict[str, Any]:
        """JSON-ready counters and sizes of the cache (the service adds the tokenizer fingerprint)."""

    def clear(self) -> None:
        """Drop every entry; later calls give the same ids, only slower."""


@attrs.frozen
class TokenizerCacheSetup:
    """What a cache is built from, once per tokenizer the service loads."""

    tokenizer: Tokenizer  # the service's private copy: read it, never change it
    encode: Callable[[str], Encoding]  # uncached, no special tokens added
    config: Config  # bound to the plugins: a plugin reads its own section with config.section(name)
    registry: Optional[CollectorRegistry]  # the server's metrics; None: the cache keeps private ones


# (private tokenizer, uncached encode) -> a fresh cache for that tokenizer
CacheFactory = Callable[[Tokenizer, Callable[[str], Encoding]], TokenizerCache]


def tokenizer_cache_factory(config: Config, pm: pluggy.PluginManager,
                            registry: Optional[CollectorRegistry] = None) -> Optional[CacheFactory]:
    """The factory of the one ``register_tokenizer_caches`` cache, or None when none is registered."""
    builders = collect(pm, "register_tokenizer_caches", "tokenizer cache")
    names = builders.names()
    if len(names) > 1:
        owners = ", ".join(f"{name!r} by plugin {builders.owners[name]!r}" for name in names)
        raise ConfigError(f"at most one tokenizer cache may be registered, not {owners}: "
                          "list all but one of those plugins in [plugins] disabled")
    if not names:
        return None
    build = builders.get(names[0])
    return lambda tokenizer, encode: build(TokenizerCacheSetup(tokenizer, encode, config, registry))
