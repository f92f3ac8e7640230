"""Plugin (entry point ``agent_env``): ``kvgate agent-env claude|codex``, what an agent needs to use this server.

It prints what points the client at the server named by the config (``[server] host``, ``port``,
``api_key``) or by ``--url``: shell exports for Claude Code, the provider table of
``~/.codex/config.toml`` for Codex. With ``--write`` it also writes the client's own files under
``--home`` (default: the user's home), keeping everything else in them:

- Claude Code, ``~/.claude.json``: ``hasCompletedOnboarding`` (on a fresh HOME the interactive UI
  otherwise exits with "Failed to connect to api.anthropic.com") and the key's approval in
  ``customApiKeyResponses.approved``, which holds a key's last 20 characters (otherwise the UI asks
  whether to use the key, and its default answer is No).
- Codex, ``~/.codex/config.toml``: the ``kvgate`` provider, ``model_provider = "kvgate"`` where no
  provider is chosen yet, and analytics, plugins and apps off where those tables are absent.

A file that does not parse is never overwritten: the command stops with an error naming it.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import tomllib
from pathlib import Path
from typing import Optional

import click

from kvgate.core.hookspecs import hookimpl

UNUSED_KEY = "unused"  # what a client sends where the server takes no key
KEY_ENV = "KVGATE_API_KEY"  # where Codex reads the key (its provider's env_key)
APPROVED_KEY_CHARS = 20  # Claude Code remembers an approved key by its last 20 characters


def claude_env(url: str, key: str) -> dict[str, str]:
    """The environment Claude Code needs: the server, its key, and no traffic to outside hosts."""
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry or vendor calls
        "CLAUDE_CODE_DISABLE_1M_CONTEXT": "1",  # one model line in every session's prompt
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",  # no plugin marketplace download
        "DISABLE_AUTOUPDATER": "1",
    }


def codex_provider(url: str, needs_key: bool) -> str:
    """The ``[model_providers.kvgate]`` table of Codex's config.toml."""
    lines = ["[model_providers.kvgate]", 'name = "kvgate"', f"base_url = {json.dumps(url + '/v1')}",
             'wire_api = "responses"', "supports_websockets = true"]
    if needs_key:
        lines.append(f'env_key = "{KEY_ENV}"')
    return "\n".join(lines) + "\n"


OFF_TABLES = {"analytics": "[analytics]\nenabled = false\n", "features": "[features]\nplugins = false\napps = false\n"}


def codex_config(existing: str, url: str, needs_key: bool) -> str:
    """``existing`` (a config.toml's text, maybe empty) with kvgate's provider added; raises
    ValueError where it does not parse. Tables it already has are left as they are."""
    parsed = tomllib.loads(existing)
    if "kvgate" in parsed.get("model_providers", {}):
        return existing
    blocks = [("" if "model_provider" in parsed else 'model_provider = "kvgate"\n') + existing.strip("\n"),
              codex_provider(url, needs_key)]
    blocks += [text for name, text in OFF_TABLES.items() if name not in parsed]
    result = "\n\n".join(block.strip("\n") for block in blocks if block.strip()) + "\n"
    tomllib.loads(result)  # what is written always parses
    return result


def claude_json(existing: dict, key: str) -> dict:
    """``~/.claude.json``'s content with onboarding done and ``key`` approved."""
    updated = dict(existing, hasCompletedOnboarding=True)
    responses = dict(updated.get("customApiKeyResponses") or {})
    approved = list(responses.get("approved") or [])
    if key[-APPROVED_KEY_CHARS:] not in approved:
        approved.append(key[-APPROVED_KEY_CHARS:])
    responses["approved"] = approved
    responses["rejected"] = [k for k in responses.get("rejected") or [] if k != key[-APPROVED_KEY_CHARS:]]
    updated["customApiKeyResponses"] = responses
    return updated


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def write_claude_files(home: Path, key: str) -> Path:
    path = home / ".claude.json"
    try:
        existing = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"{path} is not readable JSON ({exc}); left as it is") from None
    if not isinstance(existing, dict):
        raise click.ClickException(f"{path} does not hold a JSON object; left as it is")
    write_atomically(path, json.dumps(claude_json(existing, key), indent=2) + "\n")
    return path


def write_codex_files(home: Path, url: str, needs_key: bool) -> Path:
    path = home / ".codex" / "config.toml"
    try:
        existing = path.read_text() if path.exists() else ""
        text = codex_config(existing, url, needs_key)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.ClickException(f"{path} is not readable TOML ({exc}); left as it is") from None
    if text != existing:
        write_atomically(path, text)
    return path


def server_url(host: str, port: int) -> str:
    """The address a client on this machine reaches: a wildcard listen address means loopback."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://[{reachable}]:{port}" if ":" in reachable else f"http://{reachable}:{port}"


@click.command("agent-env")
@click.argument("agent", type=click.Choice(["claude", "codex"]))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="The server's TOML configuration.")
@click.option("--url", help="The server's address (default: from the configuration).")
@click.option("--write", is_flag=True, help="Also write the client's own files under --home.")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), help="Home folder to write in.")
def agent_env(agent: str, config_path: Optional[str], url: Optional[str], write: bool, home: Optional[Path]) -> None:
    """Print (and with --write, write) what Claude Code or Codex needs to use this server."""
    from kvgate.core.config import ConfigError, read_config

    try:
        server = read_config(config_path, {}).server
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    url = (url or server_url(server.host, server.port)).rstrip("/")
    home = home or Path.home()
    if agent == "claude":
        key = server.api_key or UNUSED_KEY
        for name, value in claude_env(url, key).items():
            click.echo(f"export {name}={shlex.quote(value)}")
        if write:
            click.echo(f"# wrote {write_claude_files(home, key)}", err=True)
        click.echo("# then: claude   (or claude -p \"...\")", err=True)
        return
    click.echo(codex_provider(url, bool(server.api_key)), nl=False)
    if server.api_key:
        click.echo(f"# export {KEY_ENV}=<the server's api_key>", err=True)
    if write:
        click.echo(f"# wrote {write_codex_files(home, url, bool(server.api_key))}", err=True)
    click.echo('# then: codex exec --skip-git-repo-check "..."   (or codex)', err=True)


@hookimpl
def register_commands(cli):
    cli.add_command(agent_env)
