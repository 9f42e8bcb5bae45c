"""``cogd snapshot publish | pull | status``: index snapshots on shared storage (:mod:`cogd.snapshot`),
and the pull ``cogd up`` makes before it starts the daemon of a repository without an index."""

from __future__ import annotations

import json
import os

import click

from cogd.cli.base import backend, console, layout_from
from cogd.config import load_config
from cogd.paths import Layout
from cogd.rpc import control


@click.group("snapshot")
def snapshot_group() -> None:
    """Share the index through storage the team already runs: CI publishes, daemons pull.

    Configure the store with [snapshot] uri in .cogd/config.toml (file:///shared/dir or
    s3://bucket/prefix; S3 credentials from the AWS_* environment variables).
    """


def _emit(data: dict, as_json: bool, line: str) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(line)  # not rich: a line a script greps must not be wrapped at 80 columns


@snapshot_group.command("publish")
@click.option("--to", "uri", default=None, metavar="URI", help="Store to publish to (default: [snapshot] uri).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def publish_command(ctx: click.Context, uri: str | None, as_json: bool) -> None:
    """Publish the index of HEAD (a clean work tree) as an immutable snapshot; a no-op when one exists."""
    from cogd.snapshot.publish import publish

    layout = layout_from(ctx)
    config = load_config(layout.config_file)
    with backend(layout, fresh=True) as be:  # in-process: refreshed on entry; a daemon: asked to
        be.call("index.refresh", {"wait": True}, timeout=3600)
        result = publish(layout, config, uri, progress=lambda _line: None)
    line = (f"snapshot of {result.commit[:12]} already in {result.uri}: nothing to do" if result.state == "exists" else
            f"published {result.commit[:12]} to {result.uri}: {result.counts['entities']} entities, "
            f"{result.counts['vectors']} vectors, {result.files_bytes / 1e6:.1f} MB "
            f"({result.stored_bytes / 1e6:.1f} MB stored, {result.uploaded_bytes / 1e6:.1f} MB uploaded) "
            f"in {result.seconds:.1f} s")
    _emit(result.as_dict(), as_json, line)


def pull_locked(layout: Layout, uri: str | None = None):
    """Pull under the daemon lock (no daemon may run); returns the PullResult. Raises ClickException
    when a daemon or another command holds the lock."""
    from cogd.snapshot.pull import pull

    if control.is_running(layout):
        raise click.ClickException("a daemon runs for this repository and holds its index\n"
                                   "  fix: `cogd stop`, then pull again")
    fd = control.try_lock(layout)
    if fd is None:
        raise click.ClickException("another cogd command holds this repository's lock; try again when it has finished")
    try:
        return pull(layout, load_config(layout.config_file), uri=uri)
    finally:
        os.close(fd)


@snapshot_group.command("pull")
@click.option("--from", "uri", default=None, metavar="URI", help="Store to pull from (default: [snapshot] uri).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def pull_command(ctx: click.Context, uri: str | None, as_json: bool) -> None:
    """Install the nearest ancestor's snapshot as the local index (the daemon catches up to HEAD).

    Replaces the local index and vectors; memory and the ledger are never touched. Exits 1 when
    the snapshot was refused or the store failed (the local index is then as it was).
    """
    layout = layout_from(ctx)
    result = pull_locked(layout, uri)
    _emit(result.as_dict(), as_json, result.line())
    if result.state in ("refused", "failed"):
        ctx.exit(1)


def snapshot_status(layout: Layout, *, reach_store: bool) -> dict:
    """``{"uri", "installed", "nearest"?, "error"?}``: the configured store, the snapshot the local
    index came from (:func:`cogd.snapshot.state.installed`), and with ``reach_store`` the nearest
    snapshot the store has for HEAD."""
    from cogd.snapshot import state

    try:
        config = load_config(layout.config_file)
    except Exception as exc:  # a config error is status's and doctor's to report elsewhere
        return {"uri": None, "installed": state.installed(layout), "error": str(exc)}
    out: dict = {"uri": config.snapshot.uri or None, "installed": state.installed(layout)}
    if reach_store and config.snapshot.uri:
        from cogd.errors import CogdError
        from cogd.snapshot.pull import find, refusal
        from cogd.snapshot.publish import store_for

        try:
            found = find(store_for(config), layout.root, config)
            if found is not None:
                manifest = found[1]
                out["nearest"] = {"commit": manifest.commit, "created_at": manifest.created_at,
                                  "counts": manifest.counts, "bytes": manifest.total_bytes,
                                  "model": (manifest.model or {}).get("id"),
                                  "refused": refusal(manifest, config, layout.root)}
            else:
                out["nearest"] = None
        except CogdError as exc:
            out["error"] = exc.line()
    return out


def installed_line(installed: dict | None) -> str:
    """One line for ``cogd status``: the snapshot the index came from and how far HEAD is from it."""
    if not installed:
        return "-"
    behind = installed.get("behind")
    return (f"{str(installed.get('commit'))[:12]} from {installed.get('uri')} "
            f"({'?' if behind is None else behind} commit{'' if behind == 1 else 's'} behind HEAD)")


@snapshot_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status_command(ctx: click.Context, as_json: bool) -> None:
    """Show the configured store, the snapshot the index came from, and the nearest one available."""
    layout = layout_from(ctx, create=False)
    info = snapshot_status(layout, reach_store=True)
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    console.print(f"store: {info['uri'] or '- (set [snapshot] uri)'}", markup=False)
    console.print(f"index from: {installed_line(info['installed'])}", markup=False)
    if "nearest" in info:
        near = info["nearest"]
        console.print("nearest: " + ("none for HEAD or its recent ancestors" if near is None else
                                     f"{near['commit'][:12]} ({near['counts']['entities']} entities, "
                                     f"{near['bytes'] / 1e6:.1f} MB)"
                                     + (f", refused: {near['refused']}" if near["refused"] else "")), markup=False)
    if info.get("error"):
        console.print(f"error: {info['error']}", markup=False)


def pull_before_up(layout: Layout) -> None:
    """For ``cogd up``: when a store is configured, no daemon runs and there is no local index,
    pull the nearest snapshot first (printing the outcome) so the daemon starts from it."""
    from cogd.snapshot.pull import local_index_empty

    try:
        config = load_config(layout.config_file)
    except Exception:
        return  # the daemon reports a broken config itself
    if not config.snapshot.uri or not config.snapshot.pull_on_start or control.is_running(layout):
        return
    if not local_index_empty(layout):
        return
    click.echo(f"pulling the index snapshot from {config.snapshot.uri} …")
    try:
        result = pull_locked(layout)
    except click.ClickException:
        return  # someone else holds the lock: the daemon decides
    click.echo(result.line() + ("" if result.state == "installed" else " — building the index locally"))
