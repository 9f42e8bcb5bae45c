"""The history projection, ``.cogd/index/history.db``: mined commits, the definitions they
touched, their messages searchable by BM25, and co-change pairs.

It is a projection like ``index.db``: rebuilt from git (re-mined) when deleted or damaged,
moved aside by ``cogd reset`` with the rest of ``.cogd/index/``. One writer (the daemon's
history miner); any thread may read through its own connection (:meth:`HistoryStore.reader`).

Tables: ``commits`` (hash, commit time, subject, masked message, the skip reason or NULL,
how many definitions it touched, ``live``: reachable from the HEAD last synchronised),
``touched`` (commit, entity id at the commit's parent, path, changed lines), ``messages``
(FTS5 over the message, porter stemming as the ledger's associations), ``names`` (FTS5 over the
words of the names of the definitions each ``messages`` row's commit changed, same rowid), ``support`` and
``pairs`` (co-change, recomputed over the live commits by :meth:`HistoryStore.rebuild_pairs`),
``meta`` (synchronised HEAD, mining time). Only ``live`` rows are ever read for ranking, so
a checkout of an older commit hides every commit after it at once (no re-mining forward).
"""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection

from cogd import safepath
from cogd.inlist import chunked, marks

SCHEMA_VERSION = "4"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS commits (
    hash TEXT PRIMARY KEY, time INTEGER NOT NULL, subject TEXT NOT NULL, message TEXT NOT NULL,
    skipped TEXT, n_entities INTEGER NOT NULL DEFAULT 0, live INTEGER NOT NULL DEFAULT 1,
    mined_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS commits_live ON commits(live, skipped);
CREATE TABLE IF NOT EXISTS touched (
    hash TEXT NOT NULL, entity_id TEXT NOT NULL, path TEXT NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (hash, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS touched_entity ON touched(entity_id);
-- One row per commit's own message (source = request = the commit), and one per commit of a
-- merged pull request carrying the merge's text (source = request = the merge commit).
CREATE VIRTUAL TABLE IF NOT EXISTS messages USING fts5(
    hash UNINDEXED, source UNINDEXED, request UNINDEXED, digest UNINDEXED, message, tokenize = 'porter unicode61'
);
-- The words of the names of the definitions a messages row's commit changed (rowid = that row's):
-- the same change request described by its code, searched beside the message ([history] name_weight).
CREATE VIRTUAL TABLE IF NOT EXISTS names USING fts5(words, tokenize = 'porter unicode61');
CREATE TABLE IF NOT EXISTS support (entity_id TEXT PRIMARY KEY, commits INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pairs (
    a TEXT NOT NULL, b TEXT NOT NULL, support INTEGER NOT NULL, confidence REAL NOT NULL,
    PRIMARY KEY (a, b)
) WITHOUT ROWID;
"""


@dataclass
class Association:
    """One entity a query's matching commits touched: ``score`` (higher is better), ``commits``
    the hashes behind it (best first), ``evidence`` how many independent commits (``len(commits)``
    before any cap) — what a shrinkage estimator weighs. ``times``: each request's newest commit
    time (unix seconds, committer time), aligned with ``commits``; empty when not known."""

    entity_id: str
    score: float
    evidence: int
    commits: list[str]
    times: list[int] = field(default_factory=list)


@dataclass
class AssociationSettings:
    """How commits become associations: ``commits`` matched at most, ``per_commit`` entities
    each gives at most (by changed lines), ``half_life_days`` of the recency decay (counted
    back from the newest live commit, not the wall clock, so a replay is deterministic),
    ``request_decay`` the exponent ``p`` of the k-th definition's share ``k ** -p`` of its
    request's weight (1, as ``[history] request_decay``; 0: all equal), ``min_match_share`` the share of the best request's BM25
    score a request needs to count at all (0: any match), ``name_weight`` the weight of the match
    on the names of the definitions a row's commit changed beside the match on its text (0: the
    text alone), ``request_order`` how a request's definitions are ordered for their shares and
    places: ``"lines"`` (most changed lines first) or ``"named"`` (those whose names share a word
    with the query first, then by lines), ``request_members`` which commits of a matched pull
    request make its change: ``"read"`` (those whose rows the search returned) or ``"all"``
    (every live mined commit it merged) — see :func:`associated`."""

    commits: int = 20
    per_commit: int = 6
    half_life_days: float = 365.0
    request_decay: float = 1.0
    min_match_share: float = 0.0
    name_weight: float = 0.0
    request_order: str = "lines"
    request_members: str = "read"


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open ``history.db`` (WAL; the schema created unless ``readonly``). Raises sqlite3.Error
    when the file is not a database, UnsafePath for a link among its files."""
    if readonly:
        safepath.prepare_db(path, create=False)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0, check_same_thread=False)
    else:
        safepath.prepare_db(path)
        conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        row = None
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError:
            pass
        if row is not None and row[0] != SCHEMA_VERSION:  # a projection: an old shape is re-mined
            for table in ("meta", "commits", "touched", "messages", "names", "support", "pairs"):
                conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.executescript(SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        conn.commit()
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


class HistoryStore:
    """``history.db``: the writer's connection plus per-thread readers.

    Writes (``add_commit``, ``set_live``, ``rebuild_pairs``, ``set_meta``) come from one
    thread, the miner. Reads may come from any thread. Raises sqlite3.Error on a broken file.
    """

    def __init__(self, path: Path, *, readonly: bool = False):
        self.path = path
        # ``readonly``: a reader of another process's projection (the evaluation); writes fail.
        self._conn = connect(path, readonly=readonly)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.generation = 0
        self.writes = 0  # counts the writer's commits: a reader's per-state cache keys on it

    def reader(self) -> sqlite3.Connection:
        """This thread's read-only connection (reopened after :meth:`reopen`)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "generation", -1) != self.generation:
            conn = connect(self.path, readonly=True)
            self._local.conn, self._local.generation = conn, self.generation
            with self._lock:
                self._readers.append(conn)
        return conn

    def reopen(self) -> None:
        """The file was deleted or replaced: a new, empty projection (the miner mines it again);
        every thread's next :meth:`reader` opens a new connection."""
        with self._lock:
            old, self._readers = self._readers, []
        self._conn.close()
        self._conn = connect(self.path)
        self.generation += 1
        for conn in old:  # a reader still in use elsewhere fails its query once and reopens next time
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        with self._lock:
            readers, self._readers = self._readers, []
        for conn in readers + [self._conn]:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    # ---- writes (the miner's thread) ---------------------------------------
    def known(self) -> set[str]:
        """Hashes of every commit stored (mined or skipped), live or not."""
        return {r[0] for r in self._conn.execute("SELECT hash FROM commits")}

    def add_commit(self, hash_: str, time_: int, subject: str, message: str, skipped: str | None,
                   touched: dict[str, tuple[str, int]], now: float) -> None:
        """Store one commit: ``touched`` is ``{entity_id: (path, changed lines)}`` (empty when skipped)."""
        c = self._conn
        c.execute("INSERT OR REPLACE INTO commits(hash, time, subject, message, skipped, n_entities, live, mined_at) "
                  "VALUES (?,?,?,?,?,?,1,?)", (hash_, time_, subject, message, skipped, len(touched), now))
        c.execute("DELETE FROM touched WHERE hash = ?", (hash_,))
        c.executemany("INSERT INTO touched(hash, entity_id, path, lines) VALUES (?,?,?,?)",
                      [(hash_, e, p, n) for e, (p, n) in touched.items()])
        if skipped is None:
            rowid = c.execute("INSERT INTO messages(hash, source, request, digest, message) VALUES (?,?,?,?,?)",
                              (hash_, hash_, hash_, digest(message), message)).lastrowid
            c.execute("INSERT INTO names(rowid, words) VALUES (?,?)", (rowid, definition_words(touched)))

    def add_request(self, merge: str, text: str, members: list[str]) -> int:
        """A merged pull request: ``text`` (the merge's message without its "Merge pull request"
        line) searchable for each of ``members`` (its commits), and its mined members one change
        request (evidence counts it once). Returns how many members were mined."""
        c = self._conn
        mined = []
        for chunk in chunked(members):
            mined += [h for (h,) in c.execute(
                f"SELECT hash FROM commits WHERE skipped IS NULL AND hash IN ({marks(len(chunk))})", chunk)]
        key = digest(text)
        for member in mined:
            c.execute("UPDATE messages SET request = ? WHERE hash = ? AND source = ?", (merge, member, member))
            rowid = c.execute("INSERT INTO messages(hash, source, request, digest, message) VALUES (?,?,?,?,?)",
                              (member, merge, merge, key, text)).lastrowid
            ids = [e for (e,) in c.execute("SELECT entity_id FROM touched WHERE hash = ?", (member,))]
            c.execute("INSERT INTO names(rowid, words) VALUES (?,?)", (rowid, definition_words(ids)))
        return len(mined)

    def commit(self) -> None:
        self._conn.commit()
        self.writes += 1

    def optimize(self) -> None:
        """Merge the message index's segments (one per batch otherwise): a query over a merged
        FTS5 index reads fewer b-trees (measured 0.97 → 0.78 ms CPU on click's history)."""
        self._conn.execute("INSERT INTO messages(messages) VALUES ('optimize')")
        self._conn.commit()

    def set_live(self, reachable: set[str]) -> int:
        """Mark exactly the commits in ``reachable`` live; returns how many changed state."""
        c = self._conn
        c.execute("CREATE TEMP TABLE IF NOT EXISTS reach (hash TEXT PRIMARY KEY) WITHOUT ROWID")
        c.execute("DELETE FROM reach")
        c.executemany("INSERT OR IGNORE INTO reach(hash) VALUES (?)", ((h,) for h in reachable))
        changed = c.execute("UPDATE commits SET live = (hash IN (SELECT hash FROM reach)) "
                            "WHERE live != (hash IN (SELECT hash FROM reach))").rowcount
        c.execute("DELETE FROM reach")
        c.commit()
        self.writes += 1
        return changed

    def rebuild_pairs(self, max_definitions: int, min_support: int) -> int:
        """Recompute co-change over the live, mined commits touching 2..``max_definitions``
        definitions (files left out). support(a) = commits touching a; support(a, b) = commits
        touching both; confidence(a → b) = support(a, b) / support(a) (Agrawal, Imieliński &
        Swami, SIGMOD 1993). Pairs below ``min_support`` are not kept. Returns the pair count."""
        c = self._conn
        c.execute("DELETE FROM support")
        c.execute("DELETE FROM pairs")
        c.execute("CREATE TEMP TABLE IF NOT EXISTS cc (hash TEXT, entity_id TEXT)")
        c.execute("DELETE FROM cc")
        c.execute("INSERT INTO cc SELECT t.hash, t.entity_id FROM touched t JOIN commits m ON m.hash = t.hash "
                  "WHERE m.live = 1 AND m.skipped IS NULL AND m.n_entities <= ? AND instr(t.entity_id, '::') > 0",
                  (max_definitions,))
        c.execute("CREATE INDEX IF NOT EXISTS cc_hash ON cc(hash)")
        c.execute("INSERT INTO support SELECT entity_id, count(*) FROM cc GROUP BY entity_id")
        c.execute("INSERT INTO pairs SELECT x.entity_id, y.entity_id, count(*), "
                  "CAST(count(*) AS REAL) / (SELECT commits FROM support WHERE entity_id = x.entity_id) "
                  "FROM cc x JOIN cc y ON x.hash = y.hash AND x.entity_id != y.entity_id "
                  "GROUP BY x.entity_id, y.entity_id HAVING count(*) >= ?", (min_support,))
        c.execute("DELETE FROM cc")
        n = c.execute("SELECT count(*) FROM pairs").fetchone()[0]
        c.commit()
        self.writes += 1
        return n

    def set_meta(self, **values: object) -> None:
        self._conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)",
                               [(k, str(v)) for k, v in values.items()])
        self._conn.commit()

    def meta(self, key: str, default: str | None = None) -> str | None:
        row = self.reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default


