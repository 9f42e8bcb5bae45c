"""``cogd memory …``, ``cogd events``, ``cogd verify``, ``cogd export``, ``cogd import``.

Each command calls the daemon's ``memory.*`` method (or the same method
in-process when no daemon runs), as a person: ``actor`` and ``source`` are
``human``. Refusals print the reason and exit 1; nothing typed is lost (an
``edit`` that is refused leaves the edited text in a file and says where).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from cogd.cli.base import console, date, edge_message, err, rough_age, run
from cogd.memory.lattice import STATUSES
from cogd.memory.vocabulary import TYPES


@click.group("memory")
def memory_group() -> None:
    """Memories: observations, rules and knowledge kept as files in .cogd/memory/ (commit them)."""


@memory_group.command("add")
@click.argument("type_", metavar="TYPE", type=click.Choice(TYPES))
@click.argument("text")
@click.option("--title", default=None, help="A one-line title (default: the text's first line).")
@click.option("--anchor", "anchors", multiple=True, metavar="ENTITY_ID",
              help="A code entity the memory is about (repeatable); it goes stale when that code changes.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--reason", "creation_reason", default="", help="Why this memory is written (provenance).")
@click.option("--allow-duplicate", is_flag=True,
              help="Skip the fuzzy-title and embedding duplicate tests (not the exact one), e.g. for a correction.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def add(ctx, type_: str, text: str, title: str | None, anchors: tuple, tags: tuple, creation_reason: str,
        allow_duplicate: bool, as_json: bool) -> None:
    """Record a memory. Written by you, it starts active; TEXT '-' reads it from stdin."""
    if text == "-":
        text = sys.stdin.read()
    result = run(ctx, "memory.record", {
        "type": type_, "text": text, "title": title, "anchors": list(anchors), "tags": list(tags),
        "source": "human", "actor": "human", "creation_reason": creation_reason, "allow_duplicate": allow_duplicate})
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    rec = result["record"]
    console.print(f"recorded {rec['type']} [bold]{rec['id']}[/] ({rec['status']}) → {escape(result['path'])}")
    for warning in result.get("warnings", []):
        err.print(f"[yellow]warning:[/] {escape(warning)}")


@memory_group.command("list")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--type", "type_", type=click.Choice(TYPES), default=None)
@click.option("--limit", type=click.IntRange(1, 100_000), default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_(ctx, status: str | None, type_: str | None, limit: int | None, as_json: bool) -> None:
    """List memories, newest first."""
    result = run(ctx, "memory.list", {"status": status, "type": type_, "limit": limit})
    memories = result["memories"]
    if as_json:
        click.echo(json.dumps(memories, indent=2))
        return
    if not memories:  # the message alone: an empty table frame says nothing more
        console.print("no memories" + (" with these filters" if status or type_ else " yet"))
        return
    table = Table("id", "type", "status", "updated", "title")
    table.columns[0].no_wrap = True  # a ULID (26 characters) stays on one line: it is meant to be copied
    table.columns[0].min_width = 26
    for m in memories:
        status_text = m["status"] + (f" ({rough_age(m['updated_at'])})" if m["status"] == "stale" else "")
        table.add_row(m["id"], m["type"], status_text, date(m["updated_at"]), escape(m["title"]))
    console.print(table)


@memory_group.command("show")
@click.argument("entity_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx, entity_id: str, as_json: bool) -> None:
    """Show one memory: its record, its file, any problem with the file, and its events."""
    result = run(ctx, "memory.get", {"id": entity_id})
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    rec = result["record"]
    console.print(f"[bold]{rec['id']}[/]  {rec['type']}  [bold]{rec['status']}[/]  ({rec['source']})")
    console.print(rec["title"], markup=False)
    console.print(f"{result['path']}  created {date(rec['created_at'])}, updated {date(rec['updated_at'])}",
                  style="dim", markup=False)
    if rec["status"] == "rejected":
        verdicts = [e for e in result["events"] if e.get("new_status") == "rejected"]
        reason = (verdicts[-1].get("detail") or {}).get("reason") if verdicts else None
        if reason:
            console.print(f"rejected: {escape(str(reason))}")
    if rec["status"] == "stale":
        console.print(f"[yellow]may be outdated[/]: an anchored entity changed {rough_age(rec['updated_at'])} ago; "
                      f"`cogd memory verify {rec['id']}` re-anchors it")
    for anchor in rec["anchors"]:
        console.print(f"  ⚓ {anchor['entity']} ({anchor.get('hash', '')[:12]})", markup=False)
    for key in ("supersedes", "superseded_by"):
        if rec.get(key):
            console.print(f"  {key.replace('_', ' ')} {rec[key]}", markup=False)
    survivor = result.get("survivor")
    if survivor and survivor["id"] not in (rec["id"], rec.get("superseded_by")):
        console.print(f"  the claim lives on in {survivor['id']} ({survivor['status']}), via "
                      f"{' → '.join(survivor['chain'])}", markup=False)
    if rec["body"]:
        console.print()
        console.print(rec["body"], markup=False)
    if result.get("problem"):
        p = result["problem"]
        console.print(f"\n[red]file problem[/] ({p['kind']}): {escape(str(p['message']))} — fix: {escape(p.get('fix', ''))}")
    _print_events(result["events"], title="events")


@memory_group.command("edit")
@click.argument("entity_id", metavar="ID")
@click.pass_context
def edit(ctx, entity_id: str) -> None:
    """Edit a memory's file in $EDITOR; the edit goes through the lattice like any hand edit.

    A refused edit (an illegal status move, a secret, a rejected claim, broken
    frontmatter) leaves the file as it was; your edited text is kept in a file
    whose path is printed.
    """
    current = run(ctx, "memory.get", {"id": entity_id})
    edited = click.edit(current["text"], extension=".md", require_save=True)
    if edited is None or edited == current["text"]:
        console.print("no change")
        return
    try:
        result = run(ctx, "memory.edit", {"id": entity_id, "text": edited, "actor": "human"})
    except Exception as exc:  # whatever refused it, the edited text survives
        keep = _keep_edit(entity_id, edited, getattr(exc, "kind", None))
        message = edge_message(exc)
        if message is None:  # not a refusal but a bug: keep its traceback
            err.print(f"the file is unchanged; your edit is kept in {keep}", markup=False)
            raise
        raise click.ClickException(f"{message}\nthe file is unchanged; your edit is kept in {keep}") from exc
    console.print(f"{entity_id}: {result['action']} ({result['record']['status']})")


def _keep_edit(entity_id: str, edited: str, kind: str | None) -> str:
    """Write a refused edit to a private temporary file; returns its path, and says so when the
    secrets in it were masked (``kind`` ``secret_detected``: the copy must not be the one place
    the secret lands in clear)."""
    kept, note = edited, ""
    if kind == "secret_detected":
        from cogd.secrets import mask

        kept, note = mask(edited), " (the secrets in it masked)"
    fd, keep = tempfile.mkstemp(prefix=f"cogd-edit-{entity_id}-", suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(kept)
    return keep + note


@memory_group.command("reject")
@click.argument("entity_id", metavar="ID")
@click.option("--reason", required=True, help="Why the claim is wrong (kept with its tombstone).")
@click.pass_context
def reject(ctx, entity_id: str, reason: str) -> None:
    """Reject a memory: its claim is tombstoned, and recording it again is refused."""
    result = run(ctx, "memory.transition", {"id": entity_id, "status": "rejected", "reason": reason,
                                             "actor": "human"})
    console.print(f"{entity_id}: rejected ({result['record']['tombstone'][:19]}… tombstoned)")


@memory_group.command("accept")
@click.argument("entity_id", metavar="ID")
@click.pass_context
def accept(ctx, entity_id: str) -> None:
    """Make a candidate memory active."""
    run(ctx, "memory.transition", {"id": entity_id, "status": "active", "actor": "human"})
    console.print(f"{entity_id}: active")


@memory_group.command("prune")
@click.argument("entity_id", metavar="ID")
@click.pass_context
def prune(ctx, entity_id: str) -> None:
    """Prune a rejected or superseded memory: its body goes, its tombstone stays."""
    run(ctx, "memory.transition", {"id": entity_id, "status": "pruned", "actor": "human"})
    console.print(f"{entity_id}: pruned")


@memory_group.command("supersede")
@click.argument("old_id")
@click.argument("new_id")
@click.pass_context
def supersede(ctx, old_id: str, new_id: str) -> None:
    """Mark OLD_ID (active) as superseded by NEW_ID."""
    run(ctx, "memory.supersede", {"old_id": old_id, "new_id": new_id, "actor": "human"})
    console.print(f"{old_id}: superseded by {new_id}")


@click.command("verify")
@click.argument("entity_id", metavar="ID")
@click.pass_context
def verify(ctx, entity_id: str) -> None:
    """Re-anchor a memory to the code as it is now; a stale memory becomes active again."""
    result = run(ctx, "memory.verify", {"id": entity_id, "actor": "human"}, fresh=True)
    changed = sum(1 for a in result["anchors"] if a["was"] != a["now"])
    console.print(f"{entity_id}: {result['record']['status']}, {len(result['anchors'])} anchors "
                         f"({changed} re-anchored)")


memory_group.add_command(verify)

PURGE_HELP = """Erase a memory: delete its file, its projection rows and its vector, and replace
the text in its events by a hash (the events themselves stay: that something happened, when,
by whom).

