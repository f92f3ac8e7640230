"""The ``[tokenizer_cache]`` section (the keys it had as a core section, with the same defaults)."""

from __future__ import annotations

import attrs

from kvgate.core.config_fields import non_negative, positive


@attrs.define
class TokenizerCacheConfig:
    enable_l0: bool = True
    enable_l1: bool = True
    l0_max_entries: int = attrs.field(default=10_000, validator=positive)
    # and at most this many bytes of texts and ids: one entry holds a whole input, however long
    l0_max_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=positive)
    l1_max_bytes: int = attrs.field(default=50 * 1024 * 1024, validator=positive)
    # a resent assistant turn keeps the ids the model sampled (the prefix cache then matches through
    # it); the outputs are kept beside the SSD tier, so a restart or another worker on that store
    # resolves a resent turn to the same ids (in memory only when the SSD tier is off)
    reuse_output_ids: bool = True
    # bytes of outputs kept on disk (text + 4 per id); 0 = ssd_bytes / 256, at least 16 MiB: more
    # tokens than the SSD tier holds KV for, so an output outlives its chunks there
    output_ids_max_bytes: int = attrs.field(default=0, validator=non_negative)
