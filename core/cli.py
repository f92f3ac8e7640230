"""The ``kvgate`` command line: ``serve`` and whatever plugins add (``register_commands``: ``plugins``,
``cache``, ``agent-env``, ...)."""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Optional

import click

from kvgate.core.config import ConfigError, read_config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.plugins import build_plugin_manager


def config_and_plugins(config_path: Optional[str], overrides: dict):
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
    config, pm = config_and_plugins(config_path, overrides)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        app = create_app(config, pm)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"kvgate serving {config.model.name!r} on http://{config.server.host}:{config.server.port}", err=True)
    # what the start built lives as long as the server: the collector stops walking it, so its full
    # passes while serving are short and the exit does not walk it either (~0.4 s of a stop)
    gc.collect()
    gc.freeze()
    from kvgate.core.http.shutdown import DrainingServer
    from kvgate.core.http.slow_clients import deadline_protocol

    server_config = uvicorn.Config(app, host=config.server.host, port=config.server.port,
                                   log_level=log_level.lower(), access_log=False, timeout_graceful_shutdown=5,
                                   ws_max_size=config.server.max_body_bytes, http=deadline_protocol(config.server))
    DrainingServer(server_config, app.state.ctx.pipeline.engine.drain).run()


def build_cli() -> click.Group:
    pm = build_plugin_manager()
    pm.hook.register_commands(cli=cli)
    return cli


def main() -> None:
    build_cli()(prog_name="kvgate")


if __name__ == "__main__":
    main()
