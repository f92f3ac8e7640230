"""``register_mask_refiners``: the canonical split is the canonical_split plugin's refiner (disabled,
the model's own split stays), and a third party's refiner narrows a fenced position too."""

from __future__ import annotations

import numpy as np
import torch

from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.config import Config
from kvgate.core.fence import build_request_fence
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from kvgate.dialects.chatml_json import ChatmlJson
from tests.core.fence.conftest import request
from tests.plugins.canonical_split.test_canonical_split import SEARCH, WEATHER


def fence_at_the_name(pm, info, tokenizer):
    """A required-call fence advanced to where the tool's name starts."""
    config = bind_plugin_sections(Config(), pm)
    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(WEATHER, SEARCH)), ChatmlJson(), info, config, pm)
    for token in tokenizer.encode('<tool_call>\n{"name": "', add_special_tokens=False).ids:
        fence.advance(token)
    return fence


def pick(fence, prefer: int) -> int:
    logits = torch.zeros(fence.vocab)
    logits[prefer] = 50.0
    fence.apply(logits)
    return int(torch.argmax(logits))


def test_the_canonical_split_is_the_plugins_and_goes_with_it(smol_info, smol_tokenizer):
    g, get = smol_tokenizer.token_to_id("g"), smol_tokenizer.token_to_id("get")
    with_it = build_plugin_manager()
    without = build_plugin_manager(disabled=["canonical_split"])
    assert pick(fence_at_the_name(with_it, smol_info, smol_tokenizer), g) == get
    fence = fence_at_the_name(without, smol_info, smol_tokenizer)
    assert fence.refiners == [] and pick(fence, g) == g


class NoSearch:
    """A third party's refiner: never starts the ``search`` tool's name with ``s``."""

    def __init__(self, info):
        self.s = info.encode("s")[0]
        self.calls: list[tuple[int, ...]] = []

    def refine(self, logits, mask, matcher, recent):
        self.calls.append(recent)
        if not mask[self.s] or np.count_nonzero(mask) < 2:
            return mask
        mask = mask.copy()
        mask[self.s] = False
        return mask


class ThirdParty:
    def __init__(self):
        self.built: list[NoSearch] = []

    @hookimpl
    def register_mask_refiners(self, register):
        register("no_search", lambda info: self.built.append(NoSearch(info)) or self.built[-1])


def test_a_third_party_refiner_narrows_every_fenced_position(smol_info, smol_tokenizer):
    plugin = ThirdParty()
    pm = build_plugin_manager(disabled=["canonical_split"], extra_plugins=[("no_search", plugin)])
    s = smol_tokenizer.token_to_id("s")
    alone = fence_at_the_name(build_plugin_manager(disabled=["canonical_split"]), smol_info, smol_tokenizer)
    assert pick(alone, s) == s  # allowed there, and kept without the refiner
    fence = fence_at_the_name(pm, smol_info, smol_tokenizer)
    assert pick(fence, s) != s
    again = fence_at_the_name(pm, smol_info, smol_tokenizer)
    assert len(plugin.built) == 1 and again.refiners == plugin.built  # built once per tokenizer
    assert plugin.built[0].calls and len(plugin.built[0].calls[-1]) == 4  # the recent output tokens