What purge cannot erase: the file in git history (commits, other branches, clones and forks:
rewrite history with git filter-repo and force-push if you must), backups and snapshots of
the repository or of .cogd/, copies of the file elsewhere (editors' swap and undo files,
other machines), and anything already sent to an agent in a context pack.
"""


@memory_group.command("purge", help=PURGE_HELP)
@click.argument("entity_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def purge(ctx, entity_id: str, yes: bool) -> None:
    if not yes and sys.stdin.isatty():
        click.confirm(f"erase {entity_id} (file, projection, vector, event text)?", abort=True)
    result = run(ctx, "memory.purge", {"id": entity_id, "actor": "human"})
    console.print(f"{entity_id}: purged (file {'removed' if result['removed_file'] else 'already gone'}, "
                         f"{result['events_redacted']} events redacted). Not erased: git history, backups, copies.")


def _print_events(events: list[dict], title: str = "") -> None:
    """A table of events; with a ``title`` (one entity's events) the entity column is left out."""
    columns = ["#", "time", "actor"] + ([] if title else ["entity"]) + ["action", "status", "detail"]
    table = Table(*columns, title=title or None)
    if not title:
        table.columns[3].no_wrap = True
        table.columns[3].min_width = 26
    for e in events:
        move = f"{e['old_status'] or '∅'} → {e['new_status'] or '∅'}"
        detail = {k: v for k, v in (e.get("detail") or {}).items() if v not in ("", [], {}, None)}
        text = (json.dumps(detail, ensure_ascii=False)[:80] if detail else "") + (" (redacted)" if e.get("redacted") else "")
        row = [str(e["id"]), date(e["at"]), e["actor"]] + ([] if title else [e["entity_id"]])
        table.add_row(*row, e["action"], move, escape(text))
    console.print(table)


@click.command("events")
@click.option("--entity", default=None, metavar="ID", help="Only this entity's events.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=None, help="Only the newest N.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def events(ctx, entity: str | None, limit: int | None, as_json: bool) -> None:
    """The append-only event log of memory mutations (oldest first)."""
    result = run(ctx, "memory.events", {"entity": entity, "limit": limit})
    if as_json:
        click.echo(json.dumps(result["events"], indent=2))
        return
    _print_events(result["events"])


@click.command("export")
@click.argument("path", required=False, type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.pass_context
def export(ctx, path: str) -> None:
    """Write every memory (but pruned ones) as JSON lines to PATH (default: stdout)."""
    memories = run(ctx, "memory.export")["memories"]
    # To stdout (a terminal, or a pipe into `cogd memory import`), every character outside
    # ASCII is a \u escape: the lines stay exact while nothing raw reaches a terminal.
    lines = "".join(json.dumps(m, ensure_ascii=path == "-") + "\n" for m in memories)
    if path == "-":
        click.echo(lines, nl=False)
    else:
        Path(path).write_text(lines, encoding="utf-8")
        err.print(f"{len(memories)} memories written to {path}")


@click.command("import")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True, exists=False))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def import_(ctx, path: str, as_json: bool) -> None:
    """Import memories from JSON lines (as written by `cogd export`); each lands as a candidate."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from exc
    items, bad = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            bad.append({"line": number, "kind": "bad_request", "message": f"not JSON: {exc}"})
    result = run(ctx, "memory.import", {"memories": items}, fresh=True, timeout=600)
    result["refused"] = bad + result["refused"]
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    console.print(f"{len(result['imported'])} imported as candidates, "
                  f"{sum(1 for r in result['refused'] if r['kind'] != 'warning')} refused")
    for item in result["refused"]:
        where = f"line {item['line']}" if "line" in item else f"item {item.get('index', 0) + 1}"
        console.print(f"  {where}: {item['kind']}: {item['message']}", markup=False)


_STEP_STYLE = {"dedup": "cyan", "promote": "green", "decay": "yellow", "retention": "magenta"}


def _consolidation_detail(action: dict) -> str:
    """One line on why: the survivor and the match, the evidence, the misses, the age."""
    d = action.get("detail") or {}
    step = action["step"]
    if step == "dedup":
        return f"into {d.get('superseded_by')} ({d.get('how')} match, {d.get('score')})"
    if step == "promote":
        ev = d.get("evidence") or {}
        parts = []
        if "hits" in ev.get("because", []):
            parts.append(f"hit in {len(ev.get('hit_sessions') or [])} sessions")
        if "corroboration" in ev.get("because", []):
            parts.append(f"corroborated by {', '.join(c['id'] for c in ev.get('corroborated_by') or [])}")
        if "verified" in ev.get("because", []):
            parts.append("verified by a person")
        return "; ".join(parts)
    if step == "decay":
        dec = d.get("decay") or {}
        return f"{dec.get('misses_since')} deliveries without a hit in {dec.get('idle_days')} days"
    if step == "retention":
        return f"{d.get('age_days')} days old" + ("; tombstone kept" if d.get("tombstone") else "")
    return ""


@click.command("consolidate")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def consolidate(ctx, dry_run: bool, as_json: bool) -> None:
    """Consolidate memories now: merge duplicates, promote candidates on evidence, let dead weight go
    stale, prune old rejected and superseded records. The daemon also does this at every session end
    and once per idle stretch; see docs/memory.md#consolidation."""
    report = run(ctx, "memory.consolidate", {"dry_run": dry_run}, fresh=False, timeout=300)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    title = "consolidation" + (" (dry run: nothing changed)" if dry_run else "")
    table = Table("step", "id", "type", "change", "title", "why", title=title)
    table.columns[1].no_wrap = True
    table.columns[1].min_width = 26
    table.columns[5].overflow = "fold"
    for a in report["actions"]:
        style = _STEP_STYLE.get(a["step"], "")
        table.add_row(f"[{style}]{a['step']}[/]", a["id"], a["type"], f"{a['from']} → {a['to']}", escape(a["title"]),
                      escape(_consolidation_detail(a)))
    if report["actions"]:
        console.print(table)
    counts = report["counts"]
    verb = "would change" if dry_run else "changed"
    console.print(f"{verb}: {counts['dedup']} merged, {counts['promote']} promoted, {counts['decay']} stale, "
                  f"{counts['retention']} pruned ({report['duration_s']:.2f} s)")
    for pair in report.get("kept_apart") or []:
        console.print(f"  kept apart: {pair['ids'][0]} and {pair['ids'][1]} ({pair['how']} {pair['score']}) — "
                      f"{pair['reason']}", markup=False, style="dim")
    for error in report.get("errors") or []:
        err.print(f"[yellow]skipped[/] {error['step']} {escape(error.get('id') or '')}: "
                         f"{escape(error['message'])} ({error['kind']})")
