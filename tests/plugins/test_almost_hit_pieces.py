"""Almost-hit diagnostics of a re-tokenization fork (issue 34, item 4), with the real SmolLM2 tokenizer.

Both sides of such a fork read the same text, so the record shows token pieces; and a fork that
loses many tokens is kept whatever its shared ratio. Redaction covers the pieces too.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from kvgate.plugins.almost_hits import AlmostHits
from kvgate.core.tenants import NamespaceOwners, Tenant
from kvgate.plugins.cache_routes import scoped
from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_from_gguf()


def ids(tokenizer, pieces: list[str]) -> list[int]:
    return [tokenizer.token_to_id(piece) for piece in pieces]


def almost_hits(tokenizer) -> AlmostHits:
    counter = Counter("almost", "almost-hits", registry=CollectorRegistry())
    return AlmostHits(tokenizer, min_tokens=16, min_ratio=0.9, counter=counter, expensive_tokens=64)


def forked(tokenizer, tail_tokens: int) -> tuple[list[int], list[int], int]:
    """(prompt, stored, fork): the same text, ' Wind'+'ing' stored where the prompt has ' W'+'inding'."""
    head = tokenizer.encode("The road was long and the hills were steep, so we drove slowly all day.",
                            add_special_tokens=False).ids
    tail = tokenizer.encode(" road" * tail_tokens, add_special_tokens=False).ids
    stored = head + ids(tokenizer, ["ĠWind", "ing"]) + tail
    prompt = head + ids(tokenizer, ["ĠW", "inding"]) + tail
    return prompt, stored, len(head)


def test_an_expensive_fork_is_kept_whatever_its_ratio_with_pieces_on_both_sides(tokenizer):
    hits = almost_hits(tokenizer)
    prompt, stored, fork = forked(tokenizer, 100)
    assert fork >= 16 and fork < 0.9 * len(stored)  # the ratio alone would hide it
    assert hits.qualifies(prompt, stored, fork)
    item = hits.record("ns", "device", prompt, stored, fork)
    assert item["stored_after"][:8] == item["prompt_after"][:8] == " Winding"  # the text cannot tell
    start = item["pieces_from"]
    assert item["stored_pieces"][fork - start: fork - start + 2] == [" Wind", "ing"]
    assert item["prompt_pieces"][fork - start: fork - start + 2] == [" W", "inding"]
    assert item["lost_tokens"] == len(stored) - fork


def test_a_cheap_early_fork_is_not_kept(tokenizer):
    prompt, stored, fork = forked(tokenizer, 30)
    assert not almost_hits(tokenizer).qualifies(prompt, stored, fork)


def test_pieces_are_redacted_where_another_tenant_may_own_the_stored_side(tokenizer):
    prompt, stored, fork = forked(tokenizer, 100)
    item = almost_hits(tokenizer).record("team-ns", "device", prompt, stored, fork)
    owners = NamespaceOwners()
    owners.note("team-ns", Tenant("carol", shared_namespace="team"))
    view = scoped({"almost_hits": [item]}, Tenant("dave", shared_namespace="team"), owners)["almost_hits"][0]
    assert view["text_redacted"] and "stored_pieces" not in view and "prompt_pieces" not in view
    assert view["lost_tokens"] == item["lost_tokens"]
