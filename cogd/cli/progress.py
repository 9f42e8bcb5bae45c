"""Long work shown as it goes: an index refresh and the background embedding, as progress bars
on a terminal and as lines otherwise; the stages of ``cogd reset``; and the embedding's phase in
words (the ``embedding`` row of ``cogd status``)."""

from __future__ import annotations

import time

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

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


#: Without a terminal (a pipe, a log file, CI), progress is printed as lines, one at most this
#: often (seconds) per stage, so the output is line-based and finite.
LINE_EVERY_S = 10.0
POLL_S = 0.25  # how often a bar asks for the numbers
BAR_WIDTH = 12  # characters of a bar: with the counts it keeps a row within 80 columns


def format_eta(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 05 min``: a rough time to go (whole seconds under a minute)."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s" if s < 600 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _finished(e: dict) -> bool:
    """Whether the embedding has nothing left to do (or cannot go on)."""
    if e.get("state") in ("disabled", "error", "stopped", None):
        return True
    phase = e.get("phase") or e.get("state")  # a daemon without phases says only its state
    return phase in ("current", "idle") and not e.get("pending") and not e.get("queued")


def _counts(e: dict, short: bool = False) -> str:
    """``1,234/5,678 entities · 42.1/s · ETA 2 min · front 1,234/1,234`` (what is known so far);
    ``short``: without the word ``entities`` (the bar's form, which must fit 80 columns)."""
    phase = e.get("phase") or e.get("state")
    if phase == "loading":
        return "loading the model"
    if phase == "counting" and not e.get("entities"):
        return "counting the entities"
    parts = [f"{e.get('embedded_entities', 0):,}/{e.get('entities', 0):,}" + ("" if short else " entities")]
    if e.get("pending") and e.get("rate_per_s"):
        parts += [f"{e['rate_per_s']:,.1f}/s", f"ETA {format_eta(e.get('eta_s', 0))}"]
    front = e.get("front") or {}
    if front.get("entities"):
        parts.append(f"front {front.get('embedded_entities', 0):,}/{front['entities']:,}")
    return " · ".join(parts)


def follow_embedding(be, wait_s: float | None = None, *, tty: bool | None = None) -> dict:
    """Show the background embedding of ``be``'s daemon (a backend), then one summary line.

    On a terminal (``tty`` None: whether stderr is one): a live bar — entities embedded of
    the total, the rate, the ETA and the front's coverage (README "What `cogd up` does") — until the
    embedding is current, ``wait_s`` seconds have passed (None: no limit), or the user presses
    Ctrl-C, which stops only the bar: the daemon goes on embedding in the background, and the
    summary line says so. Without a terminal: no bar; one line now, one every LINE_EVERY_S
    while waiting, and a summary, so the output is line-based and finite; ``wait_s`` None
    means 0 (report and return). Returns the last ``embedding`` status seen. Raises what
    ``be.call`` raises (the daemon went away).
    """
    tty = err.is_terminal if tty is None else tty
    if wait_s is None and not tty:
        wait_s = 0.0
    deadline = None if wait_s is None else time.monotonic() + wait_s
    seen: dict = {}  # the last embedding status read (the loops update it; a Ctrl-C keeps it)
    interrupted = False
    try:
        (_bar if tty else _lines)(be, seen, deadline)
    except KeyboardInterrupt:
        interrupted = True
    e = dict(seen)
    background = "Ctrl-C stopped only this display: the daemon goes on embedding in the background (`cogd status` shows it)"
    if interrupted and not e:
        click.echo(f"embedding: {background}")
    elif e.get("state") == "error":
        err.print(f"[yellow]embeddings unavailable[/] ({e.get('error')}); packs use BM25 only")
    elif e.get("state") not in ("disabled", None):
        left = not _finished(e)
        line = f"embedding: {embedding_line(e)}"
        front = e.get("front") or {}
        if left and front.get("entities") and front.get("embedded_entities") == front["entities"]:
            line += f"; the front ({front['entities']:,} entities packs need first) is embedded"
        if interrupted:
            line += f"; {background}"
        elif left:
            line += "; continuing in the background (see `cogd status`)"
        click.echo(line)
    return e


def _poll(be, seen: dict) -> dict:
    """The daemon's embedding status, also left in ``seen`` (replacing what it held)."""
    e = be.call("status").get("embedding") or {}
    seen.clear()
    seen.update(e)
    return e


def _bar(be, seen: dict, deadline: float | None) -> None:
    """The live bar of :func:`follow_embedding`, the last status left in ``seen`` (a KeyboardInterrupt passes)."""
    # Narrow on purpose: spinner, label, a short bar and the counts fit in 80 columns (a wider
    # row is cut by rich, and the front's coverage at its end was what got lost); the Ctrl-C
    # hint goes on a line of its own above the bar.
    columns = (SpinnerColumn(finished_text="[green]✓[/]"), TextColumn("[bold]embedding"), BarColumn(bar_width=BAR_WIDTH),
               TextColumn("{task.fields[counts]}"))
    e = _poll(be, seen)
    err.print(Text("Ctrl-C leaves it to the background: the daemon goes on embedding.", style="dim"))
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("embed", total=None, counts=_counts(e, short=True))
        while True:
            total = e.get("entities") or None
            counted = (e.get("phase") or e.get("state")) not in ("loading", "counting")
            progress.update(task, total=total if counted else None,
                            completed=e.get("embedded_entities", 0) if counted else 0, counts=_counts(e, short=True))
            if _finished(e) or (deadline is not None and time.monotonic() > deadline):
                return
            time.sleep(POLL_S)
            e = _poll(be, seen)


def _lines(be, seen: dict, deadline: float | None) -> None:
    """The line-based form of :func:`follow_embedding`: a line when the numbers changed, at most
    one per LINE_EVERY_S, until the embedding is finished or ``deadline`` (never None here); the
    last status is left in ``seen``."""
    assert deadline is not None
    e = _poll(be, seen)
    printed, last_at = "", 0.0
    while not _finished(e) and time.monotonic() <= deadline:
        now = time.monotonic()
        line = _counts(e)
        if line != printed and now - last_at >= LINE_EVERY_S:
            click.echo(f"embedding: {line}")
            printed, last_at = line, now
        time.sleep(min(POLL_S * 4, max(deadline - now, 0.01)))
        e = _poll(be, seen)


class Stages:
    """Each stage of a long command (``cogd reset``: index, memory, vectors…) with its own
    progress: on a terminal a bar per stage that stays on screen with its summary when done;
    otherwise a line when a stage starts, at most one per LINE_EVERY_S while it runs, and one
    with its summary and duration when it ends.

    Use as a context manager; :meth:`start` a stage, :meth:`update` it with ``done`` of
    ``total`` (None: not known yet) and a short ``note``, :meth:`finish` it with a summary.
    ``console``: where to draw (stderr by default); ``tty`` None: whether it is a terminal;
    ``quiet``: draw nothing (a caller that reports in its own way).
    """

    def __init__(self, console=None, tty: bool | None = None, quiet: bool = False):
        self.console = console or err
        self.tty = self.console.is_terminal if tty is None else tty
        self.quiet = quiet
        self._progress: Progress | None = None
        self._task = None
        self._name = ""
        self._started = 0.0
        self._line_at = 0.0
        self._line = ""

    def __enter__(self) -> "Stages":
        if self.tty and not self.quiet:
            # The running stage's row stays short (a bar of BAR_WIDTH and its count); what a stage
            # did is printed as a line of its own when it ends, wrapped rather than cut at the
            # terminal's width.
            self._progress = Progress(
                SpinnerColumn(), TextColumn("[bold]{task.description:<8}"), BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.fields[count]}"), TextColumn("[dim]{task.fields[note]}"), TimeElapsedColumn(),
                console=self.console)
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start(self, name: str, note: str = "") -> None:
        """A new stage called ``name`` (the one before should be finished)."""
        self._name, self._started, self._line = name, time.monotonic(), ""
        if self._progress is not None:
            self._task = self._progress.add_task(name, total=None, count="", note=escape(note))
        elif not self.quiet:
            self.console.print(f"{name}: {note or 'started'}", markup=False, highlight=False, soft_wrap=True)
            self._line_at = self._started

    def update(self, done: int, total: int | None, note: str = "") -> None:
        """The current stage has ``done`` of ``total`` (items of its own unit) done."""
        count = f"{done:,}/{total:,}" if total else ""
        if self._progress is not None:
            self._progress.update(self._task, total=total or None, completed=done if total else 0, count=count, note=escape(note))
            return
        line = " ".join(x for x in (count, note) if x)
        now = time.monotonic()
        if not self.quiet and line and line != self._line and now - self._line_at >= LINE_EVERY_S:
            self.console.print(f"{self._name}: {line}", markup=False, highlight=False, soft_wrap=True)
            self._line, self._line_at = line, now

    def finish(self, summary: str, done: int | None = None) -> None:
        """The current stage is over: ``summary`` says what it did (``done`` items, when counted)."""
        took = time.monotonic() - self._started
        if self._progress is not None:
            self._progress.update(self._task, visible=False)
            self._progress.console.print(Text.assemble(("✓ ", "green"), (f"{self._name:<8}", "bold"), f" {summary} ",
                                                       (f"({took:.1f} s)", "dim")))
        elif not self.quiet:
            self.console.print(f"{self._name}: {summary} ({took:.1f} s)", markup=False, highlight=False, soft_wrap=True)


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


