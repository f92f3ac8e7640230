"""The ``register_tool_grammars`` hook (core/fence/custom.py): a third-party plugin's grammar
syntax is what the fence enforces on a custom tool's input, on SmolLM2's real tokenizer; a syntax
no plugin registers is a 400 naming the tool."""

from __future__ import annotations

import re

import pytest

from kvgate.adapters.custom_tools import custom_tool, input_arguments
from kvgate.core.fence import build_request_fence
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.types import InputFormat
from kvgate.dialects.chatml_json import ChatmlJson
from tests.core.fence.conftest import Driver, request
from tests.core.fence.test_fence_new_dialects import calls_text, rejected


class WordsSyntax:
    """A grammar that is a space-separated list of the words the input may be."""

    def to_regex(self, definition: str) -> str:
        return "|".join(re.escape(word) for word in definition.split())


class WordsPlugin:
    @hookimpl
    def register_tool_grammars(self, register):
        register("words", WordsSyntax())


VOTE = custom_tool("vote", "Vote.", InputFormat("words", "yes no abstain"))


def drive(pm, config, smol_info, smol_tokenizer, tools):
    fence = build_request_fence(request("named", "vote", tools=tools), ChatmlJson(), smol_info, config, pm)
    return Driver(fence, smol_tokenizer)


def call(text: str) -> str:
    return calls_text(ChatmlJson(), ("vote", input_arguments(text)))


def test_a_third_party_syntax_is_enforced(config, smol_info, smol_tokenizer):
    pm = build_plugin_manager(extra_plugins=[("words", WordsPlugin())])
    assert drive(pm, config, smol_info, smol_tokenizer, [VOTE]).accepts(call("abstain"))
    assert rejected(drive(pm, config, smol_info, smol_tokenizer, [VOTE]), call("maybe"))


def test_an_unregistered_syntax_is_a_400_naming_the_tool(pm, config, smol_info):
    with pytest.raises(FenceRequestError, match="custom tool 'vote'.*no plugin enforces grammar syntax 'words'"):
        build_request_fence(request("named", "vote", tools=[VOTE]), ChatmlJson(), smol_info, config, pm)
