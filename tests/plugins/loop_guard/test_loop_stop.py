"""The loop guard's stop criterion (``plugins/loop_stop.py``): on token sequences, composed into a
request fence (never inside an open call), and inside reasoning."""

from __future__ import annotations

from kvgate.core.config import Config
from kvgate.core.fence import build_request_fence
from kvgate.core.fence.guards import GuardSetup
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.loop_guard import GuardConfig, LoopGuard
from kvgate.plugins.loop_stop import LoopEnd
from tests.core.fence.conftest import request

LOOP = [11, 12, 13, 14]  # a 4-token pattern; with min_pattern_repeats=3 the third copy is excluded


def guard(info, setup=None, **config) -> LoopGuard:
    options = {"max_pattern_period": 8, "min_pattern_repeats": 3, **config}
    return LoopGuard(setup or GuardSetup(Config(), info), GuardConfig(**options))


def circle(g: LoopGuard, times: int) -> int:
    """Write the loop until the guard excludes a token, then another token instead, ``times`` over;
    returns how many interventions the guard has counted."""
    for round_ in range(times):
        written = 0
        while not g.banned():
            g.advance(LOOP[written % len(LOOP)])
            written += 1
            assert written < 100
        g.advance(500 + round_)  # the model takes another token where the loop was excluded
    return len(g.loop_end.positions)


def test_loop_end_counts_interventions_within_its_window():
    end = LoopEnd(stop_after=3, window=100)
    for position in (0, 50, 120):
        end.record(position)
    assert not end.reached()  # position 0 fell out of the window
    end.record(149)
    assert end.reached()
    twin = end.clone()
    end.forget()
    assert not end.reached() and twin.reached()
    never = LoopEnd(stop_after=0, window=100)
    for position in range(10):
        never.record(position)
    assert not never.reached()


def test_a_loop_that_comes_back_ends_the_reply(smol_info):
    g = guard(smol_info, stop_after_interventions=3)
    assert circle(g, 2) == 2 and not g.ends_reply()  # varied twice: the reply goes on
    assert circle(g, 1) == 3 and g.ends_reply()


def test_interventions_far_apart_do_not_end_the_reply(smol_info):
    g = guard(smol_info, stop_after_interventions=2, stop_window=40)
    circle(g, 1)
    for token in range(1000, 1060):  # 60 tokens of something else
        g.advance(token)
    circle(g, 1)
    assert not g.ends_reply()
    assert not guard(smol_info, stop_after_interventions=0).ends_reply()


def test_inside_reasoning_the_reasoning_is_closed_instead(smol_info):
    close = smol_info.encode("</think>")
    g = guard(smol_info, GuardSetup(Config(), smol_info, "<think>", "</think>", True), stop_after_interventions=2)
    circle(g, 1)
    assert g.forced() == []
    circle(g, 1)
    assert not g.ends_reply() and g.forced() == close
    for token in close:
        g.advance(token)
    assert not g.in_reasoning and not g.ends_reply() and g.forced() == []  # the answer counts afresh


def test_the_fence_ends_free_text_at_once_and_a_call_only_once_it_is_closed(smol_info, smol_tokenizer, pm, config):
    config.section("guard").max_token_repeats = 3
    config.section("guard").stop_after_interventions = 1
    x = smol_tokenizer.encode("x", add_special_tokens=False).ids

    def fence_after(text: str, repeated: int):
        fence = build_request_fence(request("auto"), ChatmlJson(), smol_info, config, pm)
        for token in smol_tokenizer.encode(text, add_special_tokens=False).ids + x * repeated:
            fence.advance(token)
        return fence

    assert not fence_after("Hello ", 3).must_stop
    plain = fence_after("Hello ", 4)  # the fourth "x" came although the guard excluded it
    assert plain.guard_stop and plain.must_stop
    in_call = fence_after('<tool_call>\n{"name": "get_weather", "arguments": {"city": "', 4)
    assert not in_call.guard_stop and not in_call.must_stop
    for token in smol_tokenizer.encode('", "days": 3}}\n</tool_call>', add_special_tokens=False).ids:
        in_call.advance(token)
    assert in_call.guard_stop and in_call.must_stop


def test_the_defaults_end_loops_of_every_detected_length_within_the_window(smol_info):
    """A model that comes back to its loop after each exclusion: with the defaults the reply ends at
    the third exclusion, 48 tokens into a 2-token loop and 315 into a 21-token one (of a 512 cap)."""
    for text, ends_at in ((" hello world", 48), ("I am a robot. ", 144),
                          ("The cat sat on the mat and looked at the dog, who was sleeping by the warm fire. ", 315)):
        pattern = smol_info.encode(text)
        g = LoopGuard(GuardSetup(Config(), smol_info), GuardConfig())
        written = 0
        while not g.ends_reply():
            excluded = pattern[written % len(pattern)] in g.banned()
            g.advance(600 if excluded else pattern[written % len(pattern)])
            written = 0 if excluded else written + 1
            assert len(g.tokens) <= 512, text
        assert len(g.tokens) == ends_at and len(g.loop_end.positions) == 3, (text, len(g.tokens))
