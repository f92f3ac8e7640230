"""``kvgate plugins`` comes from the plugin_list plugin: listed with it, gone without it."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from kvgate.core.plugins import build_plugin_manager
from kvgate.plugins.plugin_list import REGISTRIES


def cli_of(pm) -> click.Group:
    @click.group()
    def cli():
        pass

    pm.hook.register_commands(cli=cli)
    return cli


def test_the_plugins_command_reports_every_registry_and_itself():
    result = CliRunner().invoke(cli_of(build_plugin_manager()), ["plugins", "--json", "--no-model"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert list(report["registries"]) == [kind for _, kind in REGISTRIES]
    mine = next(row for row in report["plugins"] if row["name"] == "plugin_list")
    assert mine["hooks"] == ["register_commands"] and mine["distribution"].startswith("kvgate ")
    assert "model" not in report


def test_the_text_listing_names_the_runtimes_and_the_served_model():
    result = CliRunner().invoke(cli_of(build_plugin_manager()), ["plugins"])
    assert result.exit_code == 0, result.output
    assert "model runtime llama (llama) loads hf llama" in result.output
    assert "served model: name=smollm2, architecture=llama, dialect=chatml_json" in result.output


def test_disabled_the_command_is_gone_and_other_commands_stay():
    cli = cli_of(build_plugin_manager(disabled=["plugin_list"]))
    assert "plugins" not in cli.commands and "agent-env" in cli.commands
    assert CliRunner().invoke(cli, ["plugins"]).exit_code == 2  # click: no such command
