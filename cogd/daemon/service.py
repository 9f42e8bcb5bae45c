"""The daemon's service: its lifecycle and the dispatch of the methods it answers, independent of the socket.

The server runs each request on a thread pool and calls :meth:`Service.call`.
The collaborators (ledger, index worker and readers, memory store,
consolidator, …) are created once, in :func:`cogd.daemon.parts.build_parts`;
the methods live in thin modules over them — ``context_methods`` (packs and
their deliveries), ``session_methods`` (tool uses, compaction, session end),
``index_methods`` (index, search, entities, stats), ``graph_methods``,
``memory_methods`` and ``status_methods`` — each exposing ``methods(parts)``,
with their parameters checked by :mod:`cogd.daemon.params`.
Errors are mapped to JSON-RPC once, here: a :class:`~cogd.errors.CogdError`
keeps its kind; anything else is ``internal``.

Two methods never reach :meth:`Service.call`: the socket server
(:mod:`cogd.daemon.server`) answers ``daemon.shutdown`` itself (it stops the
event loop), and ``context.ack`` on the connection that received the pack
(it calls :meth:`Service.confirm_delivery`).
"""
from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from cogd import recovery
from cogd.config import Config
from cogd.daemon import (context_methods, graph_methods, history_methods, index_methods, memory_methods,
                         session_methods, status_methods)
from cogd.daemon.parts import Handler, build_parts
from cogd.errors import CogdError
from cogd.index import store
from cogd.paths import Layout
from cogd.rpc.protocol import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError

log = logging.getLogger(__name__)

STORE_CHECK_S = 30.0  # after a database error, projections are quick-checked at most this often


