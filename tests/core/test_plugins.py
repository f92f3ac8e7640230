"""The plugin host: hook specifications, registries, duplicate names, disabling by name."""

import click
import pytest
from click.testing import CliRunner

from kvgate.core import hookspecs
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import DuplicateName, build_plugin_manager, collect, describe_plugins

REGISTRY_HOOKS = [
    "register_adapters", "register_services", "register_dialects", "register_chat_formats", "register_model_runtimes",
    "register_cache_tiers", "register_grammar_backends", "register_generation_guards",
    "register_model_formats", "register_default_models",
    "register_config_sections", "register_request_observers", "register_asgi_wrappers", "register_drafters",
    "register_tokenizer_caches", "register_tenant_policies", "register_schema_preparers", "register_mask_refiners",
    "register_request_checks", "register_lookup_observers", "register_tool_grammars",
]


def plugin_registering(hook_name, name, value):
    class Plugin:
        pass

    def impl(register):
        register(name, value)

    impl.__name__ = hook_name
    setattr(Plugin, hook_name, staticmethod(hookimpl(impl)))
    return Plugin()


def test_every_hook_has_a_docstring_saying_when_and_what():
    specs = [name for name in dir(hookspecs) if name.startswith("register_")]
    assert set(specs) == set(REGISTRY_HOOKS) | {"register_commands"}
    for name in specs:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert "Called" in doc and "Returns" in doc, name


@pytest.mark.parametrize("hook_name", REGISTRY_HOOKS)
def test_registry_hook_collects_and_rejects_duplicates(hook_name):
    first = plugin_registering(hook_name, "thing", 1)
    pm = build_plugin_manager(extra_plugins=[("first", first)], load_entry_points=False)
    registry = collect(pm, hook_name, "thing")
    assert registry.get("thing") == 1 and registry.owners["thing"] == "first"
    pm.register(plugin_registering(hook_name, "thing", 2), name="second")
    with pytest.raises(DuplicateName, match="registered twice"):
        collect(pm, hook_name, "thing")


def test_unknown_name_lists_what_is_registered():
    pm = build_plugin_manager(extra_plugins=[("p", plugin_registering("register_dialects", "a", 1))],
                              load_entry_points=False)
    with pytest.raises(KeyError, match="registered: a"):
        collect(pm, "register_dialects", "dialect").get("b")


def test_register_commands_adds_subcommands():
    class Plugin:
        @staticmethod
        @hookimpl
        def register_commands(cli):
            @cli.command()
            def hello():
                click.echo("hello from a plugin")

    @click.group()
    def root():
        pass

    pm = build_plugin_manager(extra_plugins=[("p", Plugin())], load_entry_points=False)
    pm.hook.register_commands(cli=root)
    assert CliRunner().invoke(root, ["hello"]).output == "hello from a plugin\n"


def test_builtin_features_are_entry_points_and_can_be_disabled():
    pm = build_plugin_manager()
    names = {row["name"] for row in describe_plugins(pm)}
    assert {"chat_completions", "chatml_json", "llama"} <= names
    assert all(row["distribution"] for row in describe_plugins(pm))
    disabled = build_plugin_manager(disabled=["chatml_json"])
    assert "chatml_json" not in collect(disabled, "register_dialects", "dialect")
    assert "chatml_json" in collect(pm, "register_dialects", "dialect")
