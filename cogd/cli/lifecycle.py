"""The daemon's life: ``cogd up``, ``start``, ``stop``, ``daemon`` (foreground), ``mcp``, ``logs``."""

from __future__ import annotations

import sys
import time

import click
from rich.markup import escape

from cogd import safepath
from cogd.cli.base import RemoteBackend, console, layout_from, not_up
from cogd.cli.install import LOCAL_HELP, SettingsError, install_hooks_for
from cogd.cli.progress import follow_embedding, index_with_progress
from cogd.rpc import control


@click.command()
@click.option("--no-hooks", is_flag=True, help="Do not wire any agent (no client's settings are touched).")
@click.option("--local", "local_hooks", is_flag=True, help=LOCAL_HELP)
@click.option("--wait-embed", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Show the background embedding for at most this long after the pack. Default: on a "
                   "terminal until it is done (Ctrl-C leaves it to the background); otherwise not at all.")
@click.pass_context
def up(ctx: click.Context, no_hooks: bool, local_hooks: bool, wait_embed: float | None) -> None:
    """Set up this repository: start the daemon, index, wire your agents' hooks, show a pack.

    The agents wired are Claude Code and every other client this repository or you already
    use (``cogd install-hooks --list`` shows them; ``--client`` there wires others).

    The pack is printed as soon as the lexical index is current (it gains vectors as they
    arrive); then the background embedding is shown until it is done, and Ctrl-C leaves it
    running in the background.
    """
    layout = layout_from(ctx)
    console.print(f"[bold]cogd[/] for [cyan]{escape(str(layout.root))}[/]")
    from cogd.cli.snapshot import pull_before_up  # [snapshot] uri: start from the team's index

    pull_before_up(layout)
    started = control.spawn(layout, force=True)
    if not control.wait_ready(layout, timeout=60):
        raise click.ClickException(not_up(layout))
    console.print(f"daemon {'started' if started else 'already running'} (pid {control.read_pid(layout)['pid']})")
    be = RemoteBackend(layout)
    t0 = time.monotonic()
    index = index_with_progress(be)["index"]
    click.echo(
        f"index: {index['files']} files, {index['entities']} code entities"
        + (f" (+{index['file_entities']} file entities)" if index.get("file_entities") else "")
        + f", {index['edges']} edges "
        f"at commit {(index['commit'] or 'none')[:12]} ({time.monotonic() - t0:.1f} s)"
    )
    if not no_hooks:
        try:
            install_hooks_for(layout, local_hooks)
        except SettingsError as exc:  # a client's file cogd cannot merge: the others are wired, the pack still comes
            console.print(f"[yellow]not wired[/]: {exc.line()}", soft_wrap=True)
    # The pack first: it needs the lexical index only, and the embedding may take minutes.
    pack = be.call("context.session_start", {"session_id": "cogd-up", "source": "startup", "record": False})
    console.rule("sample context pack (what SessionStart injects)")
    click.echo(pack["text"] or "(empty: no entities indexed yet)")
    console.rule()
    console.print("Try [bold]cogd context \"your question\"[/] to see a prompt pack.")
    follow_embedding(be, wait_embed)


@click.command()
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the daemon in the background and wait until it answers."""
    layout = layout_from(ctx)
    try:
        started = control.spawn(layout, force=True)  # a person asked: no back-off
    except OSError as exc:
        raise click.ClickException(f"cannot start the daemon: {exc}") from exc
    if not control.wait_ready(layout, timeout=60):
        raise click.ClickException(not_up(layout))
    pid = (control.read_pid(layout) or {}).get("pid")
    console.print(f"daemon {'started' if started else 'already running'} (pid {pid})")


@click.command()
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Stop the daemon (SIGTERM; it finishes the current write first)."""
    layout = layout_from(ctx, create=False)  # nothing to stop is no reason to make .cogd/
    if not control.is_running(layout):
        console.print("no daemon running")
        return
    if not control.stop(layout):
        info = control.read_pid(layout) or {}
        if not isinstance(info.get("pid"), int) or not control.is_daemon_process(info["pid"], layout):
            raise click.ClickException(
                "the lock is held by another cogd process, not a daemon (probably a command working "
                "without one); try again when it has finished"
            )
        raise click.ClickException("the daemon did not stop")
    console.print("daemon stopped")


@click.command()
@click.pass_context
def daemon(ctx: click.Context) -> None:
    """Run the daemon in the foreground (logs to stderr too), for debugging."""
    from cogd.daemon.server import run

    sys.exit(run(layout_from(ctx).root, None, foreground=True))


@click.command()
@click.pass_context
def mcp(ctx: click.Context) -> None:
    """Serve the Model Context Protocol on stdin/stdout (for Claude Code and other MCP clients).

    Talks to this repository's daemon, starting it if needed.
    """
    from cogd.mcp_server import run as run_mcp

    run_mcp(layout_from(ctx).root)


@click.command()
@click.option("-n", "lines", default=40, show_default=True, type=click.IntRange(min=1),
              help="How many lines from the end.")
@click.option("--hook", is_flag=True, help="The hook client's log instead of the daemon's.")
@click.pass_context
def logs(ctx: click.Context, lines: int, hook: bool) -> None:
    """Show the end of the daemon's (or the hook client's) log."""
    layout = layout_from(ctx, create=False)
    path = layout.hook_log if hook else layout.daemon_log
    safepath.check_chain(path.parent, any_mode=True)
    raw = safepath.read_bytes(path, 64 << 20)  # never through a link
    if raw is None:
        console.print(f"no log yet at {path}")
        return
    tail = raw.decode("utf-8", errors="replace").splitlines()[-lines:]
    click.echo("\n".join(tail))
