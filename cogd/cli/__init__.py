"""``cogd``: the command line.

Every command works on the repository that contains the current directory
(or ``--root``) and initialises ``.cogd/`` there if it is missing. Commands
talk to the repository's daemon when one runs; when none does, they take the
daemon lock and do the same work in-process (DESIGN.md §2, single writer).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cogd import safepath
from cogd.rpc import locate
from cogd.config import ConfigError, load_config
from cogd.rpc import control
from cogd.rpc.client import DaemonUnavailable, RemoteError, call
from cogd.paths import Layout, find_root

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class LocalBackend:
    """The daemon's service run in this process, under the daemon lock."""

    def __init__(self, layout: Layout, lock_fd: int):
        from cogd.daemon.service import Service  # heavy: only when no daemon runs

        self.lock_fd = lock_fd
        try:
            config = load_config(layout.config_file)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
        # In-process work is lexical: loading the model and embedding the
        # whole tree is the daemon's background job, not a CLI command's.
        # Damaged projections are moved aside and rebuilt as in the daemon; what
        # cannot be recovered is a clear error with its fix, never a traceback.
        try:
            self.service = Service(layout, config, start_index=False, start_embedder=False)
        except BaseException as exc:
            os.close(lock_fd)
            _store_failure(exc)
            raise

    def call(self, method: str, params: dict | None = None, timeout: float = 0) -> object:
        from cogd.rpc.protocol import RpcError

        try:
            return self.service.call(method, params or {})
        except RpcError as exc:
            raise RemoteError(exc.to_json()) from exc

    def close(self) -> None:
        self.service.close()
        os.close(self.lock_fd)


def _store_failure(exc: BaseException) -> None:
    """Turn a store that cannot be opened into a ClickException with the fix (else return)."""
    import sqlite3

    from cogd.recovery import StoreRefused

    if isinstance(exc, StoreRefused):
        raise click.ClickException(f"{exc.store}: {exc.reason}\n  fix: {exc.fix}") from exc
    if isinstance(exc, (sqlite3.Error, OSError)):
        raise click.ClickException(
            f"cannot open cogd's stores: {exc.__class__.__name__}: {exc}\n"
            "  fix: run `cogd doctor` (it names the file and what to do)") from exc


def _not_up(layout: Layout) -> str:
    """Why the daemon did not come up, from its failed-start marker when it left one."""
    failed = control.start_failure(layout)
    if failed:
        return f"the daemon could not start: {failed.get('reason')}\n  fix: {failed.get('fix') or 'see `cogd logs`'}"
    return "the daemon did not come up; see `cogd logs`"


class RemoteBackend:
    def __init__(self, layout: Layout):
        self.layout = layout

    def call(self, method: str, params: dict | None = None, timeout: float = 30.0) -> object:
        return call(self.layout.socket_path, method, params or {}, timeout=timeout)

    def close(self) -> None:
        pass


def _layout(root: str | None, create: bool = True) -> Layout:
    """The repository's layout; ``create`` makes ``.cogd/`` (read-only commands pass False)."""
    start = Path(root) if root else Path.cwd()
    found = find_root(start)
    if found is None:
        if root and Path(root).is_dir():
            found = Path(root).resolve()
        elif root:
            raise click.ClickException(f"{root} is not a directory")
        else:
            raise click.ClickException(f"{start} is not inside a git repository (use --root to pick a folder)")
    layout = Layout(found)
    if create:
        try:
            layout.ensure()
        except safepath.UnsafePath as exc:
            raise click.ClickException(exc.refusal()) from exc
        except OSError as exc:
            raise click.ClickException(f"cannot create {layout.cogd_dir}: {exc}") from exc
    return layout


@contextmanager
def backend(layout: Layout, *, fresh: bool = True):
    """A backend for this command: the running daemon, or an in-process service.

    ``fresh``: with an in-process service, bring the index up to date first
    (a running daemon keeps its own index current).
    """
    if control.is_running(layout) and control.wait_ready(layout, timeout=30):
        yield RemoteBackend(layout)
        return
    fd = control.try_lock(layout)
    if fd is None:  # a daemon started meanwhile
        if not control.wait_ready(layout, timeout=30):
            raise click.ClickException("the daemon holds the lock but does not answer; see `cogd logs`")
        yield RemoteBackend(layout)
        return
    local = LocalBackend(layout, fd)
    try:
        if fresh:
            local.call("index.refresh", {"wait": True})
        yield local
    finally:
        local.close()


