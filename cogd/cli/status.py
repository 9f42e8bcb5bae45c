"""``cogd status``: whether the daemon runs, the index, the embedding, the memory, and what
was recovered; without a daemon, what the stores on disk say (read-only)."""

from __future__ import annotations

import json
import time

import click
from rich.markup import escape
from rich.table import Table

from cogd.ages import format_age
from cogd.cli.base import console, layout_from, rough_age
from cogd.cli.progress import embedding_line, first_tier_line, front_line
from cogd.memory.gitstate import COMMIT_HINT
from cogd.paths import Layout
from cogd.rpc import control, locate
from cogd.rpc.client import DaemonUnavailable, RemoteError, call


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
    return [("resolved", escape(f"{resolved.get('error')} (cleared {format_age(ago)} ago)"))]


def _front_rows(embedding: dict) -> list[tuple[str, str]]:
    """``front``: the coverage of what the embedder does first (see cogd.daemon.embed_order);
    ``first tier``: the static vectors that answer searches meanwhile (cogd.daemon.first_tier)."""
    line = front_line(embedding)
    tier = first_tier_line(embedding)
    return ([("front", line)] if line else []) + ([("first tier", tier)] if tier else [])


def _watch_line(w: dict) -> str:
    mode = w.get("mode") or "off"
    line = f"{mode}, {w.get('watched_dirs', 0)} directories" if mode == "inotify" else mode
    if w.get("reason"):
        line += f" ({w['reason']})"
    return line


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether the daemon runs, and the state of the index."""
    layout = layout_from(ctx, create=False)
    result: dict = {"running": False, "root": str(layout.root)}
    if control.is_running(layout):
        try:
            result = {"running": True, **call(layout.socket_path, "status", {}, timeout=5)}
            result.setdefault("runtime", (control.read_pid(layout) or {}).get("runtime", ""))
        except (DaemonUnavailable, RemoteError) as exc:
            result = {"running": True, "answering": False, "error": str(exc), "root": str(layout.root),
                      **(control.read_pid(layout) or {})}
    result["snapshot"] = _snapshot(layout)
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
        ("commit", index["commit"] or "-"), ("snapshot", _snapshot_line(result["snapshot"])), ("worker", f"{index['state']} (queue {index['queue_depth']})"),
        ("embedding", embedding_line(result.get("embedding") or {})),
        *_front_rows(result.get("embedding") or {}),
        ("watching", _watch_line(result.get("watch") or {})),
        ("last error", result.get("last_error") or "-"),
        *_resolved_rows(result.get("last_resolved")),
    ):
        table.add_row(f"[bold]{key}[/]", escape(str(value)))
    console.print(table)
    _print_recovery(result)
    print_memory_status(result)  # counts, and refused hand edits / broken files with their fix


def _snapshot(layout: Layout) -> dict | None:
    """The snapshot the index came from (``.cogd/index/snapshot.json``), with ``behind``; None when none."""
    from cogd.snapshot.state import installed

    return installed(layout)


def _snapshot_line(installed: dict | None) -> str:
    from cogd.cli.snapshot import installed_line

    return installed_line(installed)


def _offline_recovery(layout: Layout) -> dict:
    """What ``cogd status`` says about damaged stores without a daemon: the failed start, moves, the ledger."""
    from cogd import recovery
    from cogd.memory.sync import count_record_files

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
                report = recovery.classify_ledger(layout.cogd_dir, count_record_files(layout.cogd_dir / "memory"))
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
    failed = result.get("start_failure")
    if failed:
        wait = control.backoff_remaining(failed)
        console.print(f"[bold red]start failed[/] {format_age(time.time() - failed.get('at', 0))} ago "
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



def print_memory_status(result: dict) -> None:
    """The ``memory`` block of ``cogd status``: counts, and each file problem with its fix."""
    memory = result.get("memory")
    if not memory:
        return
    counts: dict[str, int] = {}
    for by_status in (memory.get("by_type") or {}).values():
        for status, n in by_status.items():
            counts[status] = counts.get(status, 0) + n
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    if memory.get("last_sync_at") is None and not memory.get("total"):  # the first sync has not finished
        console.print("[bold]memory[/]     projection building (the memory files are being read)")
    else:
        console.print(f"[bold]memory[/]     {memory.get('total', 0)} memories ({summary})")
    git = memory.get("uncommitted") or {}
    if git.get("count"):  # memory lives in this checkout only until it is committed (a removed worktree loses it)
        example = f" (e.g. {escape(git['paths'][0])})" if git.get("paths") else ""
        one = git["count"] == 1
        console.print(f"  [yellow]{git['count']} memory file{'' if one else 's'} not committed to git[/]{example}; "
                      f"lost if this worktree is removed; commit {'it' if one else 'them'}: {escape(COMMIT_HINT)}",
                      soft_wrap=True)
    for p in memory.get("problems") or []:
        where = f":{p['line']}:{p['column']}" if p.get("line") else ""
        move = f" (attempted {p['from']} → {p['to']})" if p.get("from") or p.get("to") else ""
        path = escape(f".cogd/memory/{p['path']}{where}")
        console.print(f"  [red]{p['kind']}[/] {path}{escape(move)}: {escape(str(p['message']))}", soft_wrap=True)
        if p.get("fix"):
            console.print(f"    fix: {p['fix']}", markup=False, style="dim")
    run = result.get("consolidation")
    if run and run.get("runs"):
        counts = ", ".join(f"{n} {step}" for step, n in (run.get("last_counts") or {}).items() if n) or "nothing to do"
        console.print(f"  consolidation: {run['runs']} runs; last ({run.get('last_trigger')}, "
                      f"{rough_age(run['last_finished_at'])} ago): {counts}", markup=False)
    if run and run.get("last_error"):
        console.print(f"  [red]consolidation failed[/]: {escape(str(run['last_error']))}")
