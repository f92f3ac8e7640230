"""Correctness on the real SmolLM2 runtime (fp32): a hit + append equals a full prefill."""

from __future__ import annotations

import pytest

from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import assert_same_logits, full_prefill_logits, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


def conversation(runtime, words=60):
    first = text_tokens(runtime, "<|im_start|>system\n" + long_text(1, words) + "<|im_end|>\n")
    return first, text_tokens(runtime, "<|im_start|>user\n" + long_text(2, 12) + "<|im_end|>\n")


def test_device_hit_then_ssd_restore_then_restart_all_match_full_prefill(tmp_path, cache_runtime):
    rt = cache_runtime
    config = cache_config(tmp_path)
    manager = make_manager(config, rt)
    first, follow = conversation(rt)
    plan, _, stored = run_request(manager, rt, first, cache_key="c1")
    assert plan.source == "cold"

    turn2 = stored + follow
    plan, logits, _ = run_request(manager, rt, turn2, cache_key="c1")
    assert (plan.source, plan.cached_tokens, plan.hit_type) == ("device", len(stored), "exact")
    assert_same_logits(logits, full_prefill_logits(rt, turn2))

    manager.reclaim(10**9)  # evict everything: backed up to SSD first
    assert manager.device.entries() == []
    manager.ssd.flush()
    turn3 = turn2 + text_tokens(rt, "more words here")
    plan, logits, _ = run_request(manager, rt, turn3, cache_key="c1")
    assert plan.source == "ssd" and plan.cached_ssd >= len(turn2)
    assert_same_logits(logits, full_prefill_logits(rt, turn3))
    manager.close()

    restarted = make_manager(config, rt)
    turn4 = turn3 + text_tokens(rt, " and after a restart")
    plan, logits, _ = run_request(restarted, rt, turn4)
    assert plan.source == "ssd" and plan.cached_tokens >= len(turn3) - 1
    assert_same_logits(logits, full_prefill_logits(rt, turn4))
    restarted.close()