_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")  # a memory id; code ids hold "::" or a path


def _call(be, method: str, params: dict | None = None, timeout: float = 30.0):
    try:
        return be.call(method, params, timeout=timeout)
    except RemoteError as exc:
        raise click.ClickException(f"{exc} ({exc.kind})") from exc
    except DaemonUnavailable as exc:
        raise click.ClickException(f"the daemon did not answer: {exc}") from exc


def _index_with_progress(be, quiet: bool = False, full: bool = False) -> dict:
    """Ask for a refresh of the whole tree and draw a progress bar until it has committed.

    ``full`` re-parses every file instead of only the changed ones.
    """
    ticket = _call(be, "index.refresh", {"wait": False, "full": full})["ticket"]
    columns = (SpinnerColumn(), TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[path]}", style="dim"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task("index", total=None, path="")
        while True:
            status = _call(be, "status")
            index = status["index"]
            p = index["progress"]
            if p["total"]:
                progress.update(task, total=p["total"], completed=p["done"], path=p["path"][-50:])
            if index["completed_ticket"] >= ticket:
                break
            time.sleep(0.1)
    return status


def _embed_with_progress(be, wait_s: float) -> None:
    """Show the background embedding's progress for up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    columns = (SpinnerColumn(), TextColumn("[bold]embedding"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[note]}", style="dim"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("embed", total=None, note="loading the model")
        while True:
            e = _call(be, "status").get("embedding") or {}
            if e.get("state") in ("disabled", "error", None):
                break
            phase = e.get("phase") or e.get("state")  # a daemon without phases says only its state
            if phase == "counting":
                progress.update(task, total=None, note="counting the entities")
            elif phase != "loading":
                progress.update(task, total=e.get("entities") or None, completed=e.get("embedded_entities", 0),
                                note=f"ETA {e.get('eta_s', 0):.0f} s" if e.get("pending") and e.get("rate_per_s") else "")
                if phase in ("current", "idle") and not e.get("pending") and not e.get("queued"):
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.25)
    if e.get("state") == "error":
        err.print(f"[yellow]embeddings unavailable[/] ({e.get('error')}); packs use BM25 only")
    elif e.get("state") not in ("disabled", None):
        click.echo(f"embedding: {_embedding_line(e)}"
                   + ("; continuing in the background (see `cogd status`)" if e.get("pending") else ""))


class SafeGroup(click.Group):
    """The command group; a path under ``.cogd/`` that the safe-path layer refuses becomes a one-line error
    naming the path, the problem and the fix (never a traceback)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except safepath.UnsafePath as exc:
            raise click.ClickException(exc.refusal()) from exc


