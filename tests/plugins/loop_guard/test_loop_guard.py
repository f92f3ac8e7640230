"""The loop guard (plugin ``loop_guard``), alone and composed into a request fence."""

from __future__ import annotations

import torch

from kvgate.core.config import Config
from kvgate.core.fence import build_request_fence
from kvgate.core.fence.guards import GuardSetup
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.loop_guard import RESTART_WINDOW, GuardConfig, LoopGuard, repeats_needed
from tests.core.fence.conftest import request


def guard(info, **config) -> LoopGuard:
    return LoopGuard(GuardSetup(Config(), info), GuardConfig(**config))


def feed(g: LoopGuard, tokens) -> LoopGuard:
    for token in tokens:
        g.advance(token)
    return g


def test_a_run_never_grows_past_max_token_repeats(smol_info):
    g = feed(guard(smol_info, max_token_repeats=5), [7, 7, 7, 7])
    assert g.banned() == []
    g.advance(7)
    assert g.banned() == [7]
    g.advance(8)
    assert g.banned() == []


def test_repeated_pattern_successor_is_banned(smol_info):
    g = feed(guard(smol_info, max_pattern_period=4, min_pattern_repeats=3), [1, 2, 3] * 2 + [1, 2])
    assert g.banned() == [3]  # a third "1 2 3" would complete the loop
    assert feed(guard(smol_info, max_pattern_period=4, min_pattern_repeats=3), [1, 2, 3, 1, 2]).banned() == []


def test_defaults_catch_a_json_object_written_over_and_over(smol_info):
    """The bench's runaway answer, a ~20-token pattern: three copies may be data, five are a loop."""
    pattern = smol_info.encode('"conditions": [{"city": "LIMA", "temperature": 28, ')
    assert len(pattern) > 16
    copies = repeats_needed(len(pattern), 8)
    assert 4 <= copies <= 6
    g = feed(guard(smol_info), pattern * (copies - 1) + pattern[:-1])
    assert g.banned() == [pattern[-1]]
    assert feed(guard(smol_info), pattern * (copies - 2) + pattern[:-1]).banned() == []
    assert feed(guard(smol_info), [1, 2] * 6 + [1]).banned() == []  # short periods keep their 8 copies
    assert feed(guard(smol_info), [1, 2] * 7 + [1]).banned() == [2]


def test_a_run_of_one_token_is_left_to_the_repeat_rule(smol_info):
    g = feed(guard(smol_info, max_token_repeats=32, max_pattern_period=4, min_pattern_repeats=3), [9] * 12)
    assert g.banned() == []  # period 2 or 4 of "9 9" is the same run, not a pattern


def test_clone_is_independent(smol_info):
    g = feed(guard(smol_info, max_token_repeats=3), [5, 5])
    twin = g.clone()
    feed(twin, [5])
    assert twin.banned() == [5] and g.banned() == []


def test_reasoning_restart_forces_the_end_of_reasoning(smol_info):
    close = smol_info.encode("</think>")
    g = LoopGuard(GuardSetup(Config(), smol_info, "<think>", "</think>", True), GuardConfig(max_pattern_period=2))
    opening = list(range(100, 100 + RESTART_WINDOW))
    feed(g, opening + list(range(300, 300 + RESTART_WINDOW)))
    assert g.forced() == []
    feed(g, opening)  # the reasoning starts over
    assert g.forced() == close
    feed(g, close)
    assert g.forced() == [] and not g.in_reasoning


def test_fence_counts_interventions_and_never_empties_the_mask(smol_info, pm, config):
    config.section("guard").max_token_repeats = 4
    fence = build_request_fence(request("auto", tools=()), ChatmlJson(), smol_info, config, pm)
    assert fence is not None and fence.matcher is None  # guards only
    logits = torch.zeros(smol_info.vocab_size)
    logits[42] = 5.0
    chosen = []
    for _ in range(8):
        row = logits.clone()
        fence.apply(row)
        chosen.append(int(torch.argmax(row)))
        fence.advance(chosen[-1])
    assert chosen[:4] == [42, 42, 42, 42] and chosen[4] != 42 and chosen.count(42) < 8
    assert fence.interventions >= 1


def test_disabled_guard_plugin_is_not_composed(smol_info, config):
    from kvgate.core.plugins import build_plugin_manager

    pm = build_plugin_manager(disabled=["loop_guard"])
    assert build_request_fence(request("auto", tools=()), ChatmlJson(), smol_info, config, pm) is None