def first_tier_line(e: dict) -> str | None:
    """The ``first tier`` row of ``cogd status`` (cogd.daemon.first_tier): whether static vectors
    answer searches now, and otherwise when they would; None without a tier in the status (an
    older daemon, embedding off)."""
    tier = e.get("first_tier")
    phase = e.get("phase") or e.get("state")
    if not isinstance(tier, dict) or phase in (None, "disabled"):
        return None
    if tier.get("active"):
        done, total = e.get("embedded_entities", 0), e.get("entities", 0)
        return (f"active: {tier.get('entities', 0):,} static vectors ({tier.get('model')}) answer searches "
                f"until the model covers every entity ({done:,}/{total:,})")
    if tier.get("error"):
        return f"unavailable ({tier['error']}): searches use the model's vectors as they come"
    least = tier.get("min") or 0
    if least <= 0:
        return "off ([embed] first_tier_min = 0)"
    line = f"standing by: a pass with {least:,} or more entities to embed gives every entity a static vector first"
    if tier.get("computed"):
        line += f" (last: {tier['computed']:,} static vectors in {tier.get('seconds', 0)} s, dropped once the model caught up)"
    return line


def front_line(e: dict) -> str | None:
    """The ``front`` row of ``cogd status``: ``1,234/1,234 embedded (every file entity and the
    definitions of 87 recently changed or most-referenced files)``; None before the entities
    are counted or without a front (embedding off, an older daemon)."""
    front = e.get("front") or {}
    phase = e.get("phase") or e.get("state")
    if not front or phase in (None, "disabled", "error", "loading", "counting"):
        return None
    done, total = front.get("embedded_entities", 0), front.get("entities", 0)
    return (f"{done:,}/{total:,} embedded (every file entity and the definitions of "
            f"{front.get('files', 0):,} recently changed or most-referenced files)")