@click.group(cls=SafeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Repository root (default: the one around the current directory).")
@click.version_option(package_name="cogd")
@click.pass_context
def main(ctx: click.Context, root: str | None) -> None:
    """cogd: a local memory and context daemon for AI coding agents."""
    os.umask(0o077)  # what commands create under .cogd/ (databases, logs, memory files) is private
    ctx.obj = {"root": root}


def _layout_from(ctx: click.Context, create: bool = True) -> Layout:
    return _layout(ctx.obj.get("root"), create)


_LOCAL_HELP = "Write the hooks to .claude/settings.local.json (private, not committed) instead of settings.json."


@main.command()
@click.option("--no-hooks", is_flag=True, help="Do not touch .claude/.")
@click.option("--local", "local_hooks", is_flag=True, help=_LOCAL_HELP)
@click.option("--wait-embed", default=60, show_default=True,
              help="Seconds to show embedding progress before leaving it to the background.")
@click.pass_context
def up(ctx: click.Context, no_hooks: bool, local_hooks: bool, wait_embed: int) -> None:
    """Set up this repository: start the daemon, index, wire Claude Code hooks, show a pack."""
    layout = _layout_from(ctx)
    console.print(f"[bold]cogd[/] for [cyan]{layout.root}[/]")
    started = control.spawn(layout, force=True)
    if not control.wait_ready(layout, timeout=60):
        raise click.ClickException(_not_up(layout))
    console.print(f"daemon {'started' if started else 'already running'} (pid {control.read_pid(layout)['pid']})")
    be = RemoteBackend(layout)
    t0 = time.monotonic()
    status = _index_with_progress(be)
    index = status["index"]
    click.echo(
        f"index: {index['files']} files, {index['entities']} code entities"
        + (f" (+{index['file_entities']} file entities)" if index.get("file_entities") else "")
        + f", {index['edges']} edges "
        f"at commit {(index['commit'] or 'none')[:12]} ({time.monotonic() - t0:.1f} s)"
    )
    _embed_with_progress(be, wait_embed)
    if not no_hooks:
        _install_hooks(layout, local_hooks)
    pack = _call(be, "context.session_start", {"session_id": "cogd-up", "source": "startup", "record": False})
    console.rule("sample context pack (what SessionStart injects)")
    click.echo(pack["text"] or "(empty: no entities indexed yet)")
    console.rule()
    console.print("Try [bold]cogd context \"your question\"[/] to see a prompt pack.")


def _install_hooks(layout: Layout, local: bool = False) -> None:
    from cogd.install import SettingsError, install_claude_hooks, install_mcp_server

    def report(install, written: str, already: str, **kwargs) -> None:
        try:
            result = install(layout.root, **kwargs)
        except SettingsError as exc:
            raise click.ClickException(str(exc)) from exc
        backup = f" (backup: {result['backup']})" if result["backup"] else ""
        console.print(f"{written} {result['path']}{backup}" if result["changed"] else f"{already} {result['path']}")

    report(install_claude_hooks, "hooks written to", "hooks already in", local=local)
    if local:
        # .mcp.json is project-scoped and usually committed: an absolute path of this machine
        # does not belong there when the hooks went to the private settings file.
        console.print("MCP server not registered in .mcp.json (--local); to add it for yourself:")
        console.print(f"  claude mcp add cogd -- {' '.join(_mcp_argv())}", markup=False, soft_wrap=True)
        return
    report(install_mcp_server, "MCP server `cogd mcp` registered in", "MCP server already in")


def _mcp_argv() -> list[str]:
    from cogd.install import mcp_command

    command, args = mcp_command()
    return [command, *args]


@main.command("install-hooks")
@click.option("--local", "local_hooks", is_flag=True, help=_LOCAL_HELP)
@click.pass_context
def install_hooks(ctx: click.Context, local_hooks: bool) -> None:
    """Merge cogd's hooks into .claude/settings.json (backup first; idempotent)."""
    _install_hooks(_layout_from(ctx), local_hooks)


@main.command()
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the daemon in the background and wait until it answers."""
    layout = _layout_from(ctx)
    try:
        started = control.spawn(layout, force=True)  # a person asked: no back-off
    except OSError as exc:
        raise click.ClickException(f"cannot start the daemon: {exc}") from exc
    if not control.wait_ready(layout, timeout=60):
        raise click.ClickException(_not_up(layout))
    pid = (control.read_pid(layout) or {}).get("pid")
    console.print(f"daemon {'started' if started else 'already running'} (pid {pid})")


@main.command()
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Stop the daemon (SIGTERM; it finishes the current write first)."""
    layout = _layout_from(ctx)
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


@main.command()
@click.pass_context
def daemon(ctx: click.Context) -> None:
    """Run the daemon in the foreground (logs to stderr too), for debugging."""
    from cogd.daemon.server import run

    sys.exit(run(_layout_from(ctx).root, None, foreground=True))


def _embedding_line(e: dict) -> str:
    """The embedding row of ``cogd status``: the phase in words (README "Status words").

    A count or percentage is shown only once the entities have been counted,
    so nothing reads as finished before it is.
    """
    phase = e.get("phase") or e.get("state")
    model = f" ({e['model']})" if e.get("model") else ""
    if phase in (None, "disabled"):
        return "disabled"
    if phase == "error":
        return f"error: {e.get('error')}"
    if phase == "loading":
        return "loading the model"
    if phase == "counting":
        line = f"counting the entities to embed{model}"
    elif phase == "embedding":
        done, total = e.get("embedded_entities", 0), e.get("entities", 0)
        line = f"embedding {done:,} of {total:,} entities ({done / total * 100:.1f}%){model}" if total else \
            f"embedding{model}"
        if e.get("pending") and e.get("rate_per_s"):
            line += f", {e['pending']:,} to go at {e.get('rate_per_s', 0)}/s, ETA {e.get('eta_s', 0):.0f} s"
    elif phase == "current":
        total = e.get("entities", 0)
        line = f"current: all {total:,} entities embedded{model}" if total else f"current: no entities to embed{model}"
    else:
        line = f"{phase}{model}"
    if e.get("error"):
        line += f"; the last pass failed: {e['error']}"
    return line


def _skipped_rows(index: dict) -> list[tuple[str, str]]:
    """``skipped``: files indexed by path only, per reason (``language_disabled 2, binary 1``)."""
    skipped = index.get("skipped") or {}
    return [("skipped", ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items())))] if skipped else []