_NAME_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_TWIN = re.compile(r"~\d+$")


def name_words(entity_id: str) -> list[str]:
    """The words of a definition's qualified name, lower case, distinct, in order: each dotted
    part whole and split at underscores and case changes (``src/a.py::CliRunner.invoke_cmd`` →
    ``clirunner``, ``cli``, ``runner``, ``invoke_cmd``, ``invoke``, ``cmd``), as the query side
    splits identifiers; one-letter pieces dropped; [] for a file entity (no ``::``). A twin's
    ``~n`` is dropped."""
    if "::" not in entity_id:
        return []
    words: dict[str, None] = {}
    for part in _TWIN.sub("", entity_id.split("::", 1)[1]).split("."):
        pieces = [part] + [p for p in part.split("_") if p]
        for piece in list(pieces):
            pieces += _NAME_PART.findall(piece)
        for piece in pieces:
            if len(piece) > 1:
                words.setdefault(piece.lower(), None)
    return list(words)


def definition_words(entity_ids) -> str:
    """The ``names`` document of one change: the words (:func:`name_words`) of the definitions
    ``entity_ids`` names (an iterable of ids; file entities give none), distinct, space-separated."""
    words: dict[str, None] = {}
    for entity_id in entity_ids:
        for word in name_words(entity_id):
            words.setdefault(word, None)
    return " ".join(words)


