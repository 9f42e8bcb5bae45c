"""The memory ledger in ``.cogd/state.db``: the append-only ``events`` table and ``tombstones``.

``events``: one row per mutation of a memory — actor, time, entity id, action,
old and new status, the pre-image of the text (title and body before the
change; NULL for a creation), and a JSON ``detail``. No code path updates or
deletes a row except erasure (:meth:`MemoryLedger.redact`), which replaces the
text with its hash and sets ``redacted``; SQLite triggers refuse anything else,
so a bug cannot quietly rewrite history.

``tombstones``: the normalised-content hash of every rejected or pruned claim,
with the record's id, the date and the reason; consulted on every write.

``intents``: the write-ahead record of one memory operation in flight (see
:class:`Intent` and docs/architecture.md, "Crash recovery of memory writes").
An operation first records what it will do — every file's pre- and post-image
hash, the post-image text, and the ledger rows it will append — then writes the
files, then appends its events *and* marks the intent ``logged`` in one SQLite
transaction, then updates the projection and deletes the intent. A process
killed anywhere in between leaves an intent that the next sync completes
(:meth:`cogd.memory.api.MemoryStore.recover`), so the files, the events and the
projection always agree again and no half-done write looks like a hand edit.

Thread-safe: one connection behind a lock (the daemon's request threads and
its housekeeping share it). ``secure_delete`` is on, so redacted text does not
linger in free pages.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cogd import safepath
from cogd.rpc import control
from cogd.memory.normalise import redaction_hash
from cogd.secrets import mask as mask_secrets

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,                 -- unix seconds
    actor TEXT NOT NULL,              -- agent | human | daemon | sync | consolidation | import
    entity_id TEXT NOT NULL,
    action TEXT NOT NULL,             -- create | edit | activate | stale | reject | supersede | prune |
                                      -- reactivate | verify | illegal_transition | refused | file_removed | purge |
                                      -- secret_masked (a record file rewritten with its secrets masked)
    old_status TEXT,
    new_status TEXT,
    pre_image TEXT,                   -- the text before the change; a sha256 after erasure
    detail TEXT NOT NULL DEFAULT '{}',-- JSON: reason, path, anchors, warnings …
    redacted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS events_entity ON events(entity_id, id);
CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
WHEN NEW.redacted != 1 OR NEW.id != OLD.id OR NEW.at != OLD.at OR NEW.actor != OLD.actor
  OR NEW.entity_id != OLD.entity_id OR NEW.action != OLD.action
  OR NEW.old_status IS NOT OLD.old_status OR NEW.new_status IS NOT OLD.new_status
BEGIN SELECT RAISE(ABORT, 'events are append-only (only erasure may redact their text)'); END;
CREATE TABLE IF NOT EXISTS intents (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,                 -- unix seconds
    op TEXT NOT NULL,                 -- record | transition | supersede | merge | promote | ... (fault points use it)
    actor TEXT NOT NULL,
    owner TEXT NOT NULL,              -- pid:start-time of the process that opened it
    state TEXT NOT NULL DEFAULT 'open',  -- open: files may be half written | logged: events are in, projection may lag
    plan TEXT NOT NULL                -- JSON: {"files": [...], "ops": [...], "erase": [...]}
);
CREATE TABLE IF NOT EXISTS tombstones (
    hash TEXT PRIMARY KEY,            -- sha256 of the normalised content
    entity_id TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
"""

TEXT_DETAIL_KEYS = ("reason", "title")  # detail fields that may carry a memory's words: redacted too


@dataclass
class Tombstone:
    hash: str
    entity_id: str
    at: float
    reason: str

    def as_dict(self) -> dict:
        return {"id": self.entity_id, "rejected_at": self.at, "reason": self.reason}