def _language_rows(languages: dict) -> list[tuple[str, str]]:
    """One ``disabled`` row per language that is off: ``python: tags query does not compile: …``."""
    return [("disabled", escape(f"{name}: {problem}"))
            for name, problem in sorted((languages.get("disabled") or {}).items())]


def _resolved_rows(resolved: dict | None) -> list[tuple[str, str]]:
    """``resolved``: the last error that cleared, and how long ago."""
    if not resolved:
        return []
    ago = max(time.time() - float(resolved.get("resolved_at") or 0), 0)
    return [("resolved", escape(f"{resolved.get('error')} (cleared {_format_age(ago)} ago)"))]


def _watch_line(w: dict) -> str:
    mode = w.get("mode") or "off"
    line = f"{mode}, {w.get('watched_dirs', 0)} directories" if mode == "inotify" else mode
    if w.get("reason"):
        line += f" ({w['reason']})"
    return line


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether the daemon runs, and the state of the index."""
    layout = _layout_from(ctx, create=False)
    result: dict = {"running": False, "root": str(layout.root)}
    if control.is_running(layout):
        try:
            result = {"running": True, **call(layout.socket_path, "status", {}, timeout=5)}
            result.setdefault("runtime", (control.read_pid(layout) or {}).get("runtime", ""))
        except (DaemonUnavailable, RemoteError) as exc:
            result = {"running": True, "answering": False, "error": str(exc), "root": str(layout.root),
                      **(control.read_pid(layout) or {})}
    if as_json and result.get("running"):
        click.echo(json.dumps(result, indent=2))
        return
    if not result.get("running"):
        result.update(_offline_recovery(layout))
        if as_json:
            click.echo(json.dumps(result, indent=2))
            return
        console.print(f"no daemon runs for {layout.root} (start one with [bold]cogd start[/])")
        if locate.short_socket(str(layout.root)) is None:  # a deep root: its socket needs a runtime directory
            console.print(f"runtime dir: {locate.runtime_status()}", markup=False)
        _print_recovery(result)
        return
    if "index" not in result:
        console.print(f"daemon pid {result.get('pid')} holds the lock but does not answer: {result.get('error')}")
        return
    index = result["index"]
    table = Table(show_header=False, box=None)
    for key, value in (
        ("root", result["root"]), ("pid", result["pid"]), ("uptime", f"{result['uptime_s']:.0f} s"),
        ("socket", result["socket"]),
        *((("runtime dir", result["runtime"]),) if result.get("runtime") else ()),
        ("index", f"{index['files']} files, {index['entities']} code entities, {index['edges']} edges"),
        *_skipped_rows(index), *_language_rows(result.get("languages") or {}),
        ("commit", index["commit"] or "-"), ("worker", f"{index['state']} (queue {index['queue_depth']})"),
        ("embedding", _embedding_line(result.get("embedding") or {})),
        ("watching", _watch_line(result.get("watch") or {})),
        ("last error", result.get("last_error") or "-"),
        *_resolved_rows(result.get("last_resolved")),
    ):
        table.add_row(f"[bold]{key}[/]", str(value))
    console.print(table)
    _print_recovery(result)
    print_memory_status(result)  # counts, and refused hand edits / broken files with their fix


def _offline_recovery(layout: Layout) -> dict:
    """What ``cogd status`` says about damaged stores without a daemon: the failed start, moves, the ledger."""
    from cogd import recovery

    out: dict = {"start_failure": control.start_failure(layout)}
    if layout.cogd_dir.is_dir():
        loss = recovery.ledger_loss(layout.cogd_dir)
        mark = recovery.read_mark(layout.cogd_dir) or {}
        out["recovery"] = {"projections": recovery.latest_recoveries(layout.cogd_dir), "ledger": {
            "state": "lost" if loss else None, "statement": loss.get("statement") if loss else None, "loss": loss,
            "fix": recovery.loss_fix(loss) if loss else "", "started_fresh_at": mark.get("started_fresh_at"),
            "started_fresh_records": mark.get("started_fresh_records")}}
        if not loss:  # the check doctor runs (read-only): a loss the next start will handle shows now
            ledger = out["recovery"]["ledger"]
            try:
                report = recovery.classify_ledger(layout.cogd_dir)
            except recovery.StoreRefused as exc:
                ledger.update(state="refused", statement=f"state.db cannot be opened: {exc.reason}", fix=exc.fix)
            else:
                ledger["state"] = report.state
                if report.state == "lost":
                    pending = {"statement": recovery.pending_loss(report), "pending": True}
                    ledger.update(statement=pending["statement"], loss=pending, fix=recovery.PENDING_LOSS_FIX)
    return out


def _print_recovery(result: dict) -> None:
    """The failed start (with its back-off), moved-aside projections and the ledger's state, each once."""
    from rich.markup import escape

    failed = result.get("start_failure")
    if failed:
        wait = control.backoff_remaining(failed)
        console.print(f"[bold red]start failed[/] {_format_age(time.time() - failed.get('at', 0))} ago "
                      f"({failed.get('failures', 1)} in a row): {escape(str(failed.get('reason')))}", soft_wrap=True)
        console.print(f"  fix: {failed.get('fix') or 'see `cogd logs`'}; "
                      + (f"hooks start no daemon for {wait:.0f} s more; `cogd start` tries now" if wait > 0
                         else "the next hook tries again"), markup=False, style="dim", soft_wrap=True)
    rec = result.get("recovery") or {}
    for event in rec.get("projections") or []:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.get("at") or 0))
        console.print(f"[yellow]recovered[/] {escape(str(event.get('store')))} at {when}: damaged "
                      f"({escape(str(event.get('reason')))}), moved aside to {escape(str(event.get('moved_to')))}; "
                      f"{escape(str(event.get('rebuild')))}", soft_wrap=True)
    ledger = rec.get("ledger") or {}
    if ledger.get("loss"):
        console.print(f"[bold red]ledger lost[/] {escape(str(ledger.get('statement')))}", soft_wrap=True)
        console.print(f"  fix: {ledger.get('fix')}", markup=False, style="dim", soft_wrap=True)
    elif ledger.get("state") == "refused":
        console.print(f"[bold red]ledger[/]     {escape(str(ledger.get('statement')))}", soft_wrap=True)
        console.print(f"  fix: {ledger.get('fix')}", markup=False, style="dim", soft_wrap=True)
    elif ledger.get("started_fresh_at"):
        # Only what the marker knows: when this ledger began and with how many records from git
        # (a later loss, once accepted, leaves no trace here).
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(ledger["started_fresh_at"]))
        console.print(f"[bold]ledger[/]     started on {when} with {ledger.get('started_fresh_records')} "
                      "memory records from git")


