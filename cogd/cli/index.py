"""The code index from the command line: ``cogd index``, ``search``, ``show``, ``stats``,
``context`` (the prompt hook's pack) and ``models`` (the embedding models)."""

from __future__ import annotations

import json
import time

import click
from rich.markup import escape
from rich.table import Table

from cogd.ages import format_age
from cogd.cli.base import ULID, backend, console, err, layout_from
from cogd.cli.cells import Name
from cogd.cli.memory import show as show_memory
from cogd.cli.progress import index_with_progress
from cogd.config import load_config
from cogd.fusion import BM25, MODES


@click.command()
@click.option("--full", is_flag=True, help="Re-parse every file, not just changed ones.")
@click.pass_context
def index(ctx: click.Context, full: bool) -> None:
    """Bring the code index up to date; returns when it is current."""
    layout = layout_from(ctx)
    with backend(layout, fresh=False) as be:
        status = index_with_progress(be, full=full)
    index_state = status["index"]
    result = index_state.get("last_refresh") or {}
    click.echo(
        f"index current: {index_state['files']} files, {index_state['entities']} code entities "
        f"(parsed {result.get('parsed', 0)}, unchanged {result.get('unchanged', 0)}, removed {result.get('removed', 0)}) "
        f"at {(index_state['commit'] or 'no commit')[:12]}"
    )


def _explain(signals: dict) -> str:
    """One line per item: each ranking signal and its value."""
    order = ("bm25_rank", "bm25", "vector_rank", "cosine", "association_rank", "history_rank", "history_evidence", "history_commits", "rrf", "expansion", "expanded_from", "prior",
             "utility", "utility_x", "working_set_x", "recency_x", "mmr", "redundancy")
    parts = [f"{key}={signals[key]}" for key in order if key in signals]
    parts += [f"{k}={v}" for k, v in signals.items() if k not in order]
    return "  ".join(parts)


_MODE = click.option("--mode", type=click.Choice(MODES), default=None,
                     help="Candidate sources (default: retrieve.mode in config, hybrid).")


@click.command()
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
    layout = layout_from(ctx)
    with backend(layout) as be:
        result = be.call("search", {"query": query, "kind": kind, "limit": limit, "mode": mode})
    hits = result["hits"]
    if as_json:
        click.echo(json.dumps(hits, indent=2))
        return
    # "yet" is only true when vectors are coming: with [embed] enabled = false, lexical is the design
    if result["mode"] != BM25 and not result["vectors"] and load_config(layout.config_file).embed.enabled:
        err.print("(no vectors yet: lexical results only — see `cogd status`)")
    if not hits:
        err.print(f"nothing in the index matches {query!r}", markup=False)
        return
    table = Table("score", "kind", "id", "lines")
    table.columns[2].overflow = "fold"  # the --explain rows: wrapped at spaces, a long word folded
    for hit in hits:  # an id is broken only between its parts (cogd.cli.cells): it is meant to be copied
        table.add_row(f"{hit['score']:.4f}", hit["kind"], Name(hit["id"]), f"{hit['start_line']}-{hit['end_line']}")
        if explain:
            table.add_row("", "", f"[dim]{escape(_explain(hit['signals']))}[/]", "")
    console.print(table)


