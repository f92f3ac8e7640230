"""The grammar-backend and generation-guard hooks: built-ins go through them and a replacement
backend is picked by name from the config."""

from __future__ import annotations

import pytest

from kvgate.core.fence import FenceError, build_request_fence
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import DuplicateName, build_plugin_manager, collect
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.grammar_llguidance.backend import LlgBackend
from tests.core.fence.conftest import args, request


class CountingBackend(LlgBackend):
    """A second backend (llguidance underneath) that records the grammars it compiled."""

    name = "counting"
    compiled: list[str] = []

    def compile(self, text):
        CountingBackend.compiled.append(text)
        return super().compile(text)


class CountingPlugin:
    @hookimpl
    def register_grammar_backends(self, register):
        register("counting", CountingBackend)


def test_builtins_are_registered_through_the_hooks(pm):
    assert "llguidance" in collect(pm, "register_grammar_backends", "grammar backend").names()
    assert "loop_guard" in collect(pm, "register_generation_guards", "generation guard").names()


def test_config_picks_another_backend(smol_tokenizer, config):
    from kvgate.core.fence import tokenizer_info

    info = tokenizer_info(smol_tokenizer, [2])
    pm = build_plugin_manager(extra_plugins=[("counting", CountingPlugin())])
    config.fence.backend = "counting"
    fence = build_request_fence(request("required"), ChatmlJson(), info, config, pm)
    assert CountingBackend.compiled and "%json" in CountingBackend.compiled[-1]
    call = ChatmlJson().render_tool_call("get_time", args(tz="UTC"))
    for token in smol_tokenizer.encode(call).ids:
        assert fence.allows(token)
        fence.advance(token)


def test_unknown_backend_is_a_clear_error(smol_info, pm, config):
    config.fence.backend = "nope"
    with pytest.raises(FenceError, match="no grammar backend named 'nope'"):
        build_request_fence(request("required"), ChatmlJson(), smol_info, config, pm)


def test_duplicate_backend_name_is_an_error():
    class Again:
        @hookimpl
        def register_grammar_backends(self, register):
            register("llguidance", LlgBackend)

    pm = build_plugin_manager(extra_plugins=[("again", Again())])
    with pytest.raises(DuplicateName):
        collect(pm, "register_grammar_backends", "grammar backend")


def test_an_empty_mask_from_the_backend_is_a_clear_error(smol_tokenizer, config):
    """Fault injected (a backend whose masks come back empty, as llguidance's do when a mask runs
    out of lexer fuel): the fence refuses to hand the sampler an end-of-turn-only set."""
    from kvgate.core.fence import tokenizer_info

    from kvgate.plugins.grammar_llguidance.backend import LlgMatcher

    class EmptyMatcher(LlgMatcher):
        def fill_mask(self, bitmask):
            bitmask.fill(0)

    class EmptyMasks(LlgBackend):
        def matcher(self, grammar):
            return EmptyMatcher(super().matcher(grammar).inner)

    class Plugin:
        @hookimpl
        def register_grammar_backends(self, register):
            register("empty", EmptyMasks)

    info = tokenizer_info(smol_tokenizer, [2])
    config.fence.backend = "empty"
    fence = build_request_fence(request("required"), ChatmlJson(), info, config,
                                build_plugin_manager(extra_plugins=[("empty", Plugin())]))
    with pytest.raises(FenceError, match="allows no token"):
        fence.allowed()
