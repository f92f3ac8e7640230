"""Which special tokens are safe L1 split points for a given tokenizer.

L1 relies on one property: for a boundary token ``S``, ``encode(p + S + q) == encode(p + S) +
encode(q)`` for every ``p`` and ``q``. In the ``tokenizers`` pipeline an added token is cut out of
the text before normalization and pre-tokenization, so it is atomic -- unless one of its options or
another part of the tokenizer reaches across it. A candidate is kept only when:

* it is an added token marked special, matched on the raw text (``normalized=False``), without
  ``rstrip`` (it would swallow whitespace that belongs to the suffix) and without ``single_word``;
* no other added token contains it followed by more characters (that token would win the
  leftmost-longest match in a longer text, so the split point would move);
* no ``single_word`` added token exists when it ends in a word character (the suffix's first
  token would see a different left neighbour);
* the property holds on probe texts, with the real tokenizer. This catches what the static rules
  cannot see, e.g. a Metaspace pre-tokenizer with ``prepend_scheme="first"``, which treats text at
  offset 0 of the input differently from the same text after a special token.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer

_PROBE_BEFORE = ["", "a", "hello ", "\n", "12"]
_PROBE_AFTER = ["", "a", " world", "  x", "\n\nuser", "'s", "1234", "中文", "😀 ok", "\t-", "é"]


def _static_reasons(tokenizer: Tokenizer, content: str) -> list[str]:
    added = {token.content: token for token in tokenizer.get_added_tokens_decoder().values()}
    token = added.get(content)
    if token is None:
        return ["not an added token, so not atomic"]
    reasons = []
    if not token.special:
        reasons.append("not marked special")
    if token.normalized:
        reasons.append("matched on normalized text")
    if token.rstrip:
        reasons.append("rstrip swallows the suffix's whitespace")
    if token.single_word:
        reasons.append("single_word depends on neighbours")
    for other in added:
        at = other.find(content)
        if other != content and at >= 0 and at + len(content) < len(other):
            reasons.append(f"added token {other!r} extends past it")
    if (content[-1:].isalnum() or content.endswith("_")) and any(t.single_word for t in added.values()):
        reasons.append("a single_word token could follow a word character")
    return reasons


def _probe_fails(tokenizer: Tokenizer, content: str, others: list[str]) -> bool:
    after = _PROBE_AFTER + [content, content + "a"] + [other + " x" for other in others[:3]]
    pairs = [(before, tail) for before in _PROBE_BEFORE for tail in after]

    def ids(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]

    joined = ids([before + content + tail for before, tail in pairs])
    heads = ids([before + content for before, _ in pairs])
    rests = ids([tail for _, tail in pairs])
    return any(j != h + r for j, h, r in zip(joined, heads, rests))


def choose_boundary_tokens(tokenizer: Tokenizer, extra: Iterable[str] = ()) -> tuple[list[str], dict[str, str]]:
    """Return (safe boundary token strings, {refused token: reason})."""
    declared = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special]
    candidates = list(dict.fromkeys([*declared, *(e for e in extra if e)]))
    safe: list[str] = []
    refused: dict[str, str] = {}
    for content in candidates:
        reasons = _static_reasons(tokenizer, content)
        if not reasons and _probe_fails(tokenizer, content, [c for c in candidates if c != content]):
            reasons = ["encode(p + token + q) != encode(p + token) + encode(q) on a probe text"]
        if reasons:
            refused[content] = "; ".join(reasons)
        else:
            safe.append(content)
    return safe, refused
