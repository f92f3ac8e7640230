"""Plugin (entry point ``cache_cli``): ``kvgate cache ls | inspect ID | diagnose | clear`` over the SSD tier's store."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Optional

import click

from kvgate.core.hookspecs import hookimpl


def _open(ctx: click.Context, writer: bool = False):
    from kvgate.plugins.cache_ssd.store import SsdStore

    root: Path = ctx.obj["path"]
    if not (root / "manifest").is_dir():
        raise click.ClickException(f"no SSD cache at {root}")
    store = SsdStore(root, ctx.obj["chunk_tokens"], ctx.obj["capacity"], writer=writer)
    live = store.others_live() if writer else set()
    if live:  # clearing drops every worker's snapshots
        store.close()
        raise click.ClickException(f"the SSD cache at {root} is in use by {len(live)} live worker(s); "
                                   "stop the server first")
    store.load_index(drop_bad=writer)
    return store


def _emit(data, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2) if as_json else text)


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).isoformat(timespec="seconds")


@click.group("cache")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML configuration file.")
@click.option("--path", "store_path", type=click.Path(file_okay=False), help="SSD cache folder (overrides config).")
@click.pass_context
def cache_group(ctx: click.Context, config_path: Optional[str], store_path: Optional[str]) -> None:
    """Inspect and manage the SSD prefix cache."""
    from kvgate.core.config import ConfigError
    from kvgate.core.config_sections import load_config

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    path = Path(store_path) if store_path else config.path_in_state(config.cache.ssd_path, "ssd")
    ctx.obj = {"path": path, "chunk_tokens": config.cache.chunk_tokens, "capacity": config.cache.ssd_bytes}


@cache_group.command("ls")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_snapshots(ctx, as_json) -> None:
    """List snapshots, least recently used first."""
    from kvgate.plugins.cache_ssd.inspect import summary

    store = _open(ctx)
    rows = [summary(r) for r in sorted(store.records.values(), key=lambda r: r.last_used)]
    lines = [f"{'ID':32}  {'TOKENS':>7}  {'ROUND':>5}  {'BYTES':>12}  {'GEN':>5}  LAST USED            CACHE KEY"]
    lines += [f"{r['id']}  {r['tokens']:>7}  {r['round']:>5}  {r['bytes']:>12}  {r['generation']:>5}  "
              f"{_when(r['last_used'])}  {r['cache_key'] or '-'}" for r in rows]
    lines.append(f"{len(rows)} snapshots, {store.total_bytes} bytes on disk, at {store.root}")
    store.close()
    _emit(rows, as_json, "\n".join(lines))


@cache_group.command("inspect")
@click.argument("snapshot_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def inspect_snapshot(ctx, snapshot_id, as_json) -> None:
    """Show one snapshot (an id or a unique prefix of one) and its chunks."""
    from kvgate.plugins.cache_ssd.inspect import details, find

    store = _open(ctx)
    try:
        info = details(store, find(store, snapshot_id))
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    finally:
        store.close()
    text = "\n".join(f"{k}: {v}" for k, v in info.items() if k != "chunk_files")
    text += "".join(f"\n  chunk {c['index']}: tokens {c['tokens']} {c['file_bytes']} bytes, shared by "
                    f"{c['shared_by']}, key {c['key'][:16]}" for c in info["chunk_files"])
    _emit(info, as_json, text)


@cache_group.command("diagnose")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def diagnose_store(ctx, as_json) -> None:
    """Validate every chunk of every snapshot; exit status 1 when something is damaged."""
    from kvgate.plugins.cache_ssd.inspect import diagnose

    store = _open(ctx)
    report = diagnose(store)
    store.close()
    text = (f"{report['snapshots']} snapshots, {report['bytes']} bytes, generation {report['generation']}, "
            f"{report['unreferenced_files']} unreferenced files\n"
            + "".join(f"BAD {b['id']}: {b['reason']}\n" for b in report["bad"])
            + ("healthy" if report["healthy"] else "damaged snapshots found (the server drops them on use)"))
    _emit(report, as_json, text)
    if not report["healthy"]:
        ctx.exit(1)


@cache_group.command("clear")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def clear_store(ctx, yes) -> None:
    """Delete every snapshot (the server must be stopped)."""
    store = _open(ctx, writer=True)
    try:
        if not yes and not click.confirm(f"Delete {len(store.records)} snapshots at {store.root}?"):
            raise click.Abort()
        count = store.clear()
    finally:
        store.close()
    click.echo(f"deleted {count} snapshots")


@hookimpl
def register_commands(cli):
    cli.add_command(cache_group)
