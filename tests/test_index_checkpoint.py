"""Saves leave the WAL; the index worker copies it into the database once the save is visible.

Real SQLite, real tree-sitter, a real :class:`IndexWorker` thread. The proof that a save did
not checkpoint is the main database file itself: a checkpoint is the only thing that writes to
it in WAL mode, so its bytes stay the same while the saves' pages wait in ``index.db-wal``.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from cogd.config import IndexConfig
from cogd.daemon.worker import IndexWorker
from cogd.index import store
from cogd.index.indexer import Indexer

FUNCTIONS = 1500  # every save renames them all: well over 1,000 WAL pages in a few saves
SAVES = 4


def _module(generation: int) -> str:
    return "".join(f'def f{generation}_{i}(x):\n    """Doc {i}."""\n    return g{i}(x) + {i}\n\n\n'
                   for i in range(FUNCTIONS))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entity_seen(db: Path, entity_id: str) -> bool:
    """Whether a separate reader connection (as the daemon's searches use) sees ``entity_id``."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity_id,)).fetchone() is not None
    finally:
        conn.close()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "big.py").write_text(_module(0), encoding="utf-8")
    (root / "small.py").write_text("def helper():\n    return 1\n", encoding="utf-8")
    return root


def _saves(ix: Indexer, root: Path) -> None:
    for generation in range(1, SAVES + 1):
        (root / "big.py").write_text(_module(generation), encoding="utf-8")
        result = ix.refresh(paths=["big.py"])
        assert result.parsed == 1


def test_deferred_saves_leave_the_database_file_alone_until_the_checkpoint(tree: Path, tmp_path: Path):
    db = tmp_path / "index.db"
    ix = Indexer(tree, db, defer_checkpoints=True)
    try:
        ix.refresh()
        assert ix.checkpoint()[0] == ix.checkpoint()[1]  # everything so far is in the database file
        before = _digest(db)
        _saves(ix, tree)
        assert ix.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        # Visible to another connection at once, though nothing reached the database file.
        assert _entity_seen(db, f"big.py::f{SAVES}_{FUNCTIONS - 1}")
        assert not _entity_seen(db, "big.py::f1_0")
        assert _digest(db) == before
        frames, copied = ix.checkpoint()
        assert frames == copied
        assert frames > store.AUTOCHECKPOINT_PAGES  # SQLite alone would have copied during a save
        assert _digest(db) != before
        # A whole-tree refresh goes back to SQLite's automatic checkpoint.
        ix.refresh()
        assert ix.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == store.AUTOCHECKPOINT_PAGES
    finally:
        ix.close()


def test_without_deferral_a_save_commit_checkpoints_as_sqlite_does(tree: Path, tmp_path: Path):
    db = tmp_path / "index.db"
    ix = Indexer(tree, db)
    try:
        ix.refresh()
        ix.checkpoint()
        before = _digest(db)
        _saves(ix, tree)
        assert ix.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == store.AUTOCHECKPOINT_PAGES
        assert _digest(db) != before  # a commit past 1,000 pages copied the WAL in
        frames, copied = ix.checkpoint()
        assert frames == copied
        assert frames <= store.AUTOCHECKPOINT_PAGES + 1  # what the last saves left, no more
    finally:
        ix.close()


def _until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_the_index_worker_checkpoints_after_a_save_once_idle(tree: Path, tmp_path: Path):
    db = tmp_path / "index.db"
    worker = IndexWorker(tree, db, IndexConfig(parse_workers=1))
    try:
        assert worker.wait(worker.request(None), timeout=60)
        assert worker.checkpoints == 0  # a whole-tree refresh checkpoints on its own, as SQLite does
        assert worker.wait(worker.request(None), timeout=60)  # nothing changed: nothing to copy
        assert worker.checkpoints == 0
        before = _digest(db)
        (tree / "small.py").write_text("def helper():\n    return 2\n\n\ndef added():\n    return 3\n",
                                       encoding="utf-8")
        assert worker.wait(worker.request(["small.py"]), timeout=60)
        assert _entity_seen(db, "small.py::added")
        assert _until(lambda: worker.checkpoints == 1)
        assert _digest(db) != before  # the save's pages reached the database file
        # A save whose bytes did not change writes nothing: no second checkpoint.
        (tree / "small.py").touch()
        assert worker.wait(worker.request(["small.py"]), timeout=60)
        assert worker.last_result is not None and worker.last_result.parsed == 0
        assert worker.checkpoints == 1
    finally:
        worker.stop()
