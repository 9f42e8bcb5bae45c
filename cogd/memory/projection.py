"""The memory projection: ``.cogd/index/memory.db``, rebuilt from the record files at any time.

Tables: ``memories`` (one row per record, status and text as last accepted by
the lattice), ``memory_fts`` (FTS5 over title and body, rowid = memories.rowid),
``memory_vectors`` (unit float32 embeddings as blobs, with the model id),
``files`` (the stat of every record file seen, and the problem found in it, if
any). Kept apart from ``index.db`` so a long code reindex never holds up a
memory write. ``secure_delete`` is on and FTS segments are merged after an
erasure, so purged text does not survive in free pages or stale segments.

Thread-safe: one connection behind a lock (memory sets are small).
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cogd import safepath
from cogd.memory.record import Anchor, Record

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL,              -- <private> spans already stripped
    path TEXT NOT NULL,              -- relative to .cogd/memory/
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    source TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    valid_from_commit TEXT NOT NULL DEFAULT '',
    anchors TEXT NOT NULL DEFAULT '[]',   -- JSON [{entity, hash}]
    supersedes TEXT NOT NULL DEFAULT '',
    superseded_by TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    content_hash TEXT NOT NULL           -- normalised content (see normalise.py)
);
CREATE INDEX IF NOT EXISTS memories_type_status ON memories(type, status);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
    title, body, tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS memory_vectors (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    vector BLOB NOT NULL             -- float32, L2 norm 1
);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,           -- relative to .cogd/memory/
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    id TEXT NOT NULL DEFAULT '',     -- the record id the file held when last read ('' if unreadable)
    problem TEXT                     -- JSON of the last problem found in it, NULL when fine
);
"""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
TITLE_WEIGHT, BODY_WEIGHT = 4.0, 1.0


