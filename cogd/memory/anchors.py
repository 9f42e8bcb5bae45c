"""What the code index says about anchored entities: their content hash, and the commit.

Reads ``.cogd/index/index.db`` through :mod:`cogd.index.store`'s read functions
on its own read-only connection, opened per call: the index may be rebuilt or
replaced under it, and memory must never hold the index's writer back. A
missing or unreadable index reads as "no entity" / "no commit".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from cogd import safepath
from cogd.index import store

_T = TypeVar("_T")


class CodeIndex:
    """Read-only access to the code index at ``index_db``."""

    def __init__(self, index_db: Path):
        self.index_db = index_db

    def _read(self, query: Callable[[sqlite3.Connection], _T], empty: _T) -> _T:
        """``query(conn)`` on a fresh read-only connection, or ``empty`` when the index is missing,
        unsafe (a link) or unreadable (not a database, no tables yet)."""
        if not self.index_db.exists():
            return empty
        try:
            conn = store.connect(self.index_db, readonly=True)  # lstat-checked, busy timeout set
        except (sqlite3.Error, safepath.UnsafePath):
            return empty
        try:
            return query(conn)
        except sqlite3.Error:
            return empty
        finally:
            conn.close()

    def hashes(self, entity_ids: list[str]) -> dict[str, str]:
        """``{entity id: content hash}`` for those of ``entity_ids`` the index holds (others absent)."""
        if not entity_ids:
            return {}
        return self._read(lambda conn: store.entity_hashes(conn, entity_ids), {})

    def indexed_files(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` (root-relative) that the index's ``files`` table holds."""
        if not paths:
            return set()
        return self._read(lambda conn: store.indexed_paths(conn, paths), set())

    def meta(self, key: str) -> str:
        """A value of the index's ``meta`` table ('' when absent): ``commit``, ``indexed_at``."""
        return self._read(lambda conn: store.get_meta(conn, key) or "", "")

    def commit(self) -> str:
        """The commit the index was built at ('' when unknown)."""
        return self.meta("commit")


def entity_path(entity_id: str) -> str:
    """The file part of a code entity id (``path/to/file.py::Class.method`` → ``path/to/file.py``)."""
    return entity_id.split("::", 1)[0]
