"""The local ledger in ``.cogd/state.db``: deliveries, their items, outcomes, tool uses, sessions, utility.

A *delivery* is one context pack handed to an agent; each *delivery item* is
one entity in it with rank, score and outcome: ``pending`` until hit/miss
accounting resolves it (:mod:`cogd.usage.outcomes` matches touches to items).

* **hit**: the agent touched the item (by the session's tool uses) while its
  delivery was open; the hit keeps the strongest evidence weight seen.
* **miss**: still pending when the delivery closes; it records a failure
  weighted by the item's rank (:func:`cogd.usage.outcomes.miss_weight`). A prompt pack closes at
  the session's next prompt pack; a session-start pack stays in context for
  the whole session and closes at the session's end or when the context is
  replaced (a ``clear``/``compact``/``startup`` session start). The first
  rule closed every pack at the next delivery; that would count the
  overview as ignored before the agent ever acted on it.

Per-entity sums (``entity_utility``: retrieval, used and ignored counts, the
weighted successes and failures of :mod:`cogd.usage.utility`) are updated in
the same transaction as the outcomes, so they never disagree with the items.

Text a client sent (the prompt head, session ids, tool names and ids, touched paths, end reasons,
compaction triggers) is stored with secrets masked (:func:`cogd.secrets.mask`): query associations
copy the masked prompt head, so they never see a secret either.

The ledger is not a projection: it cannot be rebuilt from the work tree, so
nothing that rebuilds the index touches it, and old databases are migrated
in place (columns added), never dropped. Thread-safe: one connection guarded
by a lock, because ledger writes are small and must not queue behind the
index writer (separate database).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from cogd import safepath
from cogd.inlist import MAX_PARAMS, chunked, marks
from cogd.secrets import mask
from cogd.usage.outcomes import PendingItem, match_hits, miss_weight, strength
from cogd.usage.touches import Touch
from cogd.usage.utility import UtilityModel

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    event TEXT NOT NULL,            -- session_start | prompt | compact_recovery
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
CREATE TABLE IF NOT EXISTS entity_utility (
    entity_id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    retrieval_count INTEGER NOT NULL DEFAULT 0,
    used_count INTEGER NOT NULL DEFAULT 0,     -- hits
    ignored_count INTEGER NOT NULL DEFAULT 0,  -- misses
    successes REAL NOT NULL DEFAULT 0,         -- Σ hit weight
    failures REAL NOT NULL DEFAULT 0,          -- Σ (1 − hit weight) + misses
    last_delivered_at REAL,
    last_hit_at REAL
);
CREATE TABLE IF NOT EXISTS working_sets (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    trigger TEXT NOT NULL DEFAULT '',
    entities TEXT NOT NULL           -- JSON list of entity ids, strongest evidence first
);
CREATE INDEX IF NOT EXISTS working_sets_session ON working_sets(session_id, id);
-- Query association: the prompts of the sessions that edited an entity, searchable by BM25,
-- so a later prompt like them finds the code such prompts led to (document expansion by
-- past queries). One row per (entity, prompt delivery).
CREATE VIRTUAL TABLE IF NOT EXISTS associations USING fts5(
    entity_id UNINDEXED, path UNINDEXED, query, tokenize = 'porter unicode61'
);
CREATE TABLE IF NOT EXISTS association_keys (
    entity_id TEXT NOT NULL,
    delivery_id INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (entity_id, delivery_id)
);
"""

# Columns added after the first release: (table, column, declaration).
MIGRATIONS = (
    ("deliveries", "fingerprint", "TEXT NOT NULL DEFAULT ''"),
    ("deliveries", "closed_at", "REAL"),
    ("delivery_items", "hit_weight", "REAL NOT NULL DEFAULT 0"),
    ("delivery_items", "hit_action", "TEXT NOT NULL DEFAULT ''"),
    ("delivery_items", "hit_level", "TEXT NOT NULL DEFAULT ''"),
    ("delivery_items", "resolved_at", "REAL"),
    ("delivery_items", "reason", "TEXT NOT NULL DEFAULT ''"),
    # The agent (cogd.clients) a delivery went to, a tool use or a session came from.
    ("deliveries", "client", "TEXT NOT NULL DEFAULT ''"),
    ("tool_uses", "client", "TEXT NOT NULL DEFAULT ''"),
    ("sessions", "client", "TEXT NOT NULL DEFAULT ''"),
    # The item's ranking signals when it was delivered (JSON, :func:`_signals_json`): what
    # ``--explain`` showed then, kept because the index and the feedback move on.
    ("delivery_items", "signals", "TEXT NOT NULL DEFAULT ''"),
)
# Rows written before the client column existed came from the only client cogd then served.
FIRST_CLIENT = "claude-code"

# Which open deliveries of the session a new delivery closes.
_CLOSES = {
    "prompt": ("prompt", "compact_recovery"),
    "session_start": ("prompt", "session_start", "compact_recovery"),
}
_DEFAULT_WEIGHTS = {"edit": 1.0, "read": 0.0, "search": 0.0}  # as [usage] in cogd.config

QUERY_KEEP_CHARS = 2000
# The prompt is masked before it is cut to QUERY_KEEP_CHARS (a key cut in two is no longer recognised,
# and its first half would be kept); this much past the cut is scanned with it. A longer secret
# straddling the cut (a private key block) is masked to the end of the window by its own rule.
QUERY_SCAN_CHARS = QUERY_KEEP_CHARS + 4096


