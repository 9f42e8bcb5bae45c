"""``cogd doctor``: run the health checks of :mod:`cogd.cli.doctor_checks` and print them as a
table (or JSON); exit 1 when any check fails."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape
from rich.table import Table

from cogd.cli.base import console, layout_from

_STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--no-model-load", is_flag=True, help="Verify the model's files but do not load it (saves ~1 s).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, no_model_load: bool) -> None:
    """Check this repository's cogd: daemon, socket, lock, model, inotify, index drift, databases, disk.

    Exits 1 when any check fails (warnings do not). Works with or without a running daemon.
    """
    from cogd.cli.doctor_checks import counted, exit_code, make_context, run_checks  # the checks load sqlite, git, the model

    layout = layout_from(ctx, create=False)
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
        console.print(f"{fails} failed, {counted(warns, 'warning')}, {len(results) - fails - warns} ok")
    sys.exit(code)
