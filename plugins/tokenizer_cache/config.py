"""The ``[tokenizer_cache]`` section (the keys it had as a core section, with the same defaults)."""

from __future__ import annotations

import attrs

from kvgate.core.config_fields import positive


@attrs.define
class TokenizerCacheConfig:
    enable_l0: bool = True
    enable_l1: bool = True
    l0_max_entries: int = attrs.field(default=10_000, validator=positive)
    # and at most this many bytes of texts and ids: one entry holds a whole input, however long
    l0_max_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=positive)
    l1_max_bytes: int = attrs.field(default=50 * 1024 * 1024, validator=positive)
    # a resent assistant turn keeps the ids the model sampled (the prefix cache then matches through
    # it); off by default: the same request would then tokenize differently on a server that
    # remembers the output than on one that does not, and cold and cached answers could differ
    reuse_output_ids: bool = False
