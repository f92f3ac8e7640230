"""The default chat format ``jinja`` is the jinja_chat_format plugin's (``register_chat_formats``):
without it a model's own template renders nothing, and a third party may serve ``jinja`` instead."""

from __future__ import annotations

import pytest

from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.dialect_choice import build_chat_format
from kvgate.core.loading.model_runtimes import choose_runtime, collect_runtimes
from kvgate.core.loading.model_sources import default_model_path, read_model_source
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.types import ChatRequest, Message
from kvgate.plugins.jinja_chat_format import JinjaChatFormat

HELLO = ChatRequest(model="smollm2", messages=[Message("user", "Hello")])


def embedded_preview(pm):
    """The embedded SmolLM2 as its runtime describes it, no weights loaded."""
    source = read_model_source(pm, default_model_path(pm))
    runtimes = collect_runtimes(pm)
    return runtimes.get(choose_runtime(runtimes, source)).preview(source)


def test_the_models_template_renders_through_the_plugin():
    pm = build_plugin_manager()
    name, _, chat_format = build_chat_format(Config(), pm, embedded_preview(pm))
    assert name == "chatml_json" and isinstance(chat_format, JinjaChatFormat) and chat_format.name == "jinja"
    assert chat_format.render(HELLO).endswith("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")


def test_without_the_plugin_the_default_format_is_a_config_error_naming_it():
    pm = build_plugin_manager(disabled=["jinja_chat_format"])
    with pytest.raises(ConfigError, match="unknown chat format 'jinja'"):
        build_chat_format(Config(), pm, embedded_preview(pm))


class Shouting(JinjaChatFormat):
    def render(self, request, add_generation_prompt=True):
        return super().render(request, add_generation_prompt).upper()


class ThirdParty:
    @hookimpl
    def register_chat_formats(self, register):
        register("jinja", lambda runtime, dialect: Shouting(runtime.chat_template, dialect, runtime.special_tokens))


def test_a_third_party_may_serve_jinja_in_its_place():
    pm = build_plugin_manager(disabled=["jinja_chat_format"], extra_plugins=[("shouting", ThirdParty())])
    _, _, chat_format = build_chat_format(Config(), pm, embedded_preview(pm))
    assert isinstance(chat_format, Shouting) and "USER\nHELLO" in chat_format.render(HELLO)