SIGNALS_MAX_CHARS = 2000  # stored signals of one item, at most (JSON)


# Signals whose text the retrieval builds from the index alone (entity ids, edge kinds), never from
# the prompt: the ledger keeps those ids unmasked in its own columns already, so they skip the
# secret scan (~0.15 ms a string; a pack has ~15 of them, the scan was most of a delivery's CPU).
INDEX_ONLY_SIGNALS = frozenset({"expanded_from"})


def _signals_json(signals: object, masked: dict[str, str] | None = None) -> str:
    """An item's ranking signals as compact JSON for the ledger: numbers rounded to 4 places,
    text masked (:func:`cogd.secrets.mask`: a label may quote the prompt) and cut to 200
    characters, keys to 40; '' when there are none or they do not fit in SIGNALS_MAX_CHARS.

    ``masked``: a memo of masked texts shared by the items of one delivery (each distinct
    label is scanned once); the values of :data:`INDEX_ONLY_SIGNALS` are kept as they are.
    """
    if not isinstance(signals, dict) or not signals:
        return ""
    memo = {} if masked is None else masked
    kept: dict[str, object] = {}
    for key, value in signals.items():
        if isinstance(value, bool) or value is None:
            kept[str(key)[:40]] = value
        elif isinstance(value, (int, float)):
            kept[str(key)[:40]] = round(value, 4) if isinstance(value, float) else value
        elif key in INDEX_ONLY_SIGNALS:
            kept[str(key)[:40]] = str(value)[:200]
        else:
            text = str(value)
            if text not in memo:
                memo[text] = mask(text)[:200]
            kept[str(key)[:40]] = memo[text]
    text = json.dumps(kept, separators=(",", ":"), allow_nan=False, default=str) if kept else ""
    return text if len(text) <= SIGNALS_MAX_CHARS else ""


def _finite(signals: object) -> object:
    """``signals`` without NaN or infinite numbers (JSON has no spelling for them)."""
    if not isinstance(signals, dict):
        return signals
    return {k: v for k, v in signals.items() if not (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))))}


def _item_dict(row: sqlite3.Row) -> dict:
    """A delivery item row as a dict, its stored signals decoded ({} when none were kept)."""
    item = dict(row)
    try:
        item["signals"] = json.loads(item.get("signals") or "{}")
    except ValueError:
        item["signals"] = {}
    return item


def _prompt_head(query: str) -> str:
    """What the ledger keeps of a prompt: its first QUERY_KEEP_CHARS characters, secrets masked."""
    return mask(query[:QUERY_SCAN_CHARS])[:QUERY_KEEP_CHARS]


def _mask_touches(raw: str) -> str:
    """A stored ``tool_uses.touches`` JSON list with each path masked (``raw`` itself when nothing changed)."""
    try:
        touches = json.loads(raw)
        masked = [{**t, "path": mask(t["path"])} if isinstance(t, dict) and isinstance(t.get("path"), str) else t
                  for t in touches]
    except (ValueError, TypeError):
        return mask(raw)
    return raw if masked == touches else json.dumps(masked)


