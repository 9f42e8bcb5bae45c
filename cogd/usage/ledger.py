"""The local ledger in ``.cogd/state.db``: deliveries, their items, tool uses, sessions.

A *delivery* is one context pack handed to an agent; each *delivery item* is
one entity in it with rank, score and outcome (``pending`` until hit/miss
accounting resolves it). Tool uses are stored with the files and line ranges
they touched — the raw material for hits. The ledger is not a projection: it
cannot be rebuilt from the work tree, so nothing that rebuilds the index
touches it.

Thread-safe: one connection guarded by a lock, because ledger writes are
small and must not queue behind the index writer (separate database).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from cogd.usage.touches import Touch

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    event TEXT NOT NULL,            -- session_start | prompt
    source TEXT NOT NULL DEFAULT '',-- SessionStart source (startup, resume, clear, compact)
    created_at REAL NOT NULL,       -- unix seconds
    query TEXT NOT NULL DEFAULT '', -- the prompt's head (at most 2,000 characters)
    size_chars INTEGER NOT NULL,
    item_count INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_session ON deliveries(session_id, created_at);
CREATE TABLE IF NOT EXISTS delivery_items (
    delivery_id INTEGER NOT NULL REFERENCES deliveries(id),
    rank INTEGER NOT NULL,
    entity_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    score REAL NOT NULL,
    chars INTEGER NOT NULL,
    pointer INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT 'pending',  -- pending | hit | miss
    PRIMARY KEY (delivery_id, rank)
);
CREATE INDEX IF NOT EXISTS delivery_items_entity ON delivery_items(entity_id);
CREATE TABLE IF NOT EXISTS tool_uses (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    tool_use_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    touches TEXT NOT NULL           -- JSON list of Touch dicts
);
CREATE INDEX IF NOT EXISTS tool_uses_session ON tool_uses(session_id, created_at);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    started_at REAL,
    ended_at REAL,
    end_reason TEXT
);
"""

QUERY_KEEP_CHARS = 2000


class Ledger:
    """Append-mostly access to ``state.db``. Raises sqlite3.Error on a broken database."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.executescript(SCHEMA)
        self._conn.commit()
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def record_delivery(
        self, session_id: str, event: str, source: str, query: str, text: str, items: list[dict],
        now: float | None = None,
    ) -> int:
        """Store one delivered pack; ``items`` are ``PackItem.as_dict()`` shapes. Returns the delivery id."""
        now = time.time() if now is None else now
        with self._lock, self._conn:
            cur = self._conn.execute(
                "INSERT INTO deliveries(session_id, event, source, created_at, query, size_chars, item_count) "
                "VALUES (?,?,?,?,?,?,?)",
                (session_id, event, source, now, query[:QUERY_KEEP_CHARS], len(text), len(items)),
            )
            delivery_id = int(cur.lastrowid)
            self._conn.executemany(
                "INSERT INTO delivery_items(delivery_id, rank, entity_id, kind, path, start_line, end_line, "
                "score, chars, pointer) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (delivery_id, it["rank"], it["entity_id"], it["kind"], it["path"], it["start_line"],
                     it["end_line"], it["score"], it["chars"], int(it["pointer"]))
                    for it in items
                ],
            )
            self._conn.execute(
                "INSERT INTO sessions(session_id, started_at) VALUES (?, ?) ON CONFLICT(session_id) DO NOTHING",
                (session_id, now),
            )
        return delivery_id

    def retract_delivery(self, delivery_id: int) -> bool:
        """Remove a delivery and its items: its pack never reached the agent (the hook left first).

        Returns whether there was such a delivery. The session row stays (the session did happen).
        """
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM delivery_items WHERE delivery_id = ?", (delivery_id,))
            cur = self._conn.execute("DELETE FROM deliveries WHERE id = ?", (delivery_id,))
        return cur.rowcount == 1

    def record_tool_use(
        self, session_id: str, tool_name: str, tool_use_id: str, touches: list[Touch], now: float | None = None
    ) -> int:
        """Store one tool use with its touches. Returns the row id."""
        now = time.time() if now is None else now
        with self._lock, self._conn:
            cur = self._conn.execute(
                "INSERT INTO tool_uses(session_id, tool_name, tool_use_id, created_at, touches) VALUES (?,?,?,?,?)",
                (session_id, tool_name, tool_use_id, now, json.dumps([t.as_dict() for t in touches])),
            )
        return int(cur.lastrowid)

    def end_session(self, session_id: str, reason: str, now: float | None = None) -> None:
        """Mark a session ended (idempotent: the first end wins)."""
        now = time.time() if now is None else now
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT INTO sessions(session_id, started_at, ended_at, end_reason) VALUES (?,?,?,?) "
                "ON CONFLICT(session_id) DO UPDATE SET ended_at = coalesce(ended_at, excluded.ended_at), "
                "end_reason = coalesce(end_reason, excluded.end_reason)",
                (session_id, now, now, reason),
            )

    def deliveries(self, session_id: str | None = None, limit: int = 100) -> list[dict]:
        """Latest deliveries (newest first) with their items."""
        with self._lock:
            if session_id is None:
                rows = self._conn.execute("SELECT * FROM deliveries ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT * FROM deliveries WHERE session_id = ? ORDER BY id DESC LIMIT ?", (session_id, limit)
                ).fetchall()
            result = []
            for row in rows:
                items = self._conn.execute(
                    "SELECT * FROM delivery_items WHERE delivery_id = ? ORDER BY rank", (row["id"],)
                ).fetchall()
                result.append({**dict(row), "items": [dict(i) for i in items]})
        return result

    def tool_uses(self, session_id: str | None = None, limit: int = 100) -> list[dict]:
        """Latest tool uses (newest first), ``touches`` decoded."""
        with self._lock:
            sql = "SELECT * FROM tool_uses" + (" WHERE session_id = ?" if session_id else "") + " ORDER BY id DESC LIMIT ?"
            args = (session_id, limit) if session_id else (limit,)
            rows = self._conn.execute(sql, args).fetchall()
        return [{**dict(r), "touches": json.loads(r["touches"])} for r in rows]

    def totals(self) -> dict[str, int]:
        """Counts: ``deliveries``, ``delivery_items``, ``tool_uses``, ``sessions``, ``sessions_ended``."""
        with self._lock:
            one = lambda sql: self._conn.execute(sql).fetchone()[0]  # noqa: E731
            return {
                "deliveries": one("SELECT count(*) FROM deliveries"),
                "delivery_items": one("SELECT count(*) FROM delivery_items"),
                "tool_uses": one("SELECT count(*) FROM tool_uses"),
                "sessions": one("SELECT count(*) FROM sessions"),
                "sessions_ended": one("SELECT count(*) FROM sessions WHERE ended_at IS NOT NULL"),
            }

    def entity_usage(self, entity_id: str) -> dict[str, int]:
        """How often ``entity_id`` was delivered, and its outcomes so far."""
        with self._lock:
            row = self._conn.execute(
                "SELECT count(*), sum(outcome = 'hit'), sum(outcome = 'miss') FROM delivery_items WHERE entity_id = ?",
                (entity_id,),
            ).fetchone()
        return {"retrieval_count": row[0] or 0, "used_count": row[1] or 0, "ignored_count": row[2] or 0}
