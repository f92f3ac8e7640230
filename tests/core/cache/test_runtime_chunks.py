"""The chunked state contract on the real Llama runtime: export_chunk / import_chunk /
state_bytes / state_format, and fork / truncate exact at any token."""

from __future__ import annotations

import pytest
import torch

from tests.core.cache.real_helpers import assert_same_logits, full_prefill_logits, long_text, text_tokens

pytestmark = pytest.mark.slow


def prefilled(rt, tokens):
    session = rt.new_session()
    rt.prefill(session, tokens)
    return session


def test_chunks_rebuild_the_exact_session(cache_runtime):
    rt = cache_runtime
    tokens = text_tokens(rt, long_text(21, 40))[:70]
    source = prefilled(rt, tokens)
    bounds = [0, 16, 45, 70]  # chunks need not be block-aligned
    chunks = [rt.export_chunk(source, s, e) for s, e in zip(bounds, bounds[1:])]
    restored = rt.new_session()
    with torch.inference_mode():
        for (s, e), data in zip(zip(bounds, bounds[1:]), chunks):
            rt.import_chunk(restored, tokens[s:e], data)
    assert restored.tokens == tokens
    assert rt.export_chunk(restored, 0, 70) == rt.export_chunk(source, 0, 70)
    assert abs(len(rt.export_chunk(source, 0, 70)) - rt.state_bytes(70)) <= 64
    extra = text_tokens(rt, " the end")
    assert torch.equal(rt.prefill(restored, extra), rt.prefill(source, extra))
    rt.release(restored)
    rt.release(source)


def test_a_chunk_that_does_not_fit_is_refused_and_the_session_is_unchanged(cache_runtime):
    rt = cache_runtime
    tokens = text_tokens(rt, long_text(22, 20))[:20]
    source = prefilled(rt, tokens)
    data = rt.export_chunk(source, 0, 20)
    target = rt.new_session()
    with torch.inference_mode():
        for bad_tokens, bad_data in [(tokens[:19], data), (tokens, data[:-1]), (tokens, data[:10]),
                                     (tokens, data[:8] + (4).to_bytes(8, "little") + data[16:] + b"aux!")]:
            with pytest.raises(ValueError):
                rt.import_chunk(target, bad_tokens, bad_data)
            assert target.length == 0
    with pytest.raises(ValueError, match="range"):
        rt.export_chunk(source, 5, 21)
    rt.release(target)
    rt.release(source)


def test_state_format_names_the_layout(cache_runtime):
    rt = cache_runtime
    assert rt.state_format.startswith("llama-kv/1 float32 ")
    assert rt.state_format.endswith(f"{rt.arch.layers}x{rt.arch.kv_heads}x{rt.arch.head_dim}")


@pytest.mark.parametrize("cut", [1, 15, 16, 17, 33])
def test_fork_and_truncate_are_exact_at_any_token(cache_runtime, cut):
    rt = cache_runtime
    tokens = text_tokens(rt, long_text(23, 30))[:40]
    source = prefilled(rt, tokens)
    forked = rt.fork(source, cut)
    rt.truncate(source, cut)
    rest = tokens[cut:]
    expected = full_prefill_logits(rt, tokens)
    assert_same_logits(rt.prefill(forked, rest), expected)
    assert_same_logits(rt.prefill(source, rest), expected)
    rt.release(forked)
    rt.release(source)
