"""The ``kvgate`` command line: ``serve``, ``plugins`` and whatever plugins add."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Optional

import click

from kvgate.core.config import ConfigError, read_config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.plugins import build_plugin_manager, collect, describe_plugins


def _config(config_path: Optional[str], overrides: dict):
    """(config, plugin manager): the core sections, the manager they ask for, then the plugin
    sections validated for it; a bad key in either step is a one-line error."""
    try:
        config = read_config(config_path, overrides)
        pm = build_plugin_manager(disabled=config.plugins.disabled)
        return bind_plugin_sections(config, pm), pm
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
@click.version_option(package_name="kvgate")
def cli() -> None:
    """kvgate: an LLM inference server for agent workloads."""


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML configuration file.")
@click.option("--model", help="Hugging Face directory or GGUF file (default: the embedded SmolLM2-135M).")
@click.option("--host", help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8000).")
@click.option("--log-level", default="info", show_default=True)
def serve(config_path, model, host, port, log_level) -> None:
    """Run the HTTP server."""
    import uvicorn

    os.umask(0o077)  # the state it writes holds every tenant's conversations: readable by its owner only
    from kvgate.core.http.app import create_app

    overrides: dict = {"server": {}, "model": {}}
    if model:
        overrides["model"]["path"] = model
    if host:
        overrides["server"]["host"] = host
    if port:
        overrides["server"]["port"] = port
    config, pm = _config(config_path, overrides)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        app = create_app(config, pm)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"kvgate serving {config.model.name!r} on http://{config.server.host}:{config.server.port}", err=True)
    from kvgate.core.http.shutdown import DrainingServer

    server_config = uvicorn.Config(app, host=config.server.host, port=config.server.port,
                                   log_level=log_level.lower(), access_log=False, timeout_graceful_shutdown=5,
                                   ws_max_size=config.server.max_body_bytes)
    DrainingServer(server_config, app.state.ctx.pipeline.engine.drain).run()


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--no-model", is_flag=True, help="Do not resolve the served model's dialect.")
def plugins(config_path, as_json, no_model) -> None:
    """List registered plugins, their distributions and what they register."""
    config, pm = _config(config_path, {})
    report = {"plugins": describe_plugins(pm), "registries": {}}
    for hook, kind in [("register_adapters", "adapter"), ("register_services", "service"),
                       ("register_dialects", "dialect"),
                       ("register_chat_formats", "chat format"), ("register_model_runtimes", "model runtime"),
                       ("register_cache_tiers", "cache tier"), ("register_grammar_backends", "grammar backend"),
                       ("register_generation_guards", "generation guard"),
                       ("register_model_formats", "model format"), ("register_default_models", "default model"),
                       ("register_config_sections", "config section")]:
        registry = collect(pm, hook, kind)
        report["registries"][kind] = {name: registry.owners[name] for name in registry.names()}
    report["runtimes"] = _runtimes(pm)
    if not no_model:
        report["model"] = _served_model(config, pm)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for row in report["plugins"]:
        click.echo(f"{row['name']:<22} {row['distribution'] or '(not from an entry point)':<22} {', '.join(row['hooks'])}")
    for kind, entries in report["registries"].items():
        click.echo(f"{kind}s: " + (", ".join(f"{n} ({o})" for n, o in entries.items()) or "none"))
    for name, row in report["runtimes"].items():
        loads = "; ".join(f"{kind} {', '.join(names)}" for kind, names in row["architectures"].items() if names)
        click.echo(f"model runtime {name} ({row['plugin']}) loads {loads or 'nothing'}")
    if "model" in report:
        click.echo("served model: " + ", ".join(f"{k}={v}" for k, v in report["model"].items()))


def _runtimes(pm) -> dict:
    """Each model runtime, its plugin and the architectures it declares, by source kind."""
    from kvgate.core.loading.model_runtimes import collect_runtimes

    runtimes = collect_runtimes(pm)
    return {name: {"plugin": runtimes.owners[name], "architectures": {
        kind: list(names) for kind, names in runtimes.get(name).declared().items()}} for name in runtimes.names()}


def _served_model(config, pm) -> dict:
    """The served model's dialect and chat format, from its config and template: no weights load."""
    from kvgate.core.loading.dialect_choice import build_chat_format
    from kvgate.core.loading.model_runtimes import choose_runtime, collect_runtimes
    from kvgate.core.loading.model_sources import default_model_path, read_model_source

    try:
        source = read_model_source(pm, config.model.path or default_model_path(pm))
        runtimes = collect_runtimes(pm)
        name = choose_runtime(runtimes, source)
        if runtimes.get(name).preview is None:
            return {"name": config.model.name, "runtime": name,
                    "error": f"the {name} runtime cannot describe a model without loading it"}
        runtime = runtimes.get(name).preview(source)
        dialect_name, dialect, chat_format = build_chat_format(config, pm, runtime)
    except (ConfigError, Exception) as exc:  # report, don't crash: this is a listing command
        return {"name": config.model.name, "error": str(exc)}
    return {"name": config.model.name, "architecture": runtime.info.architecture, "dialect": dialect_name,
            "dialect_variant": dialect.variant, "chat_format": chat_format.name}


def build_cli() -> click.Group:
    pm = build_plugin_manager()
    pm.hook.register_commands(cli=cli)
    return cli


def main() -> None:
    build_cli()(prog_name="kvgate")


if __name__ == "__main__":
    main()