# ---- reads (any thread, a read-only connection) ------------------------------

def digest(message: str) -> str:
    """The message compared as text (case folded, runs of whitespace as one space), hashed."""
    return hashlib.blake2b(" ".join(message.lower().split()).encode("utf-8", "surrogatepass"),
                           digest_size=12).hexdigest()


def newest_time(conn: sqlite3.Connection) -> int | None:
    """The commit time of the newest live mined commit (None when there is none)."""
    return conn.execute("SELECT max(time) FROM commits WHERE live = 1 AND skipped IS NULL").fetchone()[0]


def evidence(conn: sqlite3.Connection, max_definitions: int) -> dict[str, int]:
    """How much independent evidence the live history holds: the ``n`` of :mod:`cogd.evidence`'s
    shrinkage for the two history sources.

    ``history_association``: the live change requests mined — a commit, or a merged pull request's
    commits counted once while its merge is live (the unit :func:`associated` scores and counts);
    ``co_change``: the live mined commits touching at most ``max_definitions`` entities, two of them
    definitions or more: the ones
    :meth:`HistoryStore.rebuild_pairs` counts pairs over. Only commits reachable from the HEAD
    last synchronised count (``live``). Raises sqlite3.Error.
    """
    requests = conn.execute(
        "SELECT count(DISTINCT CASE WHEN req.live = 1 THEN s.request ELSE s.hash END) FROM messages s "
        "JOIN commits m ON m.hash = s.hash LEFT JOIN commits req ON req.hash = s.request "
        "WHERE s.source = s.hash AND m.live = 1 AND m.skipped IS NULL").fetchone()[0]
    pair_commits = conn.execute(
        "SELECT count(*) FROM commits m WHERE m.live = 1 AND m.skipped IS NULL AND m.n_entities <= ? AND "
        "(SELECT count(*) FROM touched t WHERE t.hash = m.hash AND instr(t.entity_id, '::') > 0) >= 2",
        (max_definitions,)).fetchone()[0]
    return {"history_association": int(requests), "co_change": int(pair_commits)}