def _process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``); "" elsewhere or
    when there is no such process. With the pid it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: count fields after the last ")"
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def process_token(pid: int | None = None) -> str:
    """``"<pid>:<start time>"`` of this (or another) process: who owns an intent."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_process_start(pid)}"


def owner_alive(token: str) -> bool:
    """Whether the process that wrote ``token`` (:func:`process_token`) still runs. Without ``/proc``
    only the pid is compared (a reused pid then looks alive: the intent waits for that process)."""
    pid_text, _, start = token.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if start:
        return _process_start(pid) == start
    return control.alive(pid)


def event_op(actor: str, entity_id: str, action: str, old: str | None, new: str | None,
             pre_image: str | None = None, detail: dict | None = None) -> list:
    """One ``["event", {...}]`` op for an intent (:class:`Intent`, ``plan["ops"]``), stamped now.

    The keys are :meth:`MemoryLedger.append`'s arguments; ``at`` is unix seconds when the op is
    built, so a completion after a crash keeps the time of the operation, not of the recovery.
    """
    return ["event", {"actor": actor, "entity_id": entity_id, "action": action, "old_status": old,
                      "new_status": new, "pre_image": pre_image, "detail": detail or {}, "at": time.time()}]


def tombstone_op(content_hash: str, entity_id: str, reason: str, at: float) -> list:
    """One ``["tombstone", {...}]`` op for an intent: :meth:`MemoryLedger.add_tombstone`'s arguments
    (``content_hash``: the normalised-content hash, ``at``: unix seconds)."""
    return ["tombstone", {"content_hash": content_hash, "entity_id": entity_id, "reason": reason, "at": at}]


def pre_image(row) -> str | None:
    """The ``pre_image`` an event stores for a memory's projection row (``title``, ``body``): the
    title, then a blank line and the body when there is one; None for no row (a creation).

    Masked: a row projected before the secret scanner knew a key family may hold one in clear.
    """
    if row is None:
        return None
    return mask_secrets(f"{row['title']}\n\n{row['body']}" if row["body"] else row["title"])


@dataclass
class Intent:
    """One memory operation in flight (a row of ``intents``).

    ``plan["files"]``: ``[{"path": relpath under .cogd/memory, "pre": sha256 hex of the file's bytes
    before (None: no file), "post": sha256 after (None: the file is deleted), "text": the post-image
    (None for a deletion), "project": re-read it into the projection, "text_changed": re-embed it}]``.
    ``plan["ops"]``: the ledger rows, applied in order in one transaction by :meth:`MemoryLedger.log_intent`:
    ``["event", {append() keyword arguments}]``, ``["tombstone", {add_tombstone() keyword arguments}]``,
    ``["redact", entity_id]``, ``["redact_reasons", entity_id]``. ``plan["erase"]``: entity ids whose
    projection rows are erased (a purge).
    """

    id: int
    at: float
    op: str
    actor: str
    owner: str
    state: str
    plan: dict = field(default_factory=dict)


class MemoryLedger:
    """``events`` and ``tombstones`` in ``state.db``. Raises sqlite3.Error on a broken database."""

    def __init__(self, path: Path):
        safepath.prepare_db(path)  # folders 0700, files 0600, no links (raises UnsafePath)
        self._conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.executescript(SCHEMA)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _transaction(self):
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back on any exception)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # ---- intents (write-ahead records of memory operations) ---------------------------
    def open_intent(self, op: str, actor: str, plan: dict) -> int:
        """Record an operation about to write files; returns the intent id. Durable when it returns
        (WAL, synchronous FULL). ``plan``: see :class:`Intent`."""
        with self._lock:
            cur = self._conn.execute(
                "INSERT INTO intents(at, op, actor, owner, state, plan) VALUES (?,?,?,?, 'open', ?)",
                (time.time(), op, actor, process_token(), json.dumps(plan, ensure_ascii=False, sort_keys=True)))
            return int(cur.lastrowid)

    def log_intent(self, intent_id: int, ops: list, *, recovered: bool = False) -> list:
        """Apply an intent's ledger ``ops`` and mark it ``logged``, all in one transaction.

        ``recovered``: the ops are applied by crash recovery; every event's detail gets
        ``"recovered": true`` (so the log says the write was completed after a restart).
        Returns one result per op (an event id, a redacted-row count, or None).
        Raises sqlite3.Error (nothing applied) and ValueError on an unknown op.
        """
        results: list = []
        with self._transaction():
            for kind, args in ops:
                if kind == "event":
                    args = dict(args)
                    if recovered:
                        args["detail"] = {**(args.get("detail") or {}), "recovered": True}
                    results.append(self.append(**args))
                elif kind == "tombstone":
                    self.add_tombstone(**args)
                    results.append(None)
                elif kind == "redact":
                    results.append(self._redact_rows(args))
                elif kind == "redact_reasons":
                    self.redact_tombstone_reasons(args)
                    results.append(None)
                else:
                    raise ValueError(f"unknown intent op {kind!r}")
            self._conn.execute("UPDATE intents SET state = 'logged' WHERE id = ?", (intent_id,))
        return results

    def close_intent(self, intent_id: int) -> None:
        """The operation is complete (files, events and projection agree): forget the intent."""
        with self._lock:
            self._conn.execute("DELETE FROM intents WHERE id = ?", (intent_id,))

    def intents(self) -> list[Intent]:
        """Every intent not yet closed, oldest first."""
        with self._lock:
            rows = self._conn.execute("SELECT * FROM intents ORDER BY id").fetchall()
        return [Intent(r["id"], r["at"], r["op"], r["actor"], r["owner"], r["state"], json.loads(r["plan"]))
                for r in rows]

    def has_intents(self) -> bool:
        """Whether any intent is open (one indexed lookup: the sync asks this every second)."""
        with self._lock:
            return self._conn.execute("SELECT 1 FROM intents LIMIT 1").fetchone() is not None

    def unredacted(self, entity_id: str) -> int:
        """How many of ``entity_id``'s events still hold their text (what :meth:`redact` would redact)."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM events WHERE entity_id = ? AND redacted = 0",
                                          (entity_id,)).fetchone()[0])

    # ---- events -----------------------------------------------------------------
    def append(self, actor: str, entity_id: str, action: str, old_status: str | None, new_status: str | None,
               pre_image: str | None = None, detail: dict | None = None, at: float | None = None) -> int:
        """Append one event; returns its id. ``detail`` must be JSON-serialisable."""
        with self._lock:
            cur = self._conn.execute(
                "INSERT INTO events(at, actor, entity_id, action, old_status, new_status, pre_image, detail) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (time.time() if at is None else at, actor, entity_id, action, old_status, new_status, pre_image,
                 json.dumps(detail or {}, ensure_ascii=False, sort_keys=True)),
            )
            return int(cur.lastrowid)

    def events(self, entity_id: str | None = None, limit: int | None = None, after_id: int = 0) -> list[dict]:
        """Events oldest first (``limit``: the newest ``limit`` of them), optionally for one entity."""
        where, args = ["id > ?"], [after_id]
        if entity_id:
            where.append("entity_id = ?")
            args.append(entity_id)
        sql = f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        out = []
        for row in reversed(rows):
            item = dict(row)
            item["detail"] = json.loads(item["detail"] or "{}")
            item["redacted"] = bool(item["redacted"])
            out.append(item)
        return out

    def last_status(self, entity_id: str) -> str | None:
        """The status the lattice last accepted for ``entity_id`` (None when it never existed here).

        ``purged`` after an erasure. Refused attempts (``illegal_transition``,
        ``refused``) do not count.
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT new_status FROM events WHERE entity_id = ? AND action NOT IN "
                "('illegal_transition', 'refused') AND new_status IS NOT NULL ORDER BY id DESC LIMIT 1",
                (entity_id,)).fetchone()
        return row[0] if row else None

    def redact(self, entity_id: str) -> int:
        """Erasure: replace every text of ``entity_id``'s events by its hash. Returns rows redacted."""
        with self._transaction():
            return self._redact_rows(entity_id)

    def _redact_rows(self, entity_id: str) -> int:
        """:meth:`redact` inside the caller's transaction."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, pre_image, detail FROM events WHERE entity_id = ? AND redacted = 0",
                (entity_id,)).fetchall()
            for row in rows:
                detail = json.loads(row["detail"] or "{}")
                for key in TEXT_DETAIL_KEYS:
                    if isinstance(detail.get(key), str) and detail[key]:
                        detail[key] = redaction_hash(detail[key])
                pre = redaction_hash(row["pre_image"]) if row["pre_image"] else row["pre_image"]
                self._conn.execute("UPDATE events SET pre_image = ?, detail = ?, redacted = 1 WHERE id = ?",
                                   (pre, json.dumps(detail, ensure_ascii=False, sort_keys=True), row["id"]))
        return len(rows)

    def checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate it (after an erasure: no old page keeps the text)."""
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # ---- tombstones -------------------------------------------------------------
    def add_tombstone(self, content_hash: str, entity_id: str, reason: str, at: float | None = None) -> None:
        """Keep ``content_hash`` as a rejected claim (the first tombstone of a hash wins)."""
        with self._lock:
            self._conn.execute("INSERT OR IGNORE INTO tombstones(hash, entity_id, at, reason) VALUES (?,?,?,?)",
                               (content_hash, entity_id, time.time() if at is None else at, reason))

    def tombstone(self, content_hash: str) -> Tombstone | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM tombstones WHERE hash = ?", (content_hash,)).fetchone()
        return Tombstone(row["hash"], row["entity_id"], row["at"], row["reason"]) if row else None

    def tombstones_of(self, entity_id: str) -> list[Tombstone]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM tombstones WHERE entity_id = ?", (entity_id,)).fetchall()
        return [Tombstone(r["hash"], r["entity_id"], r["at"], r["reason"]) for r in rows]

    def redact_tombstone_reasons(self, entity_id: str) -> None:
        """Erasure: a tombstone keeps its hash, id and date; the free-text reason becomes a hash."""
        with self._lock:
            for row in self._conn.execute("SELECT hash, reason FROM tombstones WHERE entity_id = ?",
                                          (entity_id,)).fetchall():
                if row["reason"] and not row["reason"].startswith("sha256:"):
                    self._conn.execute("UPDATE tombstones SET reason = ? WHERE hash = ?",
                                       (redaction_hash(row["reason"]), row["hash"]))


def open_intents(conn: sqlite3.Connection) -> list[tuple[int, str, str, float, str]]:
    """``(id, op, state, at, plan JSON text)`` of the intents in ``state.db``, oldest first, over a
    connection the caller opened (the doctor's read-only one); ``[]`` when the ledger has no
    ``intents`` table yet (a ledger made before memory was first written)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'intents'").fetchone() is None:
        return []
    return [tuple(r) for r in conn.execute("SELECT id, op, state, at, plan FROM intents ORDER BY id")]

