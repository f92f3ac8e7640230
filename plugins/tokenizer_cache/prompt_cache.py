"""The cache the tokenizer service calls: the two layers (:mod:`.cache`) split at the special tokens
that are safe boundaries for this tokenizer (:mod:`.boundaries`), and the ids of recent outputs for
prompts that resend them (:mod:`.outputs` in memory, or :mod:`.outputs_store` on disk beside the
SSD tier, with ``reuse_output_ids``).

One :class:`PromptCache` serves one tokenizer; the service builds a fresh one when it reloads a
tokenizer with another fingerprint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from tokenizers import Encoding, Tokenizer

from kvgate.plugins.tokenizer_cache.boundaries import choose_boundary_tokens
from kvgate.plugins.tokenizer_cache.cache import TokenizerCache
from kvgate.plugins.tokenizer_cache.cache_metrics import TokenizerCacheMetrics
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.outputs import OutputIdsRegistry, boundary_pattern, segment_spans
from kvgate.plugins.tokenizer_cache.outputs_store import OutputIdsStore

log = logging.getLogger(__name__)


class PromptCache:
    def __init__(self, tokenizer: Tokenizer, encode: Callable[[str], Encoding], config: TokenizerCacheConfig,
                 metrics: TokenizerCacheMetrics, special_tokens: Iterable[str] = (), seed: Optional[int] = None,
                 outputs_root: Optional[Path] = None, outputs_max_bytes: int = 0):
        """``special_tokens``: extra boundary candidates (e.g. BOS/EOS named by the model config);
        ``outputs_root``: where the output ids are kept on disk (None: in memory only), at most
        ``outputs_max_bytes`` of them."""
        self.tokenizer = tokenizer
        self.config = config
        self._metrics = metrics
        safe, self._refused = choose_boundary_tokens(tokenizer, special_tokens)
        for content, reason in self._refused.items():
            log.info("tokenizer cache: %r is not an L1 boundary: %s", content, reason)
        self._boundaries = {content: tokenizer.token_to_id(content) for content in safe}
        self._layers = TokenizerCache(encode, config, self._boundaries, metrics, seed)
        self._outputs = (OutputIdsStore(outputs_root, outputs_max_bytes) if outputs_root is not None
                         else OutputIdsRegistry())
        self._vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._pattern = boundary_pattern(self._boundaries)

    @property
    def boundary_tokens(self) -> dict[str, int]:
        """Special token -> id, for each token L1 splits at."""
        return dict(self._boundaries)

    @property
    def refused_boundaries(self) -> dict[str, str]:
        """Special token -> why L1 does not split at it."""
        return dict(self._refused)

    def encode(self, text: str, namespace: str = "") -> list[int]:
        return self._layers.encode(text, namespace)

    def encode_prompt(self, text: str, namespace: str) -> list[int]:
        """``encode(text)``, except that each run between boundary tokens whose text is an output
        registered in ``namespace`` gets the ids registered for it."""
        if self._pattern is None or not self._outputs.holds(namespace):
            return self.encode(text, namespace)
        ids: list[int] = []
        done = 0
        for start, end in segment_spans(self._pattern, text):
            reused = self._reusable(namespace, text[start:end])
            if reused is None:
                continue
            ids += self._encode_piece(text[done:start], namespace) + reused
            done = end
            self._metrics.output_reused(len(reused))
        return ids + self._encode_piece(text[done:], namespace)

    def _reusable(self, namespace: str, segment: str) -> Optional[list[int]]:
        """The registered ids of ``segment``, if they are ids of this tokenizer that decode to it
        (a disk row is untrusted: one that does not is dropped, with a warning)."""
        ids = self._outputs.get(namespace, segment)
        if ids is None:
            return None
        spelled = all(0 <= i < self._vocab_size for i in ids) and self.tokenizer.decode(ids, skip_special_tokens=False)
        if spelled == segment:
            return ids
        log.warning("tokenizer cache: dropped a registered output whose ids do not spell its text")
        self._outputs.discard(namespace, segment)
        return None

    def _encode_piece(self, text: str, namespace: str) -> list[int]:
        return self.encode(text, namespace) if text else []

    def register_output(self, namespace: str, prompt: Sequence[int], output: Sequence[int]) -> bool:
        """Remember ``output`` (sampled after ``prompt``) as the ids of the run a resent turn will
        hold: the prompt's tail after its last boundary token, then the output up to its stop
        token. Returns False for an output that cannot be such a run (nothing is kept)."""
        if not self.config.reuse_output_ids:
            return False
        boundary_ids = frozenset(self._boundaries.values())
        body = list(output)
        while body and body[-1] in boundary_ids:
            body.pop()
        header_start = next((i + 1 for i in range(len(prompt) - 1, -1, -1) if prompt[i] in boundary_ids), None)
        if not body or header_start is None or boundary_ids.intersection(body):
            return False
        ids = list(prompt[header_start:]) + body
        segment = self.tokenizer.decode(ids, skip_special_tokens=False)
        if self._pattern.search(segment) or "\ufffd" in segment:
            return False  # it would not be one run between boundaries, or not decode to its own text
        self._outputs.add(namespace, segment, ids)
        return True

    def flush_outputs(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the outputs registered so far are on disk (at once
        for the in-memory registry); whether they are."""
        return self._outputs.flush(timeout)

    def stats(self) -> dict[str, Any]:
        outputs = {"entries": len(self._outputs), "bytes": self._outputs.used_bytes}
        return {"l1_boundary_tokens": sorted(self._boundaries), **self._layers.stats(), "outputs": outputs}

    def clear(self) -> None:
        """Drop the cached encodings; registered outputs stay (dropping them would change ids)."""
        self._layers.clear()
