"""``cogd``: the command line.

Every command works on the repository that contains the current directory (or ``--root``).
Those that only look or stop — ``status``, ``doctor``, ``logs`` and ``stop`` — never create
``.cogd/`` (``layout_from(ctx, create=False)``); every other command initialises it there if
it is missing. Commands talk to the repository's daemon when one runs; when none does, they
take the daemon lock and do the same work in-process (single writer; see docs/architecture.md).

Modules: :mod:`~cogd.cli.base` (layout, backends, output helpers, the one place errors become
messages), :mod:`~cogd.cli.progress` (the progress bars of indexing and embedding and the embedding's
phase, shared by ``up``, ``index`` and ``status``), then one per command group — :mod:`~cogd.cli.lifecycle` (up, start, stop, daemon,
mcp, logs), :mod:`~cogd.cli.status`, :mod:`~cogd.cli.index` (index, search, show, stats,
context, models), :mod:`~cogd.cli.memory` (memory …, verify, events, export, import,
consolidate), :mod:`~cogd.cli.doctor` (over :mod:`~cogd.cli.doctor_checks`),
:mod:`~cogd.cli.reset`, :mod:`~cogd.cli.install`, :mod:`~cogd.cli.snapshot`, :mod:`~cogd.cli.history`. ``python -m cogd.cli`` runs it
(:mod:`~cogd.cli.__main__`). This module only assembles them.
"""

from __future__ import annotations

import os

import click

from cogd.cli import doctor, history, index, install, lifecycle, memory, reset, snapshot, status
from cogd.cli.base import CogdGroup
from cogd.cli.ui import ui as ui_command


@click.group(cls=CogdGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Repository root (default: the one around the current directory).")
@click.version_option(package_name="cogd")
@click.pass_context
def main(ctx: click.Context, root: str | None) -> None:
    """cogd: a local memory and context daemon for AI coding agents."""
    os.umask(0o077)  # what commands create under .cogd/ (databases, logs, memory files) is private
    ctx.obj = {"root": root}


for _command in (
    lifecycle.up, install.install_hooks_command, lifecycle.start, lifecycle.stop, lifecycle.daemon,
    status.status, index.index, index.search, index.show, index.stats, index.context, index.models,
    lifecycle.logs, doctor.doctor, reset.reset_command, lifecycle.mcp,
    memory.memory_group, memory.verify, memory.events, memory.export, memory.import_, memory.consolidate,
    ui_command, snapshot.snapshot_group, history.history,
):
    main.add_command(_command)