class Service:
    """The daemon's methods behind the socket: ``call(method, params)`` dispatches every one of
    them (all but ``daemon.shutdown`` and ``context.ack``, answered by the server: see above).

    ``start_index``: queue the first refresh and start the file watcher (the daemon; an
    in-process CLI command passes False); ``start_embedder``: load the embedding model
    when ``[embed] enabled``. Raises :class:`cogd.recovery.StoreRefused` when the ledger
    cannot be opened safely (the daemon does not start).
    """

    def __init__(self, layout: Layout, config: Config, *, start_index: bool = True, start_embedder: bool = True):
        self.layout = layout
        self.config = config
        self.started_at = time.time()
        self.last_request_at = time.monotonic()
        self.requests = 0
        # Damaged stores: the ledger is checked (never replaced) before anything opens it; a
        # damaged projection is moved aside and rebuilt (cogd/recovery.py, docs/architecture.md).
        from cogd.memory.sync import count_record_files

        self.ledger_report = recovery.check_ledger(layout.cogd_dir, count_record_files(layout.cogd_dir / "memory"))
        self._suspect_corruption = False
        self._stores_checked_at = 0.0
        self._mark_written_at = 0.0
        # A daemon without an index starts from the team's snapshot when one is configured; the
        # first refresh below then catches up from its commit to HEAD (cogd/snapshot/pull.py).
        self.snapshot_pull = None
        if start_index and config.snapshot.uri:
            from cogd.snapshot.pull import pull_on_start

            self.snapshot_pull = pull_on_start(layout, config)
        self.parts = parts = build_parts(layout, config, start_index=start_index, start_embedder=start_embedder)
        self._index_inode = layout.index_db.stat().st_ino
        # The collaborators the server, the spool and the CLI reach for, by their usual names.
        self.ledger, self.memory, self.consolidator = parts.ledger, parts.memory, parts.consolidator
        self.utility, self.embedder, self.worker, self.watcher = parts.utility, parts.embedder, parts.worker, parts.watcher
        self._methods: dict[str, Handler] = {
            **status_methods.methods(parts, self.lifecycle), **context_methods.methods(parts),
            **session_methods.methods(parts), **index_methods.methods(parts),
            **graph_methods.methods(parts), **memory_methods.methods(parts), **history_methods.methods(parts),
        }
        self._settle_ledger()
        if start_index:
            self.worker.request(None)
        if self.watcher is not None:
            self.watcher.start()
        if start_index and parts.history is not None:  # mines after the first index (cogd.history)
            parts.history.miner.start()

    def lifecycle(self) -> status_methods.Lifecycle:
        """This service's own state, for ``status``: uptime, requests served, the ledger's check at start."""
        return status_methods.Lifecycle(round(time.time() - self.started_at, 3), self.requests, self.ledger_report)

    @property
    def methods(self) -> frozenset[str]:
        """The names of the methods :meth:`call` answers (``docs/protocol.md`` has a section for each,
        and for the two the server answers itself)."""
        return frozenset(self._methods)

    @property
    def last_error(self) -> str | None:
        """The newest current problem's message (None when there is none)."""
        return self.parts.problems.last_error

    def close(self) -> None:
        self.consolidator.join(timeout=30)  # a consolidation in flight finishes its write
        if self.watcher is not None:
            self.watcher.stop()
        if self.embedder is not None:
            self.embedder.stop()
        # The miner before the readers: its pass ends by reading the index through one of them.
        if self.parts.history is not None:
            self.parts.history.miner.stop()
        # Readers first, then the writer: the index worker's close checkpoints the WAL, and as
        # the last connection on index.db it removes index.db-wal (a reader left open keeps it).
        self.parts.readers.close()
        if self.parts.history is not None:
            self.parts.history.miner.store.close()
        self.worker.stop()
        # What the ledger holds at stop, read before the last connection closes: that close
        # checkpoints the WAL and removes it (a reader opened afterwards would leave one behind).
        recovery.write_mark(self.layout.cogd_dir, self.layout.state_db)
        self.memory.close()
        self.ledger.close()

    def _settle_ledger(self) -> None:
        """After the ledger opened: restore tombstones into a new one, record a loss, write the marker."""
        report = self.ledger_report
        if report.state != "ok":  # a new ledger: the record files' tombstones are all it can have
            from cogd.memory.sync import restore_tombstones

            report.restored_tombstones = restore_tombstones(self.memory.memory_dir, self.memory.ledger)
        if report.state == "lost":
            recovery.record_loss(self.layout.cogd_dir, report)
        extra = {}
        if report.state == "fresh":
            log.info("%s", report.statement())
            extra = {"started_fresh_at": report.at, "started_fresh_records": report.memory_records,
                     "started_fresh_tombstones": report.restored_tombstones}
        recovery.write_mark(self.layout.cogd_dir, self.layout.state_db, force=True, **extra)
        self._mark_written_at = time.monotonic()

    # ---- dispatch ---------------------------------------------------------
    def call(self, method: str, params: dict) -> object:
        """Dispatch one request. Raises RpcError (never anything else): a CogdError keeps its
        kind, code and data; a database error or any other exception is ``internal``."""
        handler = self._methods.get(method)
        if handler is None:
            raise RpcError("not_found", f"unknown method {method!r}", METHOD_NOT_FOUND)
        if not isinstance(params, dict):
            raise RpcError("bad_request", "params must be an object", INVALID_PARAMS)
        self.requests += 1
        self.last_request_at = time.monotonic()
        try:
            answer = handler(params)
        except RpcError:
            raise
        except CogdError as exc:  # MemoryRefused, GraphError, …: the same kind, code and data
            raise RpcError.of(exc) from exc
        except sqlite3.Error as exc:
            self.parts.problems.record(method, f"{method}: {exc}")
            if isinstance(exc, sqlite3.DatabaseError) and not any(w in str(exc) for w in ("locked", "busy")):
                # Damage shows as "malformed", but also as e.g. "vtable constructor failed": let
                # quick_check judge, on the next housekeeping tick (at most every STORE_CHECK_S).
                self._suspect_corruption = True
            log.exception("database error in %s", method)
            raise RpcError("internal", f"database error: {exc}") from exc
        except Exception as exc:
            self.parts.problems.record(method, f"{method}: {exc.__class__.__name__}: {exc}")
            log.exception("error in %s", method)
            raise RpcError("internal", f"{exc.__class__.__name__}: {exc}") from exc
        if method in self.parts.problems:
            self.parts.problems.resolve(method)
        return answer

    # ---- delivery acknowledgement (docs/protocol.md "Delivery acknowledgement") ----
    def confirm_delivery(self, token: int) -> int | None:
        """The client printed the pack held under ``token``: record it (see :func:`context_methods.confirm`)."""
        return context_methods.confirm(self.parts, token)

    def withdraw_delivery(self, token: int) -> bool:
        """The pack held under ``token`` never reached its client: forget it. Returns whether it was held."""
        return context_methods.withdraw(self.parts, token)

    @property
    def held_deliveries(self) -> int:
        """How many packs wait for their client's acknowledgement."""
        return len(self.parts.held)

    # ---- housekeeping -----------------------------------------------------
    def _check_stores(self) -> None:
        """After a query failed with corruption: move the damaged projection aside (the caller rebuilds)."""
        self._suspect_corruption = False
        for path, rebuild in ((self.layout.index_db, "rebuilt from the work tree in the background"),
                              (self.layout.index_dir / "memory.db", "rebuilt from the memory files")):
            try:
                problem = recovery.sqlite_problem(path)
            except sqlite3.Error:
                log.exception("could not check %s", path)
                continue
            if problem:
                recovery.quarantine(path, problem, rebuild)

    def check_projection(self) -> None:
        """Rebuild the index if its database file was deleted or replaced (called every second).

        The index is a projection, so losing it loses nothing; but connections
        still open on the old file would fail or serve a ghost. Readers reopen
        (a new generation) and the index worker rebuilds from the work tree.
        """
        if self._suspect_corruption and time.monotonic() - self._stores_checked_at > STORE_CHECK_S:
            self._stores_checked_at = time.monotonic()
            self._check_stores()
        if time.monotonic() - self._mark_written_at > recovery.MARK_INTERVAL_S:
            self._mark_written_at = time.monotonic()
            recovery.write_mark(self.layout.cogd_dir, self.layout.state_db)
        try:  # memory: hand edits, arrivals, anchors (a stat scan, at most once a second)
            self.memory.maybe_sync()
        except Exception:
            log.exception("memory sync failed")
        try:
            inode = self.layout.index_db.stat().st_ino
        except FileNotFoundError:
            inode = None
        if inode == self._index_inode:
            return
        log.warning("index database %s was deleted or replaced: rebuilding it", self.layout.index_db)
        store.connect(self.layout.index_db).close()  # the schema exists before any reader reopens
        self._index_inode = self.layout.index_db.stat().st_ino
        self.parts.readers.renew()
        self.worker.reopen()


def open_service(root: Path, config: Config, *, start_index: bool = True) -> Service:
    """A Service for ``root`` (used in-process by the CLI when no daemon runs)."""
    return Service(Layout(root).ensure(), config, start_index=start_index)