@dataclass
class LiveView:
    """What ranking reads of the live set besides the message index, held in memory for one state
    of the projection (:func:`live_view`): built once per mining pass, off the hook's path, so a
    request's history read is one FTS5 query plus dictionary lookups instead of joins over
    ``commits``, ``touched`` and ``pairs`` per request.

    ``key``: the state it was built for (synchronised HEAD, file generation, writer commits) — a
    reader uses it only while its own key is the same; ``live``: every live commit (merges and
    skipped ones too: a pull request's text comes from its merge); ``mined``: live mined commit →
    commit time; ``touched``: live mined commit → ``{entity id: changed lines}``; ``subjects``:
    live commit → its label (:func:`title`); ``partners``: entity → ``[(partner, confidence, support)]`` best
    first (the ``pairs`` table's order); ``messages``: the message index's rowid → ``(commit,
    source, request, digest)``, so a query fetches only rowids and scores (FTS5 sorts every
    match with the columns it returns: measured 0.69 → 0.46 ms CPU per query on click's
    history); ``newest``: :func:`newest_time`; ``evidence``: :func:`evidence`; ``paths``: each
    touched id → the path it was recorded under; ``file_changes``: :func:`file_changes` on the
    index as it was when the view was built (the miner fills it at the end of its pass when it
    can read the index; None: a reader computes it). Its size is bounded by ``[history]
    max_commits``. ``members``: a merge → the commits its text was stored for (its pull request's
    commits, :meth:`HistoryStore.add_request`; live or not, the caller tests).
    """

    key: tuple
    live: set[str]
    mined: dict[str, int]
    touched: dict[str, dict[str, int]]
    subjects: dict[str, str]
    partners: dict[str, list[tuple[str, float, int]]]
    messages: dict[int, tuple[str, str, str, str]]
    newest: int | None
    evidence: dict[str, int]
    paths: dict[str, str] = field(default_factory=dict)
    file_changes: dict[str, int] | None = None
    members: dict[str, list[str]] = field(default_factory=dict)

    def touched_rows(self) -> list[tuple[str, str, str]]:
        """``(commit, recorded path, entity id)`` of every live mined commit's touched definitions
        (the rows :func:`file_changes` counts), from memory."""
        return [(hash_, self.paths.get(entity_id, entity_id.split("::", 1)[0]), entity_id)
                for hash_, ids in self.touched.items() for entity_id in ids]


def live_view(conn: sqlite3.Connection, key: tuple, max_definitions: int) -> LiveView:
    """Read the live set into a :class:`LiveView` for state ``key`` (``max_definitions``: the
    co-change cap, for :func:`evidence`). Raises sqlite3.Error."""
    live: set[str] = set()
    mined: dict[str, int] = {}
    subjects_: dict[str, str] = {}
    for hash_, time_, subject, skipped, message in conn.execute(
            "SELECT hash, time, subject, skipped, CASE WHEN skipped = 'merge' THEN message ELSE '' END "
            "FROM commits WHERE live = 1"):
        live.add(hash_)
        subjects_[hash_] = title(subject, message)
        if skipped is None:
            mined[hash_] = time_
    touched: dict[str, dict[str, int]] = {}
    paths: dict[str, str] = {}
    for hash_, entity_id, n, path in conn.execute(
            "SELECT t.hash, t.entity_id, t.lines, t.path FROM touched t JOIN commits m "
            "ON m.hash = t.hash WHERE m.live = 1 AND m.skipped IS NULL"):
        touched.setdefault(hash_, {})[entity_id] = n
        paths[entity_id] = path
    partners: dict[str, list[tuple[str, float, int]]] = {}
    for a, b, confidence, support in conn.execute(
            "SELECT a, b, confidence, support FROM pairs ORDER BY a, confidence DESC, support DESC, b"):
        partners.setdefault(a, []).append((b, confidence, support))
    messages = {rowid: (hash_, source, request, key_digest) for rowid, hash_, source, request, key_digest
                in conn.execute("SELECT rowid, hash, source, request, digest FROM messages")}
    members: dict[str, list[str]] = {}
    for hash_, source, _request, _digest in messages.values():
        if source != hash_:  # a merge's text stored for one of its commits
            members.setdefault(source, []).append(hash_)
    return LiveView(key, live, mined, touched, subjects_, partners, messages, max(mined.values(), default=None),
                    evidence(conn, max_definitions), paths, members=members)


def touched_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """``(commit, recorded path, entity id)`` of every live mined (not skipped) commit's touched
    definitions: what :func:`file_changes` counts, read through SQL (:meth:`LiveView.touched_rows`
    gives the same from memory). Raises sqlite3.Error."""
    return conn.execute("SELECT t.hash, t.path, t.entity_id FROM touched t JOIN commits c ON c.hash = t.hash "
                        "WHERE c.live = 1 AND c.skipped IS NULL").fetchall()


