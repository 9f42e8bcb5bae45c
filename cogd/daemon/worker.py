"""The index worker: one thread that owns the index writer and runs refreshes.

Requests coalesce: any number of "refresh these paths" and "refresh all"
requests made while a refresh runs become one next refresh. Each request gets
a ticket; :meth:`IndexWorker.wait` returns once a refresh that started after
the request has committed, which is what "return only when the index is
current" means for ``cogd index``.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from cogd import faults
from cogd.config import IndexConfig
from cogd.index import languages
from cogd.index.indexer import (Indexer, RefreshResult, forget_trees_job, parse_rows_job, save_rows_job,
                                timeout_rows)
from cogd.index.parsepool import ParsePool, worker_count

log = logging.getLogger(__name__)


class _Stopping(Exception):
    """Raised inside a refresh to abandon it between files at shutdown."""


class IndexWorker:
    """Runs :class:`Indexer` refreshes on a private thread."""

    def __init__(self, root: Path, db_path: Path, index_config: IndexConfig, on_change=None):
        self._root, self._db_path, self._config = root, db_path, index_config
        self._on_change = on_change  # called (no arguments) after a refresh that changed the index
        self._cond = threading.Condition()
        self._pending_all = False
        self._pending_full = False
        self._pending_paths: set[str] = set()
        self._requested = 0  # last ticket handed out
        self._completed = 0  # every ticket <= this has been served
        self._stopping = False
        self._reopen = False  # the database file was replaced: reopen before the next refresh
        self.state = "idle"  # idle | indexing
        self.progress = {"done": 0, "total": 0, "path": ""}
        self.last_result: RefreshResult | None = None
        self.last_error: str | None = None
        self.last_resolved: dict | None = None  # the last error a successful refresh cleared
        self.last_refresh_started = 0.0  # monotonic seconds
        self.refreshes = 0
        self._thread = threading.Thread(target=self._run, name="cogd-index", daemon=True)
        self._thread.start()

    def request(self, paths: list[str] | None = None, *, full: bool = False) -> int:
        """Queue a refresh of ``paths`` (None = whole tree; ``full`` re-parses every file).

        Returns a ticket for :meth:`wait`.
        """
        with self._cond:
            if paths is not None and not paths and not full:
                return self._completed  # nothing to do: a ticket that is already served
            if full:
                self._pending_full = True
            if paths is None or full:
                self._pending_all = True
            else:
                self._pending_paths.update(paths)
            self._requested += 1
            self._cond.notify_all()
            return self._requested

    def wait(self, ticket: int, timeout: float | None = None) -> bool:
        """Block until ``ticket`` is served; False on timeout or shutdown."""
        with self._cond:
            return self._cond.wait_for(lambda: self._completed >= ticket or self._stopping, timeout) and not (
                self._completed < ticket
            )

    @property
    def completed(self) -> int:
        """The highest ticket served so far."""
        with self._cond:
            return self._completed

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return self._requested - self._completed

    def reopen(self) -> int:
        """The index database was deleted or replaced: reopen it and rebuild. Returns a ticket."""
        with self._cond:
            self._reopen = True
        return self.request(None, full=True)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the file being written, commit, and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _progress(self, done: int, total: int, path: str) -> None:
        self.progress = {"done": done, "total": total, "path": path}
        if self._stopping:
            raise _Stopping

    def _run(self) -> None:
        indexer, pool = self._open()
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping or self._pending_all or self._pending_paths)
                    if self._stopping:
                        return
                    paths = None if self._pending_all else sorted(self._pending_paths)
                    full = self._pending_full
                    self._pending_all, self._pending_full, self._pending_paths = False, False, set()
                    ticket = self._requested
                    reopen, self._reopen = self._reopen, False
                    self.state = "indexing"
                    self.progress = {"done": 0, "total": 0, "path": ""}
                if reopen:
                    indexer.close()
                    indexer = Indexer(**self._indexer_args(pool))
                self.last_refresh_started = time.monotonic()
                while faults.active("hold_index") and not self._stopping:  # tests only (cogd.faults)
                    time.sleep(0.05)
                try:
                    result = indexer.refresh(paths, progress=self._progress, full=full)
                    self.last_result = result
                    if self.last_error:  # the condition cleared: keep what it was, and when, for status
                        self.last_resolved = {"kind": "index.refresh", "error": self.last_error,
                                              "resolved_at": time.time()}
                    self.last_error = None
                    self.refreshes += 1
                    if result.parsed or result.removed or self.refreshes == 1:
                        log.info("refresh: %s", result.as_dict())
                        if self._on_change is not None:
                            self._on_change()
                except _Stopping:
                    indexer.conn.commit()  # keep the files already written
                    return
                except Exception as exc:  # keep serving the last committed index
                    log.exception("refresh failed")
                    self.last_error = f"{exc.__class__.__name__}: {exc}"
                    indexer.conn.rollback()
                with self._cond:
                    self._completed = ticket
                    self.state = "idle"
                    self._cond.notify_all()
        finally:
            with self._cond:
                self.state = "stopped"
                self._cond.notify_all()
            indexer.close()
            pool.terminate()

    def _indexer_args(self, pool: ParsePool) -> dict:
        return dict(root=self._root, db_path=self._db_path, config=self._config, pool=pool)

    def _open(self) -> tuple[Indexer, ParsePool]:
        pool = parse_pool(self._root, self._config)
        return Indexer(**self._indexer_args(pool)), pool


def parse_pool(root: Path, config: IndexConfig) -> ParsePool:
    """The daemon's parser processes for ``root`` with ``config`` (its ``[index]`` section).

    One per core by default (``parse_workers``): a pathological file can be killed there, and
    parsing overlaps the SQLite writes of the index worker. Plus the save lane, one more
    process that parses every save and keeps the trees of the last files saved, so a save
    re-parses incrementally (:mod:`cogd.index.parsepool`). Workers compile the same query
    overrides as this process (read once, here: :func:`cogd.index.languages.configure`).
    ``scripts/bench_index.py`` times saves through this pool.
    """
    overrides = languages.configure(root)
    return ParsePool(worker_count(config.parse_workers), parse_rows_job, timeout_rows,
                     languages.configure, (str(root), overrides),
                     save_job=save_rows_job, forget_job=forget_trees_job)
