"""What the code index says about anchored entities: their content hash, and the commit.

Reads ``.cogd/index/index.db`` (the ``entities`` table and ``meta``) through its
own read-only connection, opened per call: the index may be rebuilt or
replaced under it, and memory must never hold the index's writer back. A
missing or unreadable index reads as "no entity" / "no commit".
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cogd import safepath


class CodeIndex:
    """Read-only access to the code index at ``index_db``."""

    def __init__(self, index_db: Path):
        self.index_db = index_db

    def _connect(self) -> sqlite3.Connection | None:
        if not self.index_db.exists():
            return None
        try:
            safepath.prepare_db(self.index_db, create=False)  # SQLite follows links: lstat its files first
            conn = sqlite3.connect(f"file:{self.index_db}?mode=ro", uri=True, timeout=5.0)
            conn.execute("PRAGMA busy_timeout=5000")
            return conn
        except (sqlite3.Error, safepath.UnsafePath):
            return None

    def hashes(self, entity_ids: list[str]) -> dict[str, str]:
        """``{entity id: content hash}`` for those of ``entity_ids`` the index holds (others absent)."""
        if not entity_ids:
            return {}
        conn = self._connect()
        if conn is None:
            return {}
        try:
            out: dict[str, str] = {}
            ids = list(dict.fromkeys(entity_ids))
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                rows = conn.execute(f"SELECT id, hash FROM entities WHERE id IN ({','.join('?' * len(chunk))})",
                                    chunk).fetchall()
                out.update({r[0]: r[1] for r in rows})
            return out
        except sqlite3.Error:
            return {}
        finally:
            conn.close()

    def indexed_files(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` (root-relative) that the index's ``files`` table holds."""
        if not paths:
            return set()
        conn = self._connect()
        if conn is None:
            return set()
        try:
            wanted = list(dict.fromkeys(paths))
            rows = conn.execute(f"SELECT path FROM files WHERE path IN ({','.join('?' * len(wanted))})",
                                wanted).fetchall()
            return {r[0] for r in rows}
        except sqlite3.Error:
            return set()
        finally:
            conn.close()

    def meta(self, key: str) -> str:
        """A value of the index's ``meta`` table ('' when absent): ``commit``, ``indexed_at``."""
        conn = self._connect()
        if conn is None:
            return ""
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return row[0] if row else ""
        except sqlite3.Error:
            return ""
        finally:
            conn.close()

    def commit(self) -> str:
        """The commit the index was built at ('' when unknown)."""
        return self.meta("commit")


def entity_path(entity_id: str) -> str:
    """The file part of a code entity id (``path/to/file.py::Class.method`` → ``path/to/file.py``)."""
    return entity_id.split("::", 1)[0]
