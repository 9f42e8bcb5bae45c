"""Long work shown as it goes: an index refresh and the background embedding, as progress bars,
and the embedding's phase in words (the ``embedding`` row of ``cogd status``)."""

from __future__ import annotations

import time

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from cogd.cli.base import err


def index_with_progress(be, quiet: bool = False, full: bool = False) -> dict:
    """Ask ``be`` (a backend) for a refresh of the whole tree and draw a progress bar until it has
    committed; returns the daemon's last ``status``. ``full`` re-parses every file, not only the
    changed ones; ``quiet`` draws nothing."""
    ticket = be.call("index.refresh", {"wait": False, "full": full})["ticket"]
    columns = (SpinnerColumn(), TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[path]}", style="dim"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task("index", total=None, path="")
        while True:
            status = be.call("status")
            index = status["index"]
            p = index["progress"]
            if p["total"]:
                progress.update(task, total=p["total"], completed=p["done"], path=p["path"][-50:])
            if index["completed_ticket"] >= ticket:
                break
            time.sleep(0.1)
    return status


def embed_with_progress(be, wait_s: float) -> None:
    """Show the background embedding's progress for up to ``wait_s`` seconds, then one summary line."""
    deadline = time.monotonic() + wait_s
    columns = (SpinnerColumn(), TextColumn("[bold]embedding"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[note]}", style="dim"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("embed", total=None, note="loading the model")
        while True:
            e = be.call("status").get("embedding") or {}
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
        click.echo(f"embedding: {embedding_line(e)}"
                   + ("; continuing in the background (see `cogd status`)" if e.get("pending") else ""))


def embedding_line(e: dict) -> str:
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