@dataclass
class MemoryHit:
    """One memory found by :meth:`Projection.search` (or listed by ``listing``).

    ``updated_at``: unix seconds; ``anchors``: ``[{"entity", "hash"}]``;
    ``score``: higher is better (fused BM25 and cosine ranks; 0.0 in listings).
    """

    id: str
    type: str
    title: str
    body: str
    status: str
    updated_at: float
    anchors: list[dict] = field(default_factory=list)
    score: float = 0.0
    created_at: float = 0.0
    source: str = ""
    tags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def fts_query(text: str, max_terms: int = 32) -> str:
    """A safe FTS5 MATCH string: the distinct words of ``text`` ORed, each quoted ('' if none)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) > 1:
            seen.setdefault(word, None)
        if len(seen) >= max_terms:
            break
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in seen)


class Projection:
    """``memory.db``. Methods raise sqlite3.Error on a broken database."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None
        self.open()

    def open(self) -> None:
        """(Re)open ``memory.db``. A damaged file (it fails to open or ``PRAGMA quick_check``) is
        moved aside as ``memory.db.corrupt-<time>`` and a fresh one opened: the next sync
        rebuilds it from the record files (:func:`cogd.recovery.open_projection`)."""
        from cogd.recovery import open_projection

        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._conn = open_projection(self.path, self._connect, "rebuilt from the memory files")
            self._inode = self.path.stat().st_ino

    def _connect(self) -> sqlite3.Connection:
        safepath.prepare_db(self.path)  # folders 0700, files 0600, no links (raises UnsafePath)
        conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA synchronous=NORMAL")  # a projection: a power cut costs a rebuild, not data
            conn.executescript(SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def replaced(self) -> bool:
        """True when the database file was deleted or replaced since it was opened (then call open())."""
        try:
            return self.path.stat().st_ino != self._inode
        except FileNotFoundError:
            return True

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None, "projection closed"
        return self._conn

    # ---- writes -----------------------------------------------------------------
    def upsert(self, record: Record, body: str, content_hash: str) -> None:
        """Store ``record``'s accepted state; ``body`` is the projected text (private spans stripped)."""
        values = (
            record.id, record.type, record.title, record.status, body, record.relpath(), record.created_at,
            record.updated_at, record.source, record.session_id, record.valid_from_commit,
            json.dumps([a.as_dict() for a in record.anchors]), record.supersedes, record.superseded_by,
            json.dumps(record.tags), content_hash,
        )
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT rowid FROM memories WHERE id = ?", (record.id,)).fetchone()
                if row is None:
                    cur = conn.execute(
                        "INSERT INTO memories(id, type, title, status, body, path, created_at, updated_at, source, "
                        "session_id, valid_from_commit, anchors, supersedes, superseded_by, tags, content_hash) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values)
                    rowid = cur.lastrowid
                else:
                    rowid = row[0]
                    conn.execute(
                        "UPDATE memories SET type=?, title=?, status=?, body=?, path=?, created_at=?, updated_at=?, "
                        "source=?, session_id=?, valid_from_commit=?, anchors=?, supersedes=?, superseded_by=?, "
                        "tags=?, content_hash=? WHERE rowid = ?", values[1:] + (rowid,))
                    conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (rowid,))
                if record.status != "pruned":
                    conn.execute("INSERT INTO memory_fts(rowid, title, body) VALUES (?,?,?)",
                                 (rowid, record.title, body))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def delete(self, entity_id: str, *, erase: bool = False) -> None:
        """Remove a memory's rows, FTS entry and vector. ``erase``: also merge FTS segments and
        checkpoint the WAL so the text is gone from the file, not only from the tables."""
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT rowid FROM memories WHERE id = ?", (entity_id,)).fetchone()
                if row is not None:
                    conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (row[0],))
                    conn.execute("DELETE FROM memories WHERE rowid = ?", (row[0],))
                conn.execute("DELETE FROM memory_vectors WHERE id = ?", (entity_id,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if erase:
                conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def merge_text(self) -> None:
        """Merge the FTS segments and checkpoint the WAL, so that text replaced in place (a secret
        masked in a record already projected, the body of a record pruned by consolidation) is gone
        from the file, not only from the tables."""
        with self._lock:
            self.conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def set_vector(self, entity_id: str, model: str, vector: np.ndarray) -> None:
        with self._lock:
            self.conn.execute("INSERT OR REPLACE INTO memory_vectors(id, model, vector) VALUES (?,?,?)",
                              (entity_id, model, np.asarray(vector, dtype=np.float32).tobytes()))

    def drop_vector(self, entity_id: str) -> None:
        with self._lock:
            self.conn.execute("DELETE FROM memory_vectors WHERE id = ?", (entity_id,))

    def set_file(self, relpath: str, mtime_ns: int, size: int, entity_id: str, problem: dict | None) -> None:
        with self._lock:
            self.conn.execute(
                "INSERT OR REPLACE INTO files(path, mtime_ns, size, id, problem) VALUES (?,?,?,?,?)",
                (relpath, mtime_ns, size, entity_id, json.dumps(problem) if problem else None))

    def drop_file(self, relpath: str) -> None:
        with self._lock:
            self.conn.execute("DELETE FROM files WHERE path = ?", (relpath,))

    # ---- reads ------------------------------------------------------------------
    def files(self) -> dict[str, sqlite3.Row]:
        with self._lock:
            return {r["path"]: r for r in self.conn.execute("SELECT * FROM files")}

    def problems(self) -> list[dict]:
        """Every file's current problem (``path`` plus the stored problem fields), by path."""
        with self._lock:
            rows = self.conn.execute("SELECT path, problem FROM files WHERE problem IS NOT NULL ORDER BY path")
            return [{"path": r["path"], **json.loads(r["problem"])} for r in rows]

    def row(self, entity_id: str) -> sqlite3.Row | None:
        with self._lock:
            return self.conn.execute("SELECT * FROM memories WHERE id = ?", (entity_id,)).fetchone()

    def rows(self, *, type: str | None = None, status: str | tuple | list | None = None,
             limit: int | None = None) -> list[sqlite3.Row]:
        """Memories, newest ``updated_at`` first, filtered by type and status (one or several)."""
        where, args = [], []
        if type:
            where.append("type = ?")
            args.append(type)
        if status:
            statuses = (status,) if isinstance(status, str) else tuple(status)
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        sql = "SELECT * FROM memories" + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY updated_at DESC, id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            return self.conn.execute(sql, args).fetchall()

    def counts(self) -> dict[str, dict[str, int]]:
        """``{type: {status: n}}``."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for r in self.conn.execute("SELECT type, status, count(*) AS n FROM memories GROUP BY type, status"):
                out.setdefault(r["type"], {})[r["status"]] = r["n"]
        return out

    def vectors(self, ids: list[str] | None = None, model: str | None = None) -> dict[str, np.ndarray]:
        """Stored vectors by id (only ``model``'s when given)."""
        sql, args = "SELECT id, model, vector FROM memory_vectors", []
        if model:
            sql += " WHERE model = ?"
            args.append(model)
        with self._lock:
            rows = self.conn.execute(sql, args).fetchall()
        wanted = set(ids) if ids is not None else None
        return {r["id"]: np.frombuffer(r["vector"], dtype=np.float32)
                for r in rows if wanted is None or r["id"] in wanted}

    def commonest_vector_model(self) -> str | None:
        """The model id most stored vectors were made by (a tie: whichever SQLite groups first); None
        when no vector is stored."""
        with self._lock:
            row = self.conn.execute(
                "SELECT model, count(*) AS n FROM memory_vectors GROUP BY model ORDER BY n DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def missing_vectors(self, model: str, limit: int = 32) -> list[sqlite3.Row]:
        """Non-pruned memories with no vector of ``model``."""
        with self._lock:
            return self.conn.execute(
                "SELECT m.* FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id AND v.model = ? "
                "WHERE v.id IS NULL AND m.status != 'pruned' LIMIT ?", (model, limit)).fetchall()

    def bm25(self, query: str, statuses: tuple[str, ...], limit: int) -> list[tuple[str, float]]:
        """``[(id, score)]`` by BM25 over title (weight 4) and body, best first; score higher is better."""
        match = fts_query(query)
        if not match or not statuses:
            return []
        marks = ",".join("?" * len(statuses))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT m.id, -bm25(memory_fts, {TITLE_WEIGHT}, {BODY_WEIGHT}) AS score FROM memory_fts "
                f"JOIN memories m ON m.rowid = memory_fts.rowid WHERE memory_fts MATCH ? AND m.status IN ({marks}) "
                f"ORDER BY bm25(memory_fts, {TITLE_WEIGHT}, {BODY_WEIGHT}) LIMIT ?",
                (match, *statuses, limit)).fetchall()
        return [(r[0], float(r[1])) for r in rows]


def row_to_hit(row: sqlite3.Row, score: float = 0.0) -> MemoryHit:
    return MemoryHit(
        id=row["id"], type=row["type"], title=row["title"], body=row["body"], status=row["status"],
        updated_at=row["updated_at"], anchors=json.loads(row["anchors"] or "[]"), score=score,
        created_at=row["created_at"], source=row["source"], tags=json.loads(row["tags"] or "[]"),
    )


def row_anchors(row: sqlite3.Row) -> list[Anchor]:
    return [Anchor(a["entity"], a.get("hash", "")) for a in json.loads(row["anchors"] or "[]")]


# ---- reads over any connection (the doctor's read-only one) ---------------------------------
# The Projection's own reads go through its locked connection; these take a connection the
# caller opened (read-only, without -wal/-shm), so nothing outside this module writes SQL on
# memory.db's tables.

def memory_statuses(conn: sqlite3.Connection, statuses: tuple[str, ...] | None = None) -> dict[str, str]:
    """``{memory id: status}`` of every memory (of those in ``statuses`` when given), by id."""
    sql, args = "SELECT id, status FROM memories", ()
    if statuses:
        sql, args = sql + f" WHERE status IN ({','.join('?' * len(statuses))})", tuple(statuses)
    return {r[0]: r[1] for r in conn.execute(sql + " ORDER BY id", args)}


def anchored_memories(conn: sqlite3.Connection, statuses: tuple[str, ...]) -> list[tuple[str, str, list[dict]]]:
    """``(id, status, anchors)`` of the memories in ``statuses`` that have anchors, by id.

    ``anchors``: the stored JSON list of anchor objects (``{"entity", "path", …}``), parsed.
    """
    rows = conn.execute(
        f"SELECT id, status, anchors FROM memories WHERE status IN ({','.join('?' * len(statuses))}) "
        "AND anchors NOT IN ('', '[]') ORDER BY id", tuple(statuses))
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def file_problems(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """``(record file path, problem JSON text)`` of the files the sync recorded a problem for, by path."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT path, problem FROM files WHERE problem IS NOT NULL ORDER BY path")]

