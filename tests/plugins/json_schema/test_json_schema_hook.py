"""The schema-preparer hook: the built-in ``json_schema`` plugin prepares schemas through it, with
the plugin disabled schemas reach the grammar backend as sent, and a third-party preparer
registered through ``extra_plugins`` is the one used when ``[fence] schema_preparer`` names it."""

from __future__ import annotations

import json

import attrs
import pytest
import torch

from kvgate.core.config import Config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.errors import ConfigError
from kvgate.core.fence import FenceError, FenceRequestError, build_request_fence, check_schema_limits
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.json_schema.limits import MAX_SCHEMA_DEPTH

from tests.core.fence.conftest import greedy_run

UNSUPPORTED = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}, "required": ["a"]}
RECURSIVE = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}
PINNED = {"type": "object", "properties": {"city": {"const": "Paris"}}, "required": ["city"],
          "additionalProperties": False}


def forced(schema) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=[Tool("f", "", schema)],
                       tool_choice=ToolChoice("named", "f"), response_format=ResponseFormat())


def fence_with(pm, info, schema, **fence_keys):
    config = bind_plugin_sections(Config(), pm)
    for key, value in fence_keys.items():
        setattr(config.fence, key, value)
    return build_request_fence(forced(schema), ChatmlJson(), info, config, pm)


@pytest.fixture(scope="module")
def without_plugin():
    return build_plugin_manager(disabled=["json_schema"])


def test_the_builtin_preparer_is_registered_through_the_hook(pm):
    assert collect(pm, "register_schema_preparers", "schema preparer").names() == ["json_schema"]


def test_disabled_an_unsupported_keyword_is_the_backends_400_not_a_relaxation(pm, without_plugin, smol_info):
    assert any("not at /properties/a" in note for note in fence_with(pm, smol_info, UNSUPPORTED).relaxed)
    with pytest.raises(FenceRequestError, match="Unimplemented keys") as refused:
        fence_with(without_plugin, smol_info, UNSUPPORTED)
    assert refused.value.status == 400


def test_disabled_a_recursive_ref_is_not_unrolled_and_fails_in_the_engine(pm, without_plugin, smol_info):
    bounded = fence_with(pm, smol_info, RECURSIVE)
    assert any("recursive $ref unrolled" in note for note in bounded.relaxed)
    assert greedy_run(bounded, lambda out: torch.zeros(smol_info.vocab_size), 120) and bounded.matcher.is_accepting()
    raw = fence_with(without_plugin, smol_info, RECURSIVE)
    assert raw.relaxed == []
    with pytest.raises(FenceError):  # the endless prefix the preparer exists to bound
        greedy_run(raw, lambda out: torch.zeros(smol_info.vocab_size), 120)


def test_disabled_no_size_limit_is_checked_before_the_build(pm, without_plugin, smol_info):
    deep: dict = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "array", "items": deep}
    config = Config()
    with pytest.raises(FenceRequestError, match="too large"):
        check_schema_limits(forced(deep), smol_info, config, pm)
    check_schema_limits(forced(deep), smol_info, config, without_plugin)


class PinningPreparer:
    """A third party's preparer: every tool's parameters become :data:`PINNED`, said in a note."""

    def __init__(self, backend, fence_config):
        self.backend, self.depth = backend, fence_config.schema_recursion_depth

    def check_limits(self, request):
        if any("refuse_me" in json.dumps(tool.parameters) for tool in request.tools):
            raise FenceRequestError("refused by the third party", param="tools")

    def prepare_request(self, request):
        tools = [attrs.evolve(tool, parameters=PINNED) for tool in request.tools]
        return attrs.evolve(request, tools=tools), [f"pinned (backend {self.backend.name}, depth {self.depth})"]


class ThirdParty:
    @hookimpl
    def register_schema_preparers(self, register):
        register("pinning", PinningPreparer)


def test_a_third_party_preparer_is_used_when_named(smol_info, smol_tokenizer):
    pm = build_plugin_manager(extra_plugins=[("thirdparty", ThirdParty())])
    fence = fence_with(pm, smol_info, UNSUPPORTED, schema_preparer="pinning", schema_recursion_depth=3)
    assert fence.relaxed == ["pinned (backend llguidance, depth 3)"]
    out = greedy_run(fence, lambda out: torch.zeros(smol_info.vocab_size), 60)
    assert '"arguments": {"city": "Paris"}' in smol_tokenizer.decode(out, skip_special_tokens=False)
    config = bind_plugin_sections(Config(), pm)
    config.fence.schema_preparer = "pinning"
    with pytest.raises(FenceRequestError, match="refused by the third party"):
        check_schema_limits(forced({"description": "refuse_me"}), smol_info, config, pm)


def test_several_preparers_need_a_name_and_an_unknown_name_lists_them(smol_info):
    pm = build_plugin_manager(extra_plugins=[("thirdparty", ThirdParty())])
    with pytest.raises(ConfigError, match=r"set it to one of them \(registered: json_schema, pinning\)"):
        fence_with(pm, smol_info, UNSUPPORTED)
    with pytest.raises(ConfigError, match=r"named 'nope' \(registered: json_schema, pinning\)"):
        fence_with(pm, smol_info, UNSUPPORTED, schema_preparer="nope")