@main.command()
@click.option("--full", is_flag=True, help="Re-parse every file, not just changed ones.")
@click.pass_context
def index(ctx: click.Context, full: bool) -> None:
    """Bring the code index up to date; returns when it is current."""
    layout = _layout_from(ctx)
    with backend(layout, fresh=False) as be:
        status = _index_with_progress(be, full=full)
    index_state = status["index"]
    result = index_state.get("last_refresh") or {}
    click.echo(
        f"index current: {index_state['files']} files, {index_state['entities']} code entities "
        f"(parsed {result.get('parsed', 0)}, unchanged {result.get('unchanged', 0)}, removed {result.get('removed', 0)}) "
        f"at {(index_state['commit'] or 'no commit')[:12]}"
    )


def _explain(signals: dict) -> str:
    """One line per item: each ranking signal and its value."""
    order = ("bm25_rank", "bm25", "vector_rank", "cosine", "association_rank", "rrf", "expansion", "expanded_from", "prior",
             "utility", "utility_x", "working_set_x", "recency_x", "mmr", "redundancy")
    parts = [f"{key}={signals[key]}" for key in order if key in signals]
    parts += [f"{k}={v}" for k, v in signals.items() if k not in order]
    return "  ".join(parts)


_MODE = click.option("--mode", type=click.Choice(["bm25", "vector", "hybrid"]), default=None,
                     help="Candidate sources (default: retrieve.mode in config, hybrid).")