def file_changes(index_conn: sqlite3.Connection, rows: list[tuple[str, str, str]],
                 current: Callable[[list[str]], dict[str, str]] | None = None) -> dict[str, int]:
    """``{current path: commits that changed it}`` from ``rows`` (``(commit, recorded path,
    entity id)``, :func:`touched_rows`): the prior P(file) of the file-level ranking. A commit
    counts once per file whatever number of its definitions it touched. A recorded path the
    index (``index_conn``) still holds counts as itself; the ids recorded under any other path (a
    file moved or renamed since) are mapped onto the index (``current``: old ids → current ids,
    :func:`current_ids` on ``index_conn`` by default), so a moved file's definitions follow it;
    an id with no current entity counts nowhere. Raises sqlite3.Error."""
    from cogd.index import store as index_store

    held = index_store.indexed_paths(index_conn, {path for _h, path, _e in rows})
    moved = list(dict.fromkeys(entity_id for _h, path, entity_id in rows if path not in held))
    mapping = ((current or (lambda ids: current_ids(index_conn, ids)))(moved)) if moved else {}
    pairs = set()
    for hash_, path, entity_id in rows:
        if path in held:
            pairs.add((hash_, path))
        elif entity_id in mapping:
            pairs.add((hash_, mapping[entity_id].split("::", 1)[0]))
    counts: dict[str, int] = {}
    for _hash, path in pairs:
        counts[path] = counts.get(path, 0) + 1
    return counts


def associated(conn: sqlite3.Connection, match: str, settings: AssociationSettings,
               query: str | None = None, newest: int | None = None, view: LiveView | None = None,
               leave_out: Callable[[str], bool] | None = None,
               terms: Collection[str] | None = None) -> list[Association]:
    """Entities changed by the live change requests whose texts match the FTS5 expression ``match``.

    A *change request* is a commit, or a merged pull request (its commits together, found by
    the merge's text or by any of theirs; see :meth:`HistoryStore.add_request`). Its score is its
    best row's BM25 score (``-bm25()``, higher better) × ``0.5 ** (age / half_life_days)``, age
    in days of its newest commit before the newest live commit; it gives each of its
    ``per_commit`` most-changed definitions ``score / sqrt(n)`` (``n``: the definitions it
    changed: a request that changes one function says more about it than one that changes
    twenty), the k-th of them (k from 1, most changed lines first) times ``k ** -request_decay``:
    one request is one vote, and with ``request_decay`` > 0 a single matched request cannot fill
    the list with equal entries ahead of the other requests' best ones (the harmonic, Zipf-like
    split at 1). A request whose BM25 score is below ``min_match_share`` × the best matched
    request's is left out (a match on one shared common word is not evidence of the same
    change; the score is relative because BM25 has no fixed scale). An entity's score is the sum over its requests, its evidence how many requests
    (independent ones: a pull request of five commits counts once); ``commits`` names the
    requests (a commit's hash, or the merge's). Best first; [] for an empty expression.

    No leakage: a row counts only when its commit and the commit its text comes from are live,
    and commits are grouped under a merge only while the merge is live. ``query``: the request's
    text; a row whose text is that very text (case and spacing aside: the same :func:`digest`;
    stored texts have their secrets masked, so a query holding one does not match) is left out,
    so a prompt quoting a commit verbatim (a replay, a cherry-pick) is not answered by it.
    ``newest``: :func:`newest_time`, when the caller has it. ``view``: the :class:`LiveView` of
    the live set as it is now, when the caller has one: the same answer from one FTS5 query and
    lookups in memory (the live and skipped tests and the commits' lines come from the view).
    ``leave_out``: a predicate over paths (e.g. test files, when the request is not about tests):
    a request's definitions in such files are not part of its change for this query — not
    counted in ``n``, not ranked, no weight — so a commit's test edits (most commits have them,
    often with the most changed lines) neither take its first, largest share nor its
    ``per_commit`` places from the code it changed; a request with nothing else gives nothing.

    Document expansion (``settings.name_weight`` > 0; cf. Nogueira et al., "Document Expansion by
    Query Prediction", 2019): a row's score is its text's BM25 score plus ``name_weight`` × the
    BM25 score of the names of the definitions its commit changed (the ``names`` table, each
    index read to ``4 × commits`` rows), so "use super() consistently" is found when the prompt
    names what it changed. At 0 only the text is read, as before.
    ``settings.request_members = "all"``: a pull request matched through one of its commits' own
    messages is the change of every live mined commit it merged (:func:`with_members`), not of
    the matched commit alone; with ``"read"`` its change is the commits whose rows were read.
    ``settings.request_order = "named"`` with ``terms`` (the query's words, lower case): a
    request's definitions whose names share a word with ``terms`` come first (then by changed
    lines), so they take its first shares and its ``per_commit`` places: a large request's
    definition the prompt names is not cut for the ones with most lines.
    Raises sqlite3.Error."""
    if not match:
        return []
    if view is not None:
        newest = view.newest
    newest = newest if newest is not None else newest_time(conn)
    if newest is None:
        return []
    rows = _rows(conn, match, settings, digest(query) if query is not None else "", view)
    requests = _matched_requests(rows, settings)
    if not requests:
        return []
    if settings.request_members == "all":
        with_members(conn, requests, view)
    lines = _changed_lines(conn, sorted({h for item in requests.values() for h in item[2]}), view)
    named = _memo(_shares_word(terms)) if settings.request_order == "named" and terms else None
    return _votes(requests, lines, settings, newest, _memo(leave_out), named)


