"""Keeping fenced text to the tokenizer's own split of it (canonical tokenization).

The grammar allows any token split of the text it forces: ``g`` ``et`` ``_weather`` spells a tool
name as well as ``get`` ``_weather``. The next turn's prompt holds the same text re-tokenized
(``get``), so a split the tokenizer would not make forks the prompt from the cached prefix there.

Where the grammar leaves few choices (a choice among literals, the end of a value), each allowed
token ``t`` is tried on a copy of the grammar state, which says what it forces after ``t``
(bytes ``f``). When the tokenizer encodes ``recent output + t + f`` with another next token ``c``
that is also allowed (``g`` -> ``get`` for ``get_weather``; ``"}`` -> ``"`` for ``"}}\\n``), ``t`` is
a non-canonical split of the same text: ``t`` is removed and ``c`` keeps the larger of the two
logits (under greedy decoding the text chosen is the one the model's best split spelled). Only allowed tokens are removed, in favour of an allowed token that spells the
start of the same text, so the set of valid outputs is unchanged; free choices (the text of a
value) keep the model's split. Tried positions: every allowed token when few are allowed, else
the allowed tokens that start with a byte that ends a value (``"``, ``>``, ...) when the grammar
restricts them (the value's end, not its text). Encodings are cached per tokenizer.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from kvgate.core.fence.tokens import TokenizerInfo, tokens_starting_with

SMALL_SET = 64  # up to this many allowed tokens, every one is tried
EXIT_BYTES = b'"}]>,<\n'  # bytes that end a value or open the markup after it
EXIT_CAP = 16  # more allowed tokens than this starting with an exit byte: that byte is value text
CONTEXT_TOKENS = 3  # output tokens that may merge with what follows
ENCODED_CACHE = 16384
MAX_HOPS = 4


class Canonicalizer:
    """Per-tokenizer tables and caches (built by ``register_mask_refiners``, shared by every
    request's fence; engine threads only read the tables and write whole dict entries)."""

    def __init__(self, info: TokenizerInfo):
        self.info = info
        self.pieces = info.token_bytes()
        self.vocab = info.vocab_size
        self.special = np.zeros(self.vocab, dtype=np.bool_)
        self.special[[i for i in info.special_ids if i < self.vocab]] = True
        self.exit_pools = [np.asarray(tokens_starting_with(info, bytes([b])), dtype=np.int64) for b in EXIT_BYTES]
        self._encoded: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) >= ENCODED_CACHE:
                self._encoded.clear()
            ids = tuple(self.info.encode(text))
            self._encoded[text] = ids
        return ids

    def candidates(self, mask: np.ndarray) -> np.ndarray:
        """Allowed tokens worth trying at this position."""
        allowed = np.flatnonzero(mask & ~self.special[: mask.shape[0]])
        if allowed.size <= 1:
            return allowed[:0]
        if allowed.size <= SMALL_SET:
            return allowed
        picked = []
        for pool in self.exit_pools:
            hits = pool[mask[pool]]
            if 0 < hits.size <= EXIT_CAP and hits.size < pool.size:
                picked.append(hits)
        return np.concatenate(picked) if picked else allowed[:0]

    def target(self, recent: tuple[int, ...], token: int, forced: bytes) -> Optional[int]:
        """The tokenizer's next token for ``token`` + ``forced`` after ``recent`` (None: unknown)."""
        body = self.pieces[token] + forced
        for k in range(min(CONTEXT_TOKENS, len(recent)), -1, -1):
            context = recent[len(recent) - k:]
            try:
                text = (b"".join(self.pieces[i] for i in context) + body).decode("utf-8")
            except UnicodeDecodeError:
                continue
            ids = self.encode(text)
            if len(ids) > k and ids[:k] == context:
                return ids[k]
        return None

    def merges(self, matcher, mask: np.ndarray, recent: tuple[int, ...]) -> dict[int, int]:
        """Non-canonical allowed token -> the allowed token that spells the same text canonically."""
        out: dict[int, int] = {}
        trial = None
        for token in self.candidates(mask).tolist():
            trial = trial if trial is not None else matcher.copy()
            if not trial.consume(token):
                trial = None  # a failed consume leaves the copy unusable
                continue
            forced = trial.forced_bytes()
            trial.rollback(1)
            if not forced:
                continue
            better = self.target(recent, token, forced)
            if better is not None and better != token and better < mask.shape[0] and mask[better]:
                out[token] = better
        return resolve(out)

    def refine(self, logits: torch.Tensor, mask: np.ndarray, matcher, recent: tuple[int, ...]) -> np.ndarray:
        """Move each non-canonical token's logit onto its canonical token; the narrowed mask
        (:class:`kvgate.core.fence.refiners.MaskRefiner`)."""
        moves = self.merges(matcher, mask, recent)
        if not moves:
            return mask
        mask = mask.copy()
        for token, better in moves.items():
            logits[better] = torch.maximum(logits[better], logits[token])
            mask[token] = False
        return mask


def resolve(moves: dict[int, int]) -> dict[int, int]:
    """Follow chains (a -> b -> c becomes a -> c); drop cycles."""
    out = {}
    for token, better in moves.items():
        hops = 0
        while better in moves and hops < MAX_HOPS:
            better, hops = moves[better], hops + 1
        if better != token and better not in moves:
            out[token] = better
    return out