class Ledger:
    """Access to ``state.db``. Raises sqlite3.Error on a broken database.

    ``utility``: the in-memory :class:`UtilityModel` kept in step with the
    ``entity_utility`` table (loaded here, updated after every commit that
    resolves outcomes). ``weights``: hit evidence weights by action class
    (``{"edit", "read", "search"}`` → [0, 1]).
    """

    def __init__(self, path: Path, utility: UtilityModel | None = None, weights: dict[str, float] | None = None,
                 miss_halflife: float = 5.0, pointer_miss_weight: float = 0.5):
        safepath.prepare_db(path)  # folders 0700, files 0600, no links (raises UnsafePath)
        self._conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.executescript(SCHEMA)
        self._migrate()
        self._conn.commit()
        self._mask_stored_text()
        self._lock = threading.Lock()
        self.weights = dict(weights or _DEFAULT_WEIGHTS)
        self.miss_halflife = miss_halflife
        self.pointer_miss_weight = pointer_miss_weight
        self.utility = utility or UtilityModel()
        self.utility.load(self._conn.execute("SELECT entity_id, path, successes, failures FROM entity_utility"))
        self._evidence = self._load_evidence()

    def _load_evidence(self) -> dict[str, set[str]]:
        """Learned source → the sessions that gave it evidence (kept in step by the writers below).

        ``utility``: sessions with a resolved delivery item (a weighted hit or a miss);
        ``association``: sessions whose prompt was linked to an edited definition.
        """
        utility = {r[0] for r in self._conn.execute(
            "SELECT DISTINCT d.session_id FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
            "WHERE i.outcome = 'miss' OR (i.outcome = 'hit' AND i.hit_weight > 0)")}
        association = {r[0] for r in self._conn.execute(
            "SELECT DISTINCT d.session_id FROM association_keys a JOIN deliveries d ON d.id = a.delivery_id")}
        return {"utility": utility, "association": association}

    def evidence_sessions(self) -> dict[str, int]:
        """``{learned source: independent sessions behind it}`` — the ``n`` of :mod:`cogd.evidence`'s shrinkage."""
        with self._lock:
            return {source: len(sessions) for source, sessions in self._evidence.items()}

    def _migrate(self) -> None:
        for table, column, declaration in MIGRATIONS:
            columns = {r[1] for r in self._conn.execute(f"PRAGMA table_info({table})")}
            if column not in columns:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                if column == "client":  # in the same transaction as the column: all rows, or none
                    self._conn.execute(f"UPDATE {table} SET client = ?", (FIRST_CLIENT,))
        self._conn.execute("CREATE INDEX IF NOT EXISTS deliveries_open ON deliveries(session_id) WHERE closed_at IS NULL")

    def _mask_stored_text(self) -> int:
        """Once per database: mask the secrets in client text stored before the ledger masked it.

        Prompt heads, query associations, touched paths, compaction triggers and end reasons are
        rewritten with :func:`cogd.secrets.mask`; ``secure_delete`` (left on: a retracted delivery's
        prompt must not linger either) zeroes the old text's space, the association index is
        optimised (old segments dropped) and the WAL truncated. Marked done in ``meta``
        (``secrets_masked``). Returns how many values changed.
        """
        if self._conn.execute("SELECT 1 FROM meta WHERE key = 'secrets_masked'").fetchone() is not None:
            self._conn.execute("PRAGMA secure_delete=ON")
            return 0
        self._conn.execute("PRAGMA secure_delete=ON")
        changed = 0
        for table, column in (("deliveries", "query"), ("associations", "query"), ("tool_uses", "touches"),
                              ("working_sets", "trigger"), ("sessions", "end_reason")):
            rows = self._conn.execute(f"SELECT rowid, {column} FROM {table} WHERE {column} != ''").fetchall()
            for rowid, value in rows:
                masked = _mask_touches(value) if column == "touches" else mask(value)
                if masked != value:
                    self._conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (masked, rowid))
                    changed += 1
        if changed:
            self._conn.execute("INSERT INTO associations(associations) VALUES ('optimize')")
        self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('secrets_masked', '1')")
        self._conn.commit()
        if changed:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return changed

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- deliveries and outcomes -------------------------------------------
    def record_delivery(
        self, session_id: str, event: str, source: str, query: str, text: str, items: list[dict],
        now: float | None = None, fingerprint: str = "", client: str = "",
    ) -> int:
        """Store one delivered pack; ``items`` are ``PackItem.as_dict()`` shapes. Returns the delivery id.

        ``client``: the agent it went to (a :data:`cogd.clients.CLIENTS` name, ``mcp:NAME`` or
        ``mcp`` through the MCP server (:func:`cogd.mcp_server.client_label`); '' when unknown).

        First closes the session's open deliveries this one replaces (their
        pending items become misses, see the module docstring); ``source``
        ``resume`` closes nothing. ``now`` is unix seconds (default: the clock).
        """
        now = time.time() if now is None else now
        with self._lock, self._conn:
            closes = () if source == "resume" else _CLOSES.get(event, ())
            if closes:
                self._close(session_id, now, closes)
            cur = self._conn.execute(
                "INSERT INTO deliveries(session_id, event, source, created_at, query, size_chars, item_count, "
                "fingerprint, client) VALUES (?,?,?,?,?,?,?,?,?)",
                (mask(session_id), event, mask(source), now, _prompt_head(query), len(text), len(items), fingerprint,
                 mask(client)),
            )
            delivery_id = int(cur.lastrowid)
            masked: dict[str, str] = {}
            rows = [
                (delivery_id, it["rank"], it["entity_id"], it["kind"], it["path"], it["start_line"],
                 it["end_line"], it["score"], it["chars"], int(it["pointer"]), str(it.get("reason", ""))[:500],
                 _signals_json(_finite(it.get("signals")), masked))
                for it in items
            ]
            self._conn.executemany(
                "INSERT INTO delivery_items(delivery_id, rank, entity_id, kind, path, start_line, end_line, "
                "score, chars, pointer, reason, signals) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows,
            )
            self._conn.executemany(
                "INSERT INTO entity_utility(entity_id, path, retrieval_count, last_delivered_at) VALUES (?,?,1,?) "
                "ON CONFLICT(entity_id) DO UPDATE SET retrieval_count = retrieval_count + 1, "
                "path = excluded.path, last_delivered_at = excluded.last_delivered_at",
                [(r[2], r[4], now) for r in rows],
            )
            self._conn.execute(
                "INSERT INTO sessions(session_id, started_at, client) VALUES (?, ?, ?) "
                "ON CONFLICT(session_id) DO NOTHING", (mask(session_id), now, mask(client)),
            )
        return delivery_id

    def _close(self, session_id: str, now: float, events: tuple[str, ...] | None) -> int:
        """Close the session's open deliveries of ``events`` (None = all): pending items → misses.

        Runs inside the caller's transaction and lock. Returns the number of misses.
        """
        sql = "SELECT id FROM deliveries WHERE session_id = ? AND closed_at IS NULL"
        args: list = [session_id]
        if events is not None:
            sql += f" AND event IN ({marks(len(events))})"
            args += list(events)
        ids = [r[0] for r in self._conn.execute(sql, args)]
        if not ids:
            return 0
        missed = []
        for chunk in chunked(ids, MAX_PARAMS - 1):  # one parameter is the time
            holes = marks(len(chunk))
            missed += [
                (entity_id, path, miss_weight(rank, bool(pointer), self.miss_halflife, self.pointer_miss_weight))
                for entity_id, path, rank, pointer in self._conn.execute(
                    f"SELECT entity_id, path, rank, pointer FROM delivery_items WHERE outcome = 'pending' "
                    f"AND delivery_id IN ({holes})", chunk)
            ]
            self._conn.execute(
                f"UPDATE delivery_items SET outcome = 'miss', resolved_at = ? WHERE outcome = 'pending' "
                f"AND delivery_id IN ({holes})", [now, *chunk],
            )
            self._conn.execute(f"UPDATE deliveries SET closed_at = ? WHERE id IN ({holes})", [now, *chunk])
        self._conn.executemany(
            "UPDATE entity_utility SET ignored_count = ignored_count + 1, failures = failures + ? WHERE entity_id = ?",
            [(weight, entity_id) for entity_id, _path, weight in missed],
        )
        for entity_id, path, weight in missed:
            self.utility.add(entity_id, path, 0.0, weight)
        if missed:
            self._evidence["utility"].add(mask(session_id))
        return len(missed)

    def retract_delivery(self, delivery_id: int) -> bool:
        """Remove a delivery and its items: its pack never reached the agent (the hook left first).

        Returns whether there was such a delivery. The session row stays (the
        session did happen); retrieval counts are taken back.
        """
        with self._lock, self._conn:
            ids = [r[0] for r in self._conn.execute(
                "SELECT entity_id FROM delivery_items WHERE delivery_id = ?", (delivery_id,))]
            self._conn.executemany(
                "UPDATE entity_utility SET retrieval_count = max(retrieval_count - 1, 0) WHERE entity_id = ?",
                [(i,) for i in ids],
            )
            self._conn.execute("DELETE FROM delivery_items WHERE delivery_id = ?", (delivery_id,))
            cur = self._conn.execute("DELETE FROM deliveries WHERE id = ?", (delivery_id,))
        return cur.rowcount == 1

    def record_tool_use(
        self, session_id: str, tool_name: str, tool_use_id: str, touches: list[Touch], now: float | None = None,
        client: str = "",
    ) -> int:
        """Store one tool use with its touches and resolve the hits it makes. Returns the row id.

        Hits count only on the session's open deliveries made at or before
        ``now``; an item already hit keeps the strongest evidence (a read, then
        an edit of the same function, ends as an edit).
        """
        return self.record_tool_use_with_hits(session_id, tool_name, tool_use_id, touches, now, client)[0]

    def record_tool_use_with_hits(
        self, session_id: str, tool_name: str, tool_use_id: str, touches: list[Touch], now: float | None = None,
        client: str = "",
    ) -> tuple[int, list[dict]]:
        """:meth:`record_tool_use`, also returning the hits as dicts (delivery_id, rank, entity_id, weight, action, level).

        ``client``: the agent that used the tool ('' when unknown). Hits count on the session's
        deliveries whatever client they went to: a session id belongs to one client.
        """
        now = time.time() if now is None else now
        with self._lock, self._conn:
            cur = self._conn.execute(
                "INSERT INTO tool_uses(session_id, tool_name, tool_use_id, created_at, touches, client) "
                "VALUES (?,?,?,?,?,?)",
                (mask(session_id), mask(tool_name), mask(tool_use_id), now,
                 json.dumps([{**t.as_dict(), "path": mask(t.path)} for t in touches]), mask(client)),
            )
            hits = self._resolve_hits(session_id, touches, now) if touches else []
        return int(cur.lastrowid), hits

    def has_tool_use(self, session_id: str, tool_use_id: str) -> bool:
        """Whether the session already recorded the tool use ``tool_use_id`` (replays of a spool skip it)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM tool_uses WHERE session_id = ? AND tool_use_id = ? LIMIT 1", (session_id, tool_use_id)
            ).fetchone()
        return row is not None

    def _resolve_hits(self, session_id: str, touches: list[Touch], now: float) -> list[dict]:
        rows = []
        for chunk in chunked(sorted({t.path for t in touches}), MAX_PARAMS - 2):  # two are the session and time
            rows += self._conn.execute(
                f"SELECT i.delivery_id, i.rank, i.entity_id, i.kind, i.path, i.start_line, i.end_line, i.outcome, "
                f"i.hit_weight, i.hit_action FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
                f"WHERE d.session_id = ? AND d.closed_at IS NULL AND d.created_at <= ? AND i.outcome != 'miss' "
                f"AND i.path IN ({marks(len(chunk))})", [session_id, now, *chunk],
            ).fetchall()
        if not rows:
            return []
        previous = {(r[0], r[1]): (r[7], r[8], r[9]) for r in rows}
        pending = [PendingItem((r[0], r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]
        paths_by_key = {(r[0], r[1]): r[4] for r in rows}
        result = []
        for hit in match_hits(pending, touches, self.weights):
            outcome, old_weight, old_action = previous[hit.key]
            if outcome == "hit" and strength(hit.action, hit.weight) <= strength(old_action, old_weight):
                continue
            gain = hit.weight - (old_weight if outcome == "hit" else 0.0)
            self._conn.execute(
                "UPDATE delivery_items SET outcome = 'hit', hit_weight = ?, hit_action = ?, hit_level = ?, "
                "resolved_at = ? WHERE delivery_id = ? AND rank = ?",
                (hit.weight, hit.action, hit.level, now, *hit.key),
            )
            if outcome == "hit":  # an upgrade (a read, then an edit) adds the difference
                self._conn.execute(
                    "UPDATE entity_utility SET successes = successes + ? WHERE entity_id = ?", (gain, hit.entity_id))
                self.utility.add(hit.entity_id, paths_by_key[hit.key], gain, 0.0)
            else:
                self._conn.execute(
                    "UPDATE entity_utility SET used_count = used_count + 1, successes = successes + ?, "
                    "last_hit_at = ? WHERE entity_id = ?",
                    (hit.weight, now, hit.entity_id))
                self.utility.add(hit.entity_id, paths_by_key[hit.key], hit.weight, 0.0)
            if hit.weight > 0:
                self._evidence["utility"].add(mask(session_id))
            result.append({"delivery_id": hit.key[0], "rank": hit.key[1], "entity_id": hit.entity_id,
                           "weight": hit.weight, "action": hit.action, "level": hit.level})
        return result

    def end_session(self, session_id: str, reason: str, now: float | None = None, client: str = "") -> int:
        """Mark a session ended (idempotent: the first end wins) and close its deliveries.

        ``client``: the agent that ended it, kept for a session the ledger had not seen.
        Returns how many pending items became misses.
        """
        now = time.time() if now is None else now
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT INTO sessions(session_id, started_at, ended_at, end_reason, client) VALUES (?,?,?,?,?) "
                "ON CONFLICT(session_id) DO UPDATE SET ended_at = coalesce(ended_at, excluded.ended_at), "
                "end_reason = coalesce(end_reason, excluded.end_reason), "
                "client = CASE WHEN client = '' THEN excluded.client ELSE client END",
                (mask(session_id), now, now, mask(reason), mask(client)),
            )
            return self._close(session_id, now, None)

    def open_sessions(self, since: float) -> list[str]:
        """Sessions not ended that received a still-open delivery at or after ``since`` (unix s)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT d.session_id FROM deliveries d LEFT JOIN sessions s ON s.session_id = d.session_id "
                "WHERE d.closed_at IS NULL AND d.created_at >= ? AND s.ended_at IS NULL ORDER BY d.session_id",
                (since,),
            ).fetchall()
        return [r[0] for r in rows]

    def associate(self, session_id: str, entities: list[tuple[str, str]], now: float | None = None) -> int:
        """Associate edited ``(entity_id, path)`` pairs with the session's latest prompt.

        The prompt is the newest ``prompt`` delivery of the session made at or
        before ``now``; without one nothing is stored. Idempotent per (entity,
        delivery). Returns how many new associations were stored.
        """
        now = time.time() if now is None else now
        if not entities:
            return 0
        with self._lock, self._conn:
            row = self._conn.execute(
                "SELECT id, query FROM deliveries WHERE session_id = ? AND event = 'prompt' AND query != '' "
                "AND created_at <= ? ORDER BY created_at DESC, id DESC LIMIT 1", (session_id, now),
            ).fetchone()
            if row is None:
                return 0
            stored = 0
            for entity_id, path in dict.fromkeys(entities):
                cur = self._conn.execute(
                    "INSERT OR IGNORE INTO association_keys(entity_id, delivery_id, created_at) VALUES (?,?,?)",
                    (entity_id, row[0], now))
                if cur.rowcount:
                    self._conn.execute("INSERT INTO associations(entity_id, path, query) VALUES (?,?,?)",
                                       (entity_id, path, row[1]))
                    stored += 1
            if stored:
                self._evidence["association"].add(mask(session_id))
        return stored

    def associated(self, match: str, limit: int = 20) -> list[tuple[str, float]]:
        """Entities whose past prompts match the FTS5 expression ``match``, best first.

        ``(entity_id, score)``: the best BM25 score of the entity's prompts
        (higher is better). [] for an empty expression.
        """
        if not match:
            return []
        with self._lock:
            # bm25() cannot sit inside an aggregate: rank the prompts first, then keep each entity's best.
            rows = self._conn.execute(
                "SELECT entity_id, max(score) AS best FROM (SELECT entity_id, -bm25(associations) AS score "
                "FROM associations WHERE associations MATCH ? ORDER BY bm25(associations) LIMIT ?) "
                "GROUP BY entity_id ORDER BY best DESC, entity_id LIMIT ?", (match, limit * 5, limit),
            ).fetchall()
        return [(r[0], float(r[1])) for r in rows]

    def association_times(self, entity_ids: list[str]) -> dict[str, list[float]]:
        """``{entity_id: [created_at, …]}`` (unix seconds, oldest first): when sessions' edits
        associated each of ``entity_ids`` with a prompt (one time per (entity, prompt delivery)).
        Ids without an association are absent; [] gives {}."""
        found: dict[str, list[float]] = {}
        with self._lock:
            for chunk in chunked(dict.fromkeys(entity_ids)):
                for entity_id, created_at in self._conn.execute(
                        f"SELECT entity_id, created_at FROM association_keys WHERE entity_id IN ({marks(len(chunk))}) "
                        "ORDER BY created_at, entity_id", chunk):
                    found.setdefault(entity_id, []).append(float(created_at))
        return found

    def has_fingerprint(self, session_id: str, fingerprint: str) -> bool:
        """Whether the session was already handed a pack with this fingerprint."""
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM deliveries WHERE session_id = ? AND fingerprint = ? LIMIT 1", (session_id, fingerprint)
            ).fetchone()
        return row is not None

    # ---- working sets ---------------------------------------------------------
    def session_touches(self, session_id: str, limit: int = 500) -> list[Touch]:
        """The session's touches, newest tool use first (at most ``limit`` tool uses)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT touches FROM tool_uses WHERE session_id = ? ORDER BY id DESC LIMIT ?", (session_id, limit)
            ).fetchall()
        found: list[Touch] = []
        for (raw,) in rows:
            try:
                for t in json.loads(raw):
                    found.append(Touch(t["path"], t["action"], t.get("start_line"), t.get("end_line")))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def session_hits(self, session_id: str) -> list[tuple[str, float]]:
        """``(entity_id, best weight)`` of every item the session hit, strongest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT i.entity_id, max(i.hit_weight) AS w FROM delivery_items i JOIN deliveries d "
                "ON d.id = i.delivery_id WHERE d.session_id = ? AND i.outcome = 'hit' "
                "GROUP BY i.entity_id ORDER BY w DESC, max(i.resolved_at) DESC", (session_id,),
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def save_working_set(self, session_id: str, trigger: str, entities: list[str], now: float | None = None) -> int:
        """Snapshot a session's working set (before a compaction). Returns the row id."""
        now = time.time() if now is None else now
        with self._lock, self._conn:
            cur = self._conn.execute(
                "INSERT INTO working_sets(session_id, created_at, trigger, entities) VALUES (?,?,?,?)",
                (mask(session_id), now, mask(trigger), json.dumps(entities)),
            )
        return int(cur.lastrowid)

    def latest_working_set(self, session_id: str) -> list[str] | None:
        """The newest snapshot's entity ids, or None when the session has none."""
        with self._lock:
            row = self._conn.execute(
                "SELECT entities FROM working_sets WHERE session_id = ? ORDER BY id DESC LIMIT 1", (session_id,)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def compact_acknowledged(self, session_id: str) -> bool | None:
        """After the session's last ``compact`` session start: None if there was none, else
        whether its pack was acknowledged (any of its items hit since)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT id FROM deliveries WHERE session_id = ? AND event IN ('session_start', 'compact_recovery') "
                "AND source = 'compact' ORDER BY id DESC LIMIT 1", (session_id,),
            ).fetchone()
            if row is None:
                return None
            hit = self._conn.execute(
                "SELECT 1 FROM delivery_items WHERE delivery_id >= ? AND outcome = 'hit' AND delivery_id IN "
                "(SELECT id FROM deliveries WHERE session_id = ? AND source = 'compact') LIMIT 1",
                (row[0], session_id),
            ).fetchone()
            recovered = self._conn.execute(
                "SELECT 1 FROM deliveries WHERE session_id = ? AND event = 'compact_recovery' AND id > ? LIMIT 1",
                (session_id, row[0]),
            ).fetchone()
        return hit is not None or recovered is not None

    # ---- reading --------------------------------------------------------------
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
                result.append({**dict(row), "items": [_item_dict(i) for i in items]})
        return result

    def tool_uses(self, session_id: str | None = None, limit: int = 100) -> list[dict]:
        """Latest tool uses (newest first), ``touches`` decoded."""
        with self._lock:
            sql = "SELECT * FROM tool_uses" + (" WHERE session_id = ?" if session_id else "") + " ORDER BY id DESC LIMIT ?"
            args = (session_id, limit) if session_id else (limit,)
            rows = self._conn.execute(sql, args).fetchall()
        return [{**dict(r), "touches": json.loads(r["touches"])} for r in rows]

    def totals(self) -> dict:
        """Counts: ``deliveries``, ``delivery_items``, ``hits``, ``misses``, ``pending``, ``hit_rate``
        (hits / resolved items, 0.0 when none), ``tool_uses``, ``sessions``, ``sessions_ended``.
        The same per client is :meth:`by_client`."""
        with self._lock:
            one = lambda sql: self._conn.execute(sql).fetchone()[0]  # noqa: E731
            outcomes = dict(self._conn.execute("SELECT outcome, count(*) FROM delivery_items GROUP BY outcome").fetchall())
            hits, misses = outcomes.get("hit", 0), outcomes.get("miss", 0)
            return {
                "deliveries": one("SELECT count(*) FROM deliveries"),
                "delivery_items": one("SELECT count(*) FROM delivery_items"),
                "hits": hits,
                "misses": misses,
                "pending": outcomes.get("pending", 0),
                "hit_rate": round(hits / (hits + misses), 4) if hits + misses else 0.0,
                "tool_uses": one("SELECT count(*) FROM tool_uses"),
                "sessions": one("SELECT count(*) FROM sessions"),
                "sessions_ended": one("SELECT count(*) FROM sessions WHERE ended_at IS NOT NULL"),
            }

    def by_client(self, entity_id: str | None = None) -> dict[str, dict]:
        """Outcomes per client, clients sorted by name: ``{client: {"deliveries", "hits",
        "misses", "pending", "hit_rate", "tool_uses"}}`` (``hit_rate`` = hits / (hits + misses),
        0.0 when none). With ``entity_id``, only that entity's delivery items (``deliveries``
        then counts its deliveries) and no ``tool_uses``. '' names rows with no client."""
        where, args = ("WHERE i.entity_id = ?", [entity_id]) if entity_id is not None else ("", [])
        with self._lock:
            rows = self._conn.execute(
                f"SELECT d.client, count(DISTINCT d.id), sum(i.outcome = 'hit'), sum(i.outcome = 'miss'), "
                f"sum(i.outcome = 'pending') FROM deliveries d LEFT JOIN delivery_items i ON i.delivery_id = d.id "
                f"{where} GROUP BY d.client", args).fetchall()
            uses = {} if entity_id is not None else dict(self._conn.execute(
                "SELECT client, count(*) FROM tool_uses GROUP BY client").fetchall())
        found: dict[str, dict] = {}
        for client, deliveries, hits, misses, pending in rows:
            hits, misses = int(hits or 0), int(misses or 0)
            found[client] = {"deliveries": int(deliveries), "hits": hits, "misses": misses,
                             "pending": int(pending or 0),
                             "hit_rate": round(hits / (hits + misses), 4) if hits + misses else 0.0}
            if entity_id is None:
                found[client]["tool_uses"] = int(uses.get(client, 0))
        if entity_id is None:
            for client, n in uses.items():  # a client with tool uses and no delivery (no context hooks)
                found.setdefault(client, {"deliveries": 0, "hits": 0, "misses": 0, "pending": 0,
                                          "hit_rate": 0.0, "tool_uses": int(n)})
        return dict(sorted(found.items()))

    def entity_usage(self, entity_id: str, path: str | None = None) -> dict:
        """How often ``entity_id`` was delivered, its outcomes so far, and its utility.

        Keys: ``retrieval_count``, ``used_count`` (hits), ``ignored_count``
        (misses), ``pending``, ``successes``/``failures`` (weighted evidence),
        ``utility`` (posterior mean, shrunk towards ``path``'s when given),
        ``base_rate`` (the repository's mean, the centre of the ranking factor),
        ``last_hit_at``/``last_delivered_at`` (unix s or None), ``by_client`` (the
        outcomes per client, :meth:`by_client`).
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT count(*), sum(outcome = 'hit'), sum(outcome = 'miss'), sum(outcome = 'pending'), "
                "max(resolved_at) FILTER (WHERE outcome = 'hit') FROM delivery_items WHERE entity_id = ?",
                (entity_id,),
            ).fetchone()
            sums = self._conn.execute(
                "SELECT successes, failures, last_delivered_at, last_hit_at FROM entity_utility WHERE entity_id = ?",
                (entity_id,),
            ).fetchone()
        return {
            "retrieval_count": row[0] or 0, "used_count": row[1] or 0, "ignored_count": row[2] or 0,
            "pending": row[3] or 0,
            "successes": round(sums[0], 4) if sums else 0.0, "failures": round(sums[1], 4) if sums else 0.0,
            "utility": round(self.utility.utility(entity_id, path), 4),
            "base_rate": round(self.utility.base_rate(), 4),
            "last_delivered_at": sums[2] if sums else None, "last_hit_at": sums[3] if sums else None,
            "by_client": self.by_client(entity_id),
        }

    # ---- reading for the viewer (``cogd ui``; docs/protocol.md, ``usage.*``) ----
    def sessions(self, limit: int = 100) -> list[dict]:
        """Sessions with at least one delivery, the latest delivery first, at most ``limit``.

        Keys: ``session_id``, ``deliveries``, ``first_at``/``last_at`` (unix s of its first and
        latest delivery), ``items``, ``hits``, ``misses``, ``pending``, ``ended_at`` (unix s or
        None), ``end_reason``.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT d.session_id, count(DISTINCT d.id) AS deliveries, min(d.created_at) AS first_at, "
                "max(d.created_at) AS last_at, count(i.rank) AS items, "
                "coalesce(sum(i.outcome = 'hit'), 0) AS hits, coalesce(sum(i.outcome = 'miss'), 0) AS misses, "
                "coalesce(sum(i.outcome = 'pending'), 0) AS pending, s.ended_at, s.end_reason "
                "FROM deliveries d LEFT JOIN delivery_items i ON i.delivery_id = d.id "
                "LEFT JOIN sessions s ON s.session_id = d.session_id "
                "GROUP BY d.session_id ORDER BY last_at DESC, d.session_id LIMIT ?", (limit,)).fetchall()
        return [dict(r) for r in rows]

    def daily(self) -> list[dict]:
        """Per UTC day of delivery, oldest first: ``day`` (``YYYY-MM-DD``), ``deliveries``,
        ``chars`` (their packs' characters), ``hits``, ``misses``, ``pending`` (of their items) and
        ``hit_rate`` (hits / resolved items, None when none is resolved). An item counts on the day
        of its delivery, so the days' hits and misses add up to :meth:`totals`' ones."""
        with self._lock:
            packs = self._conn.execute(
                "SELECT date(created_at, 'unixepoch') AS day, count(*), sum(size_chars) FROM deliveries "
                "GROUP BY day ORDER BY day").fetchall()
            outcomes = {r[0]: r[1:] for r in self._conn.execute(
                "SELECT date(d.created_at, 'unixepoch') AS day, sum(i.outcome = 'hit'), sum(i.outcome = 'miss'), "
                "sum(i.outcome = 'pending') FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
                "GROUP BY day").fetchall()}
        days = []
        for day, n, chars in packs:
            hits, misses, pending = (int(v or 0) for v in outcomes.get(day, (0, 0, 0)))
            days.append({"day": day, "deliveries": n, "chars": int(chars or 0), "hits": hits, "misses": misses,
                         "pending": pending, "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None})
        return days

    def file_usage(self, limit: int = 1000) -> list[dict]:
        """Usage summed per file over its delivered entities, the most delivered first.

        Keys: ``path``, ``entities`` (delivered at least once), ``retrieval_count``, ``used_count``
        (hits), ``ignored_count`` (misses), ``successes``/``failures`` (weighted evidence),
        ``utility`` (the file's posterior mean, :meth:`UtilityModel.file_utility`), ``last_hit_at``.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT path, count(*) AS entities, sum(retrieval_count) AS retrieval_count, "
                "sum(used_count) AS used_count, sum(ignored_count) AS ignored_count, sum(successes) AS successes, "
                "sum(failures) AS failures, max(last_hit_at) AS last_hit_at FROM entity_utility "
                "GROUP BY path ORDER BY retrieval_count DESC, path LIMIT ?", (limit,)).fetchall()
        out = []
        for r in rows:
            row = dict(r)
            row["successes"], row["failures"] = round(row["successes"], 4), round(row["failures"], 4)
            row["utility"] = round(self.utility.file_utility(row["path"]), 4)
            out.append(row)
        return out


# ---- reading without the writer ------------------------------------------------------------
# Memory consolidation and doctor read usage evidence without opening the writer above (which
# creates and migrates the schema, masks stored text and loads the utility model). They go
# through this reader, so every query on the ledger's tables stays in this module.

#: The usage tables the reader needs; ``state.db`` holds none of them when only memory has
#: written to it so far (its ``events`` and ``tombstones`` share the file, :mod:`cogd.memory.events`).
USAGE_TABLES = ("deliveries", "delivery_items", "entity_utility")


def _chunks(ids: list[str]):
    return chunked(list(dict.fromkeys(ids)))  # each id once, in at most MAX_PARAMS per statement


class LedgerReader:
    """Read-only queries on ``state.db``'s usage tables, over a connection the caller owns or :meth:`open` makes.

    The schema is read once, explicitly: a ledger without the usage tables
    (no daemon has run here yet) answers every query empty, and one the
    writer has not migrated yet (no ``delivery_items.resolved_at``) takes
    a hit's time from its delivery. Raises sqlite3.Error on a broken database.
    """

    def __init__(self, conn: sqlite3.Connection | None):
        self.conn = conn
        tables = set() if conn is None else {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        #: whether the usage tables exist (else every answer is empty)
        self.has_usage = all(t in tables for t in USAGE_TABLES)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(delivery_items)")} if self.has_usage else set()
        self._hit_time = "coalesce(i.resolved_at, d.created_at)" if "resolved_at" in columns else "d.created_at"

    @classmethod
    def open(cls, state_db: Path) -> "LedgerReader":
        """A reader on ``state_db`` opened read-only (empty answers when the file does not exist).

        Raises :class:`cogd.safepath.UnsafePath` when the file or a side file is a
        link or another user's (SQLite would follow it), sqlite3.Error when it
        is not a database. Close it with :meth:`close`.
        """
        state_db = Path(state_db)
        if not state_db.exists():
            return cls(None)
        safepath.prepare_db(state_db, create=False)
        conn = sqlite3.connect(f"file:{state_db}?mode=ro", uri=True, timeout=10.0)
        try:
            return cls(conn)
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _rows(self, sql: str, args: list) -> list[tuple]:
        if self.conn is None or not self.has_usage or not args:
            return []
        return self.conn.execute(sql, args).fetchall()

    def usage(self, ids: list[str]) -> dict[str, tuple[int, int, float | None]]:
        """``{id: (deliveries, hits, last hit at (unix s) or None)}`` from ``entity_utility``;
        ids never delivered are absent."""
        out: dict[str, tuple[int, int, float | None]] = {}
        for chunk in _chunks(ids):
            for entity_id, n, hits, last in self._rows(
                    f"SELECT entity_id, retrieval_count, used_count, last_hit_at FROM entity_utility "
                    f"WHERE entity_id IN ({marks(len(chunk))})", chunk):
                out[entity_id] = (int(n or 0), int(hits or 0), last)
        return out

    def delivery_counts(self, ids: list[str]) -> dict[str, tuple[int, int]]:
        """``{id: (delivery items, hits)}`` counted over ``delivery_items``; ids never delivered are absent."""
        out: dict[str, tuple[int, int]] = {}
        for chunk in _chunks(ids):
            for entity_id, n, hits in self._rows(
                    f"SELECT entity_id, count(*), sum(outcome = 'hit') FROM delivery_items "
                    f"WHERE entity_id IN ({marks(len(chunk))}) GROUP BY entity_id", chunk):
                out[entity_id] = (int(n), int(hits or 0))
        return out

    def hit_sessions(self, ids: list[str]) -> list[str]:
        """Distinct sessions whose deliveries of any of ``ids`` were hit, sorted."""
        found: set[str] = set()
        for chunk in _chunks(ids):
            found.update(r[0] for r in self._rows(
                f"SELECT DISTINCT d.session_id FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
                f"WHERE i.outcome = 'hit' AND i.entity_id IN ({marks(len(chunk))})", chunk))
        return sorted(found)

    def outcomes_since(self, ids: list[str], since: float) -> tuple[int, int, float | None]:
        """``(misses, hits, last hit time)`` of ``ids``' delivery items delivered after ``since`` (unix s);
        the last hit time (unix s, None without a hit) is over all time: when the hit was resolved, or
        its delivery's time in a ledger from before hits kept theirs."""
        misses = hits = 0
        last: float | None = None
        for chunk in _chunks(ids):
            holes = marks(len(chunk))
            counts = dict(self._rows(
                f"SELECT i.outcome, count(*) FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
                f"WHERE i.entity_id IN ({holes}) AND d.created_at > ? GROUP BY i.outcome", [*chunk, since]))
            misses += int(counts.get("miss", 0))
            hits += int(counts.get("hit", 0))
            for (when,) in self._rows(
                    f"SELECT max({self._hit_time}) FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id "
                    f"WHERE i.outcome = 'hit' AND i.entity_id IN ({holes})", chunk):
                if when is not None and (last is None or when > last):
                    last = when
        return misses, hits, last