def _votes(requests: dict[str, list], lines: dict[str, dict[str, int]], settings: AssociationSettings, newest: int,
           leave_out: Callable[[str], bool], named: Callable[[str], bool] | None) -> list[Association]:
    """The voting step of :func:`associated`: each matched request (``{key: [score, newest time,
    {commits}]}``, best first) splits its decayed score over its ``per_commit`` first definitions
    (``lines``: :func:`_changed_lines`; ``named``: the request-order predicate, or None for
    changed lines alone); the entities best first."""
    half_life = max(settings.half_life_days, 1e-6) * 86400
    found: dict[str, Association] = {}
    for key, (score, when, parts) in requests.items():  # best request first
        changed = _request_change(parts, lines, leave_out)
        if not changed:
            continue
        base = score * 0.5 ** (max(newest - when, 0) / half_life) / math.sqrt(len(changed))
        order = (sorted(changed, key=lambda e: (-changed[e], e)) if named is None
                 else sorted(changed, key=lambda e: (not named(e), -changed[e], e)))
        for k, entity_id in enumerate(order[: settings.per_commit], 1):
            weight = base * k ** -settings.request_decay
            item = found.get(entity_id)
            if item is None:
                found[entity_id] = Association(entity_id, weight, 1, [key], [when])
            else:
                item.score += weight
                item.evidence += 1
                item.commits.append(key)
                item.times.append(when)
    return sorted(found.values(), key=lambda a: (-a.score, a.entity_id))


def with_members(conn: sqlite3.Connection, requests: dict[str, list], view: LiveView | None = None) -> None:
    """Complete, in place, each pull request among ``requests`` (:func:`_matched_requests`'s
    ``{key: [score, newest time, {commits}]}``) with every live mined commit it merged, its
    newest time with theirs. A key that is a commit of its own (no merge's text stored under it)
    is left as it is. From ``view`` when given, else by SQL (the message rows whose source is
    the merge). Raises sqlite3.Error."""
    if view is not None:
        for key, item in requests.items():
            for member in view.members.get(key, ()):
                when = view.mined.get(member)
                if when is not None:
                    item[2].add(member)
                    item[1] = max(item[1], when)
        return
    for chunk in chunked(sorted(requests)):
        for source, hash_, when in conn.execute(
                f"SELECT s.source, s.hash, m.time FROM messages s JOIN commits m ON m.hash = s.hash WHERE s.source IN "
                f"({marks(len(chunk))}) AND s.source != s.hash AND m.live = 1 AND m.skipped IS NULL", chunk):
            item = requests[source]
            item[2].add(hash_)
            item[1] = max(item[1], when)


def _changed_lines(conn: sqlite3.Connection, members: list[str], view: LiveView | None) -> dict[str, dict[str, int]]:
    """``{commit: {entity id: changed lines}}`` for ``members`` (from ``view`` when given)."""
    if view is not None:
        return {h: view.touched[h] for h in members if h in view.touched}
    lines: dict[str, dict[str, int]] = {}
    for chunk in chunked(members):
        for hash_, entity_id, n in conn.execute(
                f"SELECT hash, entity_id, lines FROM touched WHERE hash IN ({marks(len(chunk))})", chunk):
            lines.setdefault(hash_, {})[entity_id] = n
    return lines


def _rows(conn: sqlite3.Connection, match: str, settings: AssociationSettings, excluded: str,
          view: LiveView | None) -> list[tuple[str, str, float, int]]:
    """:func:`associated`'s rows — ``(commit, request key, score, commit time)``, best first — for
    the FTS5 expression ``match``: from ``view`` when given, else by SQL; without the rows whose
    text digest is ``excluded``. The text's best ``4 × settings.commits`` rows, and with
    ``settings.name_weight`` the names index's as well (:func:`_scored`)."""
    limit = settings.commits * 4
    if view is not None:
        return _rows_from_view(conn, match, limit, excluded, view, settings.name_weight)
    if settings.name_weight > 0:
        return _rows_with_names(conn, match, limit, excluded, settings.name_weight)
    return conn.execute(
        "SELECT s.hash, CASE WHEN req.live = 1 THEN s.request ELSE s.hash END, s.score, m.time FROM "
        "(SELECT hash, source, request, digest, -bm25(messages) AS score FROM messages WHERE messages MATCH ? "
        "ORDER BY bm25(messages) LIMIT ?) s JOIN commits m ON m.hash = s.hash JOIN commits src ON src.hash = s.source "
        "LEFT JOIN commits req ON req.hash = s.request "
        "WHERE m.live = 1 AND m.skipped IS NULL AND src.live = 1 AND s.digest != ? ORDER BY s.score DESC",
        (match, limit, excluded)).fetchall()


def _request_change(members: set[str], lines: dict[str, dict[str, int]],
                    leave_out: Callable[[str], bool] | None) -> dict[str, int]:
    """A request's change: ``{entity_id: changed lines}`` summed over its ``members`` (commits;
    ``lines`` per commit), without the entities whose path ``leave_out`` says (when given)."""
    changed: dict[str, int] = {}
    for member in members:
        for entity_id, n in lines.get(member, {}).items():
            if leave_out is None or not leave_out(entity_id.split("::", 1)[0]):
                changed[entity_id] = changed.get(entity_id, 0) + n
    return changed


def _shares_word(terms: Collection[str]) -> Callable[[str], bool]:
    """A predicate over entity ids: whether the definition's name has a word (:func:`name_words`)
    among ``terms`` (compared in lower case)."""
    wanted = {t.lower() for t in terms}
    return lambda entity_id: any(word in wanted for word in name_words(entity_id))