@main.command()
@click.argument("query")
@click.option("--kind", type=click.Choice(["file", "module", "class", "function", "method", "constant"]), default=None,
              help="Only entities of this kind.")
@click.option("--limit", default=20, show_default=True)
@_MODE
@click.option("--explain", is_flag=True, help="Show each ranking signal per hit.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def search(ctx: click.Context, query: str, kind: str | None, limit: int, mode: str | None, explain: bool,
           as_json: bool) -> None:
    """Search the index: BM25, vectors, or both fused (hybrid)."""
    with backend(_layout_from(ctx)) as be:
        result = _call(be, "search", {"query": query, "kind": kind, "limit": limit, "mode": mode})
    hits = result["hits"]
    if as_json:
        click.echo(json.dumps(hits, indent=2))
        return
    if result["mode"] != "bm25" and not result["vectors"]:
        err.print("(no vectors yet: lexical results only — see `cogd status`)")
    if not hits:
        err.print(f"nothing in the index matches {query!r}", markup=False)
        return
    table = Table("score", "kind", "id", "lines")
    table.columns[2].overflow = "fold"  # ids stay whole: they are meant to be copied
    for hit in hits:
        table.add_row(f"{hit['score']:.4f}", hit["kind"], hit["id"], f"{hit['start_line']}-{hit['end_line']}")
        if explain:
            table.add_row("", "", f"[dim]{_explain(hit['signals'])}[/]", "")
    console.print(table)


@main.command()
@click.argument("entity_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, entity_id: str, as_json: bool) -> None:
    """Show one entity: where it is, its signature, doc, edges both ways, usage.

    A memory's id (a ULID from a pack's rules and memories) is shown as
    ``cogd memory show ID`` shows it.
    """
    if _ULID.match(entity_id):
        ctx.invoke(memory_group.get_command(ctx, "show"), entity_id=entity_id, as_json=as_json)
        return
    with backend(_layout_from(ctx)) as be:
        result = _call(be, "entity.get", {"id": entity_id})
    if as_json:
        flat = {**result["entity"], **result["usage"], "edges": result["edges"]}
        click.echo(json.dumps(flat, indent=2))
        return
    e = result["entity"]
    console.print(f"[bold]{e['id']}[/]  {e['kind']}{' ' + e['subkind'] if e['subkind'] else ''}")
    console.print(f"{e['path']}:{e['start_line']}-{e['end_line']}  ({e['language']}, hash {e['hash']})")
    if e["signature"]:
        console.print(e["signature"], markup=False)
    if e["doc"]:
        console.print(e["doc"], markup=False, style="dim")
    for direction, label in (("out", "→"), ("in", "←")):
        for edge in result["edges"][direction]:
            how = f" ({edge['resolution']})" if edge.get("resolution") else ""
            console.print(f"  {label} {edge['kind']:9} {edge['id']}{how}", markup=False)
    u = result["usage"]
    console.print(f"delivered {u['retrieval_count']}×: used {u['used_count']}, ignored {u['ignored_count']}, "
                  f"pending {u['pending']}; utility {u['utility']:.3f} (Beta posterior mean; "
                  f"the repository's base rate is {u['base_rate']:.3f})")


def _format_age(seconds: float) -> str:
    """``42s``, ``5m 03s``, ``2h 07m``, ``3d 04h``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Index contents by language and kind, edges by kind, and ledger totals."""
    with backend(_layout_from(ctx)) as be:
        result = _call(be, "stats")
        # stats is deterministic (no clock fields); the index's age comes from status.
        indexed_at = None if as_json else _call(be, "status")["index"].get("indexed_at")
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    table = Table("language", "kind", "entities", title="entities")
    for row in result["entities"]:
        table.add_row(row["language"], row["kind"], str(row["n"]))
    console.print(table)
    files = Table("language", "status", "files", title="files")
    for row in result["files"]:
        files.add_row(row["language"], row["status"], str(row["n"]))
    console.print(files)
    by_reason: dict[str, int] = {}
    for row in result["files"]:
        if row["status"] != "ok":
            by_reason[row["status"]] = by_reason.get(row["status"], 0) + row["n"]
    skipped = Table("reason", "files", title="skipped files by reason")
    for reason, n in sorted(by_reason.items()):
        skipped.add_row(reason, str(n))
    if not by_reason:
        skipped.add_row("(none)", "0")
    console.print(skipped)
    if not indexed_at:
        console.print("index age: never indexed")
    else:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(indexed_at))
        console.print(f"index age: {_format_age(max(time.time() - indexed_at, 0.0))} (last refresh finished {at})")
    edges = Table("kind", "resolution", "edges", title="edges")
    for row in result["edges"]:
        edges.add_row(row["kind"], row["resolution"] or "-", str(row["n"]))
    console.print(edges)
    ledger = Table("ledger", "count", title="usage ledger")
    for key, value in result["ledger"].items():
        ledger.add_row(key, str(value))
    console.print(ledger)


