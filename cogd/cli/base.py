"""What every ``cogd`` command shares: the repository's layout, a backend to call, output, errors.

A command calls the repository's daemon when one runs; when none does, it takes the daemon
lock and runs the same service in-process (single writer; see docs/architecture.md). Errors
are not translated here, call by call: they propagate to :class:`CogdGroup`, which maps a
:class:`~cogd.errors.CogdError`, a daemon's refusal (:class:`~cogd.rpc.client.RemoteError`,
which carries its kind and fix) and a daemon that does not answer to a message, once, for every command.

This module imports no command module: the command modules import it.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import click

from cogd.config import load_config
from cogd.errors import CogdError
from cogd.paths import Layout, find_root
from cogd.rpc import control
from cogd.rpc.client import DaemonUnavailable, RemoteError, call as rpc_call
from cogd.cli.terminal import VisibleConsole, visible_streams

# What a command prints shows the repository's text, never lets it act on the terminal
# (cogd.cli.terminal): these consoles, and the streams while the group runs.
console = VisibleConsole(highlight=False)
err = VisibleConsole(stderr=True, highlight=False)

ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")  # a memory id; code ids hold "::" or a path


def edge_message(exc: BaseException) -> str | None:
    """The message a command prints for ``exc``, or None when ``exc`` is not the user's situation
    (a bug, which keeps its traceback).

    A daemon that does not answer is named as such; any other :class:`CogdError` says it itself
    (:meth:`~cogd.errors.CogdError.line`). A refusal, from the daemon or from the in-process
    service alike (both arrive as :class:`~cogd.rpc.client.RemoteError`), is its message and its
    kind, then its fix on a second line (``  fix: …``) when it carries one.
    """
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    if isinstance(exc, DaemonUnavailable):
        head = f"the daemon did not answer: {exc}"
        return f"{head}\n  fix: {exc.fix}" if exc.fix else head
    if isinstance(exc, CogdError):
        return exc.line()
    return None


class CogdGroup(click.Group):
    """The ``cogd`` group: every command's errors are mapped to a message here, once
    (:func:`edge_message`), so no command translates exceptions itself."""

    def main(self, *args, **kwargs):
        """click's ``main`` with ``sys.stdout``/``sys.stderr`` showing control and bidirectional
        characters visibly (:func:`cogd.cli.terminal.visible_streams`), error messages included."""
        with visible_streams():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CogdError as exc:  # RemoteError and DaemonUnavailable included
            raise click.ClickException(edge_message(exc)) from exc


class LocalBackend:
    """The daemon's service run in this process, under the daemon lock (``lock_fd``, closed by
    :meth:`close`). Raises what :func:`store_failure` raises when a store cannot be opened."""

    def __init__(self, layout: Layout, lock_fd: int):
        from cogd.daemon.service import Service  # heavy: only when no daemon runs

        self.lock_fd = lock_fd
        try:
            config = load_config(layout.config_file)
            # In-process work is lexical: loading the model and embedding the whole tree is
            # the daemon's background job, not a CLI command's. Damaged projections are moved
            # aside and rebuilt as in the daemon; what cannot be recovered is a clear error.
            self.service = Service(layout, config, start_index=False, start_embedder=False)
        except BaseException as exc:
            os.close(lock_fd)
            store_failure(exc)
            raise

    def call(self, method: str, params: dict | None = None, timeout: float = 0) -> object:
        """``method``'s result; a refusal is a RemoteError, as it would be from the daemon (its
        kind, fix and data included, so the edge prints both the same way)."""
        from cogd.rpc.protocol import RpcError

        try:
            return self.service.call(method, params or {})
        except RpcError as exc:
            raise RemoteError(exc.to_json()) from exc

    def close(self) -> None:
        self.service.close()
        os.close(self.lock_fd)


def store_failure(exc: BaseException) -> None:
    """Turn a store that SQLite or the file system cannot open into a ClickException naming
    ``cogd doctor`` (else return: a StoreRefused or ConfigError says its own fix at the edge)."""
    import sqlite3

    if isinstance(exc, (sqlite3.Error, OSError)) and not isinstance(exc, CogdError):
        raise click.ClickException(
            f"cannot open cogd's stores: {exc.__class__.__name__}: {exc}\n"
            "  fix: run `cogd doctor` (it names the file and what to do)") from exc


class RemoteBackend:
    """The repository's running daemon, over its socket."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def call(self, method: str, params: dict | None = None, timeout: float = 30.0) -> object:
        """``method``'s result within ``timeout`` seconds; raises RemoteError or DaemonUnavailable."""
        return rpc_call(self.layout.socket_path, method, params or {}, timeout=timeout)

    def close(self) -> None:
        pass


def layout_for(root: str | None, create: bool = True) -> Layout:
    """The layout of the repository around ``root`` (default: the current directory).

    ``create`` makes ``.cogd/`` (read-only commands pass False). Raises ClickException when
    there is no repository, UnsafePath when ``.cogd/`` is unsafe to use.
    """
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
        except CogdError:
            raise  # an unsafe path: mapped at the edge
        except OSError as exc:
            raise click.ClickException(f"cannot create {layout.cogd_dir}: {exc}") from exc
    return layout


def layout_from(ctx: click.Context, create: bool = True) -> Layout:
    """The layout of the repository the ``--root`` of ``ctx``'s group names; see :func:`layout_for`."""
    return layout_for(ctx.find_root().obj.get("root"), create)


def not_up(layout: Layout) -> str:
    """Why the daemon did not come up, from its failed-start marker when it left one."""
    failed = control.start_failure(layout)
    if failed:
        return f"the daemon could not start: {failed.get('reason')}\n  fix: {failed.get('fix') or 'see `cogd logs`'}"
    return "the daemon did not come up; see `cogd logs`"


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


def run(ctx: click.Context, method: str, params: dict | None = None, *, fresh: bool = True,
        timeout: float = 60.0) -> object:
    """Call ``method`` with ``params`` on the repository's backend (see :func:`backend`); ``timeout``
    in seconds. A refusal propagates (RemoteError with its kind) to the edge."""
    with backend(layout_from(ctx), fresh=fresh) as be:
        return be.call(method, params or {}, timeout=timeout)




def rough_age(ts: float) -> str:
    """How long ago the epoch time ``ts`` (seconds) was, roughly: ``3 d`` or ``5 h``."""
    days = max(0.0, time.time() - ts) / 86400
    return f"{days:.0f} d" if days >= 1 else f"{days * 24:.0f} h"


def date(ts: float | None) -> str:
    """The epoch time ``ts`` (seconds) as a local ``YYYY-MM-DD HH:MM``, or ``-``."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"