def _memo(predicate: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
    """``predicate`` asked once per distinct argument (a path, an id: one query's requests share a few)."""
    if predicate is None:
        return None
    known: dict[str, bool] = {}

    def ask(path: str) -> bool:
        found = known.get(path)
        if found is None:
            found = known[path] = bool(predicate(path))
        return found
    return ask


def _matched_requests(rows: list[tuple[str, str, float, int]], settings: AssociationSettings) -> dict[str, list]:
    """:func:`associated`'s rows (``(commit, request key, score, commit time)``, best first)
    grouped by request: ``{key: [best score, newest time, {commits}]}``, best first, the first
    ``settings.commits`` requests, without those scoring under ``settings.min_match_share`` × the
    best one's."""
    requests: dict[str, list] = {}
    for hash_, key, score, when in rows:
        item = requests.get(key)
        if item is None:
            if len(requests) >= settings.commits:
                continue
            requests[key] = item = [score, when, set()]
        item[1] = max(item[1], when)
        item[2].add(hash_)
    if requests and settings.min_match_share > 0:
        floor = settings.min_match_share * max(item[0] for item in requests.values())
        requests = {key: item for key, item in requests.items() if item[0] >= floor}
    return requests


def _scored(conn: sqlite3.Connection, match: str, limit: int, name_weight: float) -> list[tuple[int, float]]:
    """``(messages rowid, score)`` of the rows matching ``match``: the text's BM25 score (the
    best ``limit``), plus ``name_weight`` × the names document's (its best ``limit``; a row found
    by its names alone scores that much only), in the order read — text matches best first, then
    the rows only the names found (a stable sort keeps it for ties)."""
    scores: dict[int, float] = {}
    for rowid, score in conn.execute("SELECT rowid, -rank FROM messages WHERE messages MATCH ? ORDER BY rank LIMIT ?",
                                     (match, limit)):  # rank: bm25() with the table's default weights
        scores[rowid] = score
    if name_weight > 0:
        for rowid, score in conn.execute("SELECT rowid, -rank FROM names WHERE names MATCH ? ORDER BY rank LIMIT ?",
                                         (match, limit)):
            scores[rowid] = scores.get(rowid, 0.0) + name_weight * score
    return list(scores.items())


def _rows_with_names(conn: sqlite3.Connection, match: str, limit: int, excluded: str,
                     name_weight: float) -> list[tuple[str, str, float, int]]:
    """:func:`associated`'s rows by SQL (no :class:`LiveView`) with the names document read
    too (:func:`_scored`): the same live, skipped and digest tests as its query."""
    scored = _scored(conn, match, limit, name_weight)
    meta: dict[int, tuple[str, str, str, str]] = {}
    for chunk in chunked([rowid for rowid, _ in scored]):
        for rowid, hash_, source, request, key in conn.execute(
                f"SELECT rowid, hash, source, request, digest FROM messages WHERE rowid IN ({marks(len(chunk))})", chunk):
            meta[rowid] = (hash_, source, request, key)
    commits: dict[str, tuple[int, str | None, int]] = {}
    for chunk in chunked(sorted({h for item in meta.values() for h in item[:3]})):
        for hash_, time_, skipped, live in conn.execute(
                f"SELECT hash, time, skipped, live FROM commits WHERE hash IN ({marks(len(chunk))})", chunk):
            commits[hash_] = (time_, skipped, live)
    rows = []
    for rowid, score in scored:
        hash_, source, request, key = meta.get(rowid, ("", "", "", ""))
        own, src, req = commits.get(hash_), commits.get(source), commits.get(request)
        if own is None or own[2] != 1 or own[1] is not None or src is None or src[2] != 1 or key == excluded:
            continue
        rows.append((hash_, request if req is not None and req[2] == 1 else hash_, score, own[0]))
    rows.sort(key=lambda r: -r[2])
    return rows


def _rows_from_view(conn: sqlite3.Connection, match: str, limit: int, excluded: str,
                    view: LiveView, name_weight: float = 0.0) -> list[tuple[str, str, float, int]]:
    """:func:`associated`'s rows — ``(commit, request key, score, commit time)``, best first —
    from the message index (and with ``name_weight`` the names index: :func:`_scored`), the
    live tests made in ``view`` (the same rules as its SQL)."""
    rows = []
    for rowid, score in _scored(conn, match, limit, name_weight):
        known = view.messages.get(rowid)
        if known is None:  # a row written after the view (the caller's key then differs): not used
            continue
        hash_, source, request, key_digest = known
        when = view.mined.get(hash_)
        if when is None or source not in view.live or key_digest == excluded:
            continue
        rows.append((hash_, request if request in view.live else hash_, score, when))
    rows.sort(key=lambda r: -r[2])  # stable: ties keep the index's order
    return rows


def co_changed(conn: sqlite3.Connection, seeds: list[str], min_confidence: float,
               per_seed: int = 5, view: LiveView | None = None) -> list[tuple[str, str, float, int]]:
    """``(seed, partner, confidence(seed → partner), support)`` for each seed's strongest
    co-change partners (at most ``per_seed``, confidence ≥ ``min_confidence``), seeds in order.
    ``view``: the live set's :class:`LiveView`, when the caller has one (no query then)."""
    if not seeds:
        return []
    order = {seed: i for i, seed in enumerate(seeds)}
    if view is not None:
        found = [(seed, b, c, n) for seed in order for b, c, n in
                 [p for p in view.partners.get(seed, ()) if p[1] >= min_confidence][:per_seed]]
        return sorted(found, key=lambda r: (order[r[0]], -r[2], -r[3], r[1]))
    marks = ",".join("?" * len(seeds))
    rows = conn.execute(
        f"SELECT a, b, confidence, support FROM (SELECT a, b, confidence, support, row_number() OVER "
        f"(PARTITION BY a ORDER BY confidence DESC, support DESC, b) AS n FROM pairs WHERE a IN ({marks}) "
        f"AND confidence >= ?) WHERE n <= ?", (*seeds, min_confidence, per_seed)).fetchall()
    return sorted(((a, b, c, s) for a, b, c, s in rows), key=lambda r: (order[r[0]], -r[2], -r[3], r[1]))


def entity_commits(conn: sqlite3.Connection, entity_id: str, limit: int = 10) -> list[dict]:
    """The live commits that touched ``entity_id``, newest first: ``{hash, time, subject, lines}``."""
    return [{"hash": h, "time": t, "subject": s, "lines": n} for h, t, s, n in conn.execute(
        "SELECT m.hash, m.time, m.subject, t.lines FROM touched t JOIN commits m ON m.hash = t.hash "
        "WHERE t.entity_id = ? AND m.live = 1 AND m.skipped IS NULL ORDER BY m.time DESC LIMIT ?",
        (entity_id, limit))]


_PULL_REQUEST = re.compile(r"^Merge pull request (#\d+)\b", re.I)


def title(subject: str, message: str) -> str:
    """A commit's label for people: its subject, or for a pull request's merge ("Merge pull
    request #N from …") the pull request's title — the first non-empty line after the merge line,
    GitHub's layout — with ``(#N)``; the subject when there is no such line."""
    match = _PULL_REQUEST.match(subject)
    if match is None:
        return subject
    for line in message.split("\n")[1:]:
        if line.strip():
            return f"{line.strip()[:200]} ({match.group(1)})"
    return subject


def subjects(conn: sqlite3.Connection, hashes: list[str]) -> dict[str, str]:
    """hash → label (:func:`title`: a pull request's title for its merge), for ``--explain``."""
    if not hashes:
        return {}
    marks = ",".join("?" * len(hashes))
    return {h: title(subject, message) for h, subject, message in conn.execute(
        f"SELECT hash, subject, message FROM commits WHERE hash IN ({marks})", hashes).fetchall()}


def status(conn: sqlite3.Connection) -> dict:
    """What is mined: ``{"commits", "mined", "skipped": {reason: n}, "live", "last_commit",
    "pairs", "head", "seconds"}`` (live commits only in ``mined`` and ``skipped``)."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    total = conn.execute("SELECT count(*) FROM commits").fetchone()[0]
    skipped = dict(conn.execute("SELECT skipped, count(*) FROM commits WHERE live = 1 AND skipped IS NOT NULL "
                                "GROUP BY skipped ORDER BY skipped").fetchall())
    mined = conn.execute("SELECT count(*) FROM commits WHERE live = 1 AND skipped IS NULL").fetchone()[0]
    last = conn.execute("SELECT hash, time, subject FROM commits WHERE live = 1 AND skipped IS NULL "
                        "ORDER BY time DESC, mined_at DESC LIMIT 1").fetchone()
    return {
        "commits": total, "mined": mined, "skipped": skipped,
        "live": conn.execute("SELECT count(*) FROM commits WHERE live = 1").fetchone()[0],
        "hidden": conn.execute("SELECT count(*) FROM commits WHERE live = 0").fetchone()[0],
        "last_commit": {"hash": last[0], "time": last[1], "subject": last[2]} if last else None,
        "pairs": conn.execute("SELECT count(*) FROM pairs").fetchone()[0],
        "head": meta.get("head"), "seconds": round(float(meta.get("seconds", 0) or 0), 3),
        "peak_rss_mb": meta.get("peak_rss_mb"),
    }


def current_ids(index_conn: sqlite3.Connection, ids: list[str]) -> dict[str, str]:
    """Map ids recorded at past parents onto the current index: ``{old id: current id}``.

    An id the index holds maps to itself; else the definition with the same qualified name
    when exactly one exists anywhere (the file was moved or renamed since); else the id is
    left out (the definition was deleted or renamed: nothing to point at). Raises sqlite3.Error.
    """
    from cogd.index import store as index_store

    present = index_store.existing_ids(index_conn, ids)
    out = {i: i for i in ids if i in present}
    missing = [i for i in ids if i not in present and "::" in i]
    if not missing:
        return out
    wanted: dict[str, list[str]] = {}
    for old in missing:
        qualname = old.split("::", 1)[1].split("~", 1)[0]
        wanted.setdefault(qualname.rsplit(".", 1)[-1], []).append(old)
    candidates: dict[str, list[str]] = {}
    for entity_id, _path, _name, qualname in index_store.entities_with_names(index_conn, list(wanted)):
        candidates.setdefault(qualname, []).append(entity_id)
    for old in missing:
        found = candidates.get(old.split("::", 1)[1].split("~", 1)[0], [])
        if len(found) == 1:
            out[old] = found[0]
    return out
