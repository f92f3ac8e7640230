"""Plugin: ``kvgate plugins`` -- the registered plugins, what each registers, and the served model's
dialect and chat format, read from its config and template (no weights load).

A command line plugin like any third party's (``register_commands``); ``--json`` prints the report
that tests and scripts read.
"""

from __future__ import annotations

import json

import click

from kvgate.core.cli import config_and_plugins
from kvgate.core.config import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import collect, describe_plugins

REGISTRIES = [("register_adapters", "adapter"), ("register_services", "service"), ("register_dialects", "dialect"),
              ("register_chat_formats", "chat format"), ("register_model_runtimes", "model runtime"),
              ("register_cache_tiers", "cache tier"), ("register_grammar_backends", "grammar backend"),
              ("register_generation_guards", "generation guard"), ("register_model_formats", "model format"),
              ("register_default_models", "default model"), ("register_config_sections", "config section"),
              ("register_request_observers", "request observer"), ("register_asgi_wrappers", "ASGI wrapper"),
              ("register_drafters", "drafter"), ("register_tokenizer_caches", "tokenizer cache"),
              ("register_tenant_policies", "tenant policy"), ("register_schema_preparers", "schema preparer"),
              ("register_mask_refiners", "mask refiner"), ("register_request_checks", "request check"),
              ("register_lookup_observers", "lookup observer"), ("register_tool_grammars", "tool grammar")]


@click.command("plugins")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--no-model", is_flag=True, help="Do not resolve the served model's dialect.")
def plugins(config_path, as_json, no_model) -> None:
    """List registered plugins, their distributions and what they register."""
    config, pm = config_and_plugins(config_path, {})
    report = {"plugins": describe_plugins(pm), "registries": {}}
    for hook, kind in REGISTRIES:
        registry = collect(pm, hook, kind)
        report["registries"][kind] = {name: registry.owners[name] for name in registry.names()}
    report["runtimes"] = runtimes(pm)
    if not no_model:
        report["model"] = served_model(config, pm)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_report(report)


def plural(kind: str) -> str:
    if kind.endswith("y"):
        return kind[:-1] + "ies"
    return kind + ("es" if kind.endswith("x") else "s")


def print_report(report: dict) -> None:
    for row in report["plugins"]:
        source = row["distribution"] or "(not from an entry point)"
        click.echo(f"{row['name']:<22} {source:<22} {', '.join(row['hooks'])}")
    for kind, entries in report["registries"].items():
        click.echo(f"{plural(kind)}: " + (", ".join(f"{n} ({o})" for n, o in entries.items()) or "none"))
    for name, row in report["runtimes"].items():
        loads = "; ".join(f"{kind} {', '.join(names)}" for kind, names in row["architectures"].items() if names)
        click.echo(f"model runtime {name} ({row['plugin']}) loads {loads or 'nothing'}")
    if "model" in report:
        click.echo("served model: " + ", ".join(f"{k}={v}" for k, v in report["model"].items()))


def runtimes(pm) -> dict:
    """Each model runtime, its plugin and the architectures it declares, by source kind."""
    from kvgate.core.loading.model_runtimes import collect_runtimes

    found = collect_runtimes(pm)
    return {name: {"plugin": found.owners[name], "architectures": {
        kind: list(names) for kind, names in found.get(name).declared().items()}} for name in found.names()}


def served_model(config, pm) -> dict:
    """The served model's dialect and chat format, from its config and template: no weights load."""
    from kvgate.core.loading.dialect_choice import build_chat_format
    from kvgate.core.loading.model_runtimes import choose_runtime, collect_runtimes
    from kvgate.core.loading.model_sources import default_model_path, read_model_source

    try:
        source = read_model_source(pm, config.model.path or default_model_path(pm))
        found = collect_runtimes(pm)
        name = choose_runtime(found, source)
        if found.get(name).preview is None:
            return {"name": config.model.name, "runtime": name,
                    "error": f"the {name} runtime cannot describe a model without loading it"}
        runtime = found.get(name).preview(source)
        dialect_name, dialect, chat_format = build_chat_format(config, pm, runtime)
    except (ConfigError, Exception) as exc:  # report, don't crash: this is a listing command
        return {"name": config.model.name, "error": str(exc)}
    return {"name": config.model.name, "architecture": runtime.info.architecture, "dialect": dialect_name,
            "dialect_variant": dialect.variant, "chat_format": chat_format.name}


@hookimpl
def register_commands(cli):
    cli.add_command(plugins)