@click.command()
@click.argument("entity_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, entity_id: str, as_json: bool) -> None:
    """Show one entity: where it is, its signature, doc, edges both ways, usage.

    A memory's id (a ULID from a pack's rules and memories) is shown as
    ``cogd memory show ID`` shows it.
    """
    if ULID.match(entity_id):
        ctx.invoke(show_memory, entity_id=entity_id, as_json=as_json)
        return
    with backend(layout_from(ctx)) as be:
        result = be.call("entity.get", {"id": entity_id})
    if as_json:
        flat = {**result["entity"], **result["usage"], "edges": result["edges"], "history": result.get("history")}
        click.echo(json.dumps(flat, indent=2))
        return
    e = result["entity"]
    console.print(f"[bold]{escape(e['id'])}[/]  {e['kind']}{' ' + e['subkind'] if e['subkind'] else ''}")
    console.print(f"{e['path']}:{e['start_line']}-{e['end_line']}  ({e['language']}, hash {e['hash']})", markup=False)
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
    for client, row in (u.get("by_client") or {}).items():
        rate = f"{row['hit_rate']:.1%}" if row["hits"] + row["misses"] else "-"
        console.print(f"  {client or '(unknown)'}: {row['deliveries']} deliveries, {row['hits']} hits, "
                      f"{row['misses']} misses, {row['pending']} pending (hit rate {rate})", markup=False)
    _show_history(result.get("history"))


def _show_history(history: dict | None) -> None:
    """The commits that changed an entity and its strongest co-change partners (cogd.history)."""
    if not history:
        return
    if not history.get("usable"):
        console.print("history: not synchronised with HEAD yet (see `cogd history`)")
        return
    commits = history["commits"]
    n = len(commits)
    console.print(f"changed by {n}{'+' if n >= 10 else ''} mined commit{'' if n == 1 else 's'}"
                  + (":" if commits else ""))
    for c in commits:
        when = time.strftime("%Y-%m-%d", time.gmtime(c["time"]))
        lines = f"{c['lines']} line{'' if c['lines'] == 1 else 's'}"
        console.print(f"  {c['hash'][:10]} {when} {c['subject']} ({lines})", markup=False)
    for partner in history["co_changed"]:
        support = f"{partner['support']} commit{'' if partner['support'] == 1 else 's'}"
        console.print(f"  co-changed with {partner['id']}: {support}, confidence "
                      f"{partner['confidence']:.2f}", markup=False)


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Index contents by language and kind, edges by kind, and ledger totals."""
    with backend(layout_from(ctx)) as be:
        result = be.call("stats")
        # stats is deterministic (no clock fields); the index's age comes from status.
        indexed_at = None if as_json else be.call("status")["index"].get("indexed_at")
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
        console.print(f"index age: {format_age(max(time.time() - indexed_at, 0.0))} (last refresh finished {at})")
    edges = Table("kind", "resolution", "edges", title="edges")
    for row in result["edges"]:
        edges.add_row(row["kind"], row["resolution"] or "-", str(row["n"]))
    console.print(edges)
    ledger = Table("ledger", "count", title="usage ledger")
    for key, value in result["ledger"].items():
        ledger.add_row(key, str(value))
    console.print(ledger)
    _print_by_client(result.get("by_client", {}))


def _print_by_client(by_client: dict, title: str = "hit rate by client") -> None:
    """One row per client: deliveries, hits, misses, pending, hit rate (and tool uses when known)."""
    uses = any("tool_uses" in row for row in by_client.values())
    table = Table("client", "deliveries", "hits", "misses", "pending", "hit rate", *(["tool uses"] if uses else []),
                  title=title)
    for client, row in by_client.items():
        table.add_row(escape(client or "(unknown)"), str(row["deliveries"]), str(row["hits"]), str(row["misses"]),
                      str(row["pending"]), f"{row['hit_rate']:.1%}", *([str(row.get("tool_uses", 0))] if uses else []))
    if not by_client:
        table.add_row("(none yet)", "0", "0", "0", "0", "-", *(["0"] if uses else []))
    console.print(table)


@click.command()
@click.argument("prompt")
@_MODE
@click.option("--explain", is_flag=True,
              help="After the pack, each item's ranking signals, on stderr (stdout stays the exact pack).")
@click.option("--json", "as_json", is_flag=True, help="The pack with its items and scores.")
@click.pass_context
def context(ctx: click.Context, prompt: str, mode: str | None, explain: bool, as_json: bool) -> None:
    """Print the context pack for PROMPT exactly as the prompt hook would inject it."""
    with backend(layout_from(ctx)) as be:
        pack = be.call("context.prompt", {"prompt": prompt, "session_id": "cli", "record": False, "mode": mode})
    if as_json:
        click.echo(json.dumps(pack, indent=2))
        return
    if pack["text"]:
        click.echo(pack["text"], nl=False)
    else:
        err.print("no pack: nothing in the index matches (a pack needs at least one searchable word)")
    if explain:
        err.rule("ranking signals")
        for item in pack["items"]:  # soft_wrap: one line per fact, an id never cut by rich's wrapping
            err.print(f"{item['rank']:>2}. {item['entity_id']}", markup=False, soft_wrap=True)
            if item.get("reason"):
                err.print(f"    why: {item['reason']}", markup=False, soft_wrap=True)
            err.print(f"    score={item['score']}  {_explain(item['signals'])}", markup=False, style="dim", soft_wrap=True)


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def models(ctx: click.Context, as_json: bool) -> None:
    """List the embedding models cogd can use and which one is active."""
    from cogd.embed.model import list_models

    layout = layout_from(ctx)
    config = load_config(layout.config_file)
    found = list_models(config.embed)
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    table = Table("active", "name", "id", "dim", "path")
    for m in found:
        mark = "*" if m.get("active") else ("tier" if m.get("first_tier") else "")
        table.add_row(mark, Name(str(m.get("name", ""))), Name(str(m.get("id", ""))),
                      str(m.get("dim", "")), Name(str(m.get("path", ""))))
    console.print(table)
    if any(m.get("first_tier") for m in found):
        console.print(f"tier: static vectors from this table answer searches while a pass of "
                      f"{config.embed.first_tier_min:,} or more entities runs ([embed] first_tier_min)", markup=False)
    if not config.embed.enabled:
        console.print("embeddings are disabled ([embed] enabled = false): retrieval is lexical", markup=False)