@main.command()
@click.argument("prompt")
@_MODE
@click.option("--explain", is_flag=True, help="After the pack, each item's ranking signals.")
@click.option("--json", "as_json", is_flag=True, help="The pack with its items and scores.")
@click.pass_context
def context(ctx: click.Context, prompt: str, mode: str | None, explain: bool, as_json: bool) -> None:
    """Print the context pack for PROMPT exactly as the prompt hook would inject it."""
    with backend(_layout_from(ctx)) as be:
        pack = _call(be, "context.prompt", {"prompt": prompt, "session_id": "cli", "record": False, "mode": mode})
    if as_json:
        click.echo(json.dumps(pack, indent=2))
        return
    if pack["text"]:
        click.echo(pack["text"], nl=False)
    else:
        err.print("no pack: nothing in the index matches (a pack needs at least one searchable word)")
    if explain:
        err.rule("ranking signals")
        for item in pack["items"]:
            err.print(f"{item['rank']:>2}. {item['entity_id']}", markup=False)
            if item.get("reason"):
                err.print(f"    why: {item['reason']}", markup=False)
            err.print(f"    score={item['score']}  {_explain(item['signals'])}", markup=False, style="dim")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def models(ctx: click.Context, as_json: bool) -> None:
    """List the embedding models cogd can use and which one is active."""
    from cogd.embed.model import list_models

    layout = _layout_from(ctx)
    try:
        config = load_config(layout.config_file)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    found = list_models(config.embed)
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    table = Table("active", "name", "id", "dim", "path")
    for column in table.columns[1:]:
        column.overflow = "fold"
    for m in found:
        table.add_row("*" if m.get("active") else "", str(m.get("name", "")), str(m.get("id", "")),
                      str(m.get("dim", "")), str(m.get("path", "")))
    console.print(table)
    if not config.embed.enabled:
        console.print("embeddings are disabled ([embed] enabled = false): retrieval is lexical")


@main.command()
@click.option("-n", "lines", default=40, show_default=True, type=click.IntRange(min=1),
              help="How many lines from the end.")
@click.option("--hook", is_flag=True, help="The hook client's log instead of the daemon's.")
@click.pass_context
def logs(ctx: click.Context, lines: int, hook: bool) -> None:
    """Show the end of the daemon's (or the hook client's) log."""
    layout = _layout_from(ctx, create=False)
    path = layout.hook_log if hook else layout.daemon_log
    safepath.check_chain(path.parent, any_mode=True)
    raw = safepath.read_bytes(path, 64 << 20)  # never through a link
    if raw is None:
        console.print(f"no log yet at {path}")
        return
    tail = raw.decode("utf-8", errors="replace").splitlines()[-lines:]
    click.echo("\n".join(tail))


_STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--no-model-load", is_flag=True, help="Verify the model's files but do not load it (saves ~1 s).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, no_model_load: bool) -> None:
    """Check this repository's cogd: daemon, socket, lock, model, inotify, index drift, databases, disk.

    Exits 1 when any check fails (warnings do not). Works with or without a running daemon.
    """
    from rich.markup import escape

    from cogd.doctor import exit_code, make_context, run_checks

    layout = _layout_from(ctx, create=False)
    results = run_checks(make_context(layout, load_model=not no_model_load))
    code = exit_code(results)
    if as_json:
        click.echo(json.dumps({"root": str(layout.root), "ok": code == 0,
                               "checks": [c.as_dict() for c in results]}, indent=2, default=str))
    else:
        table = Table("check", "status", "finding", "fix", title=f"cogd doctor: {layout.root}")
        table.columns[2].overflow = table.columns[3].overflow = "fold"
        for c in results:
            style = _STATUS_STYLE.get(c.status, "")
            table.add_row(escape(c.name), f"[{style}]{c.status}[/]", escape(c.finding), escape(c.fix))
        console.print(table)
        fails = sum(c.status == "fail" for c in results)
        warns = sum(c.status == "warn" for c in results)
        console.print(f"{fails} failed, {warns} warnings, {len(results) - fails - warns} ok")
    sys.exit(code)


@main.command()
@click.option("--all", "wipe_all", is_flag=True, help="Also wipe the local ledger (.cogd/state.db): deliveries, tool uses, sessions.")
@click.option("--yes", is_flag=True, help="Do not ask before wiping the ledger.")
@click.option("--wait-embed", default=600, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to spend rebuilding vectors (from the embedding cache) before leaving the rest to the daemon.")
@click.pass_context
def reset(ctx: click.Context, wipe_all: bool, yes: bool, wait_embed: float) -> None:
    """Drop and rebuild the projection (.cogd/index/) from the work tree; the embedding cache is kept.

    Stops the daemon if it runs and starts it again afterwards.
    """
    from cogd.reset import ResetError, reset as do_reset

    layout = _layout_from(ctx)
    try:
        config = load_config(layout.config_file)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if wipe_all and not yes:
        click.confirm(f"Wipe the local ledger {layout.state_db} (deliveries, tool uses, sessions)? "
                      "It cannot be rebuilt", abort=True, err=True)
    try:
        result = do_reset(layout, config, wipe_ledger=wipe_all, wait_embed_s=wait_embed,
                          progress=lambda line: err.print(f"[dim]{line}[/]"))
    except ResetError as exc:
        raise click.ClickException(str(exc)) from exc
    index = result["index"]
    click.echo(f"projection rebuilt: {index['files']} files, {index['entities']} code entities, "
               f"{index['edges']} edges ({result['duration_s']:.1f} s)")
    v = result["vectors"]
    if v is not None:
        click.echo(f"vectors: {v.get('embedded_entities')} of {v.get('entities')}, "
                   f"{v.get('computed')} computed by the model (the rest from the cache)"
                   + (f"; error: {v['error']}" if v.get("error") else ""))
    if result["ledger_wiped"]:
        click.echo("ledger wiped")
    if result["restarted"]:
        click.echo(f"daemon restarted (pid {(control.read_pid(layout) or {}).get('pid')})")


@main.command()
@click.pass_context
def mcp(ctx: click.Context) -> None:
    """Serve the Model Context Protocol on stdin/stdout (for Claude Code and other MCP clients).

    Talks to this repository's daemon, starting it if needed.
    """
    from cogd.mcp_server import run as run_mcp

    run_mcp(_layout_from(ctx).root)


from cogd.cli_memory import (  # noqa: E402
    consolidate, events, export, import_, memory_group, print_memory_status, verify,
)

main.add_command(memory_group)
main.add_command(verify)
main.add_command(events)
main.add_command(export)
main.add_command(import_)
main.add_command(consolidate)


if __name__ == "__main__":
    main()
