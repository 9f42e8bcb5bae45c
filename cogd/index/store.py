"""The code index projection: SQLite tables for files, entities, edges and FTS5.

``.cogd/index/index.db`` is a projection (docs/architecture.md): it can be deleted and
rebuilt from the work tree at any time. One writer (the indexer); any number of
readers, which WAL mode serves from the last committed state while a write is
under way.
"""

from __future__ import annotations

import operator
import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from cogd import safepath
from cogd.inlist import MAX_PARAMS, chunked, marks

if TYPE_CHECKING:  # annotations only: readers of the index need no parser loaded
    from cogd.index.extract import Entity, ParsedFile

SCHEMA_VERSION = "2"  # a different stored version drops and rebuilds the projection

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    language TEXT NOT NULL,
    hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,   -- 0 when too recent to trust (racy clean check)
    status TEXT NOT NULL,        -- ok, or why not: too_large | binary | minified | unreadable | timeout | language_disabled | symlink_outside
    indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS entities (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    subkind TEXT NOT NULL DEFAULT '',
    path TEXT NOT NULL,
    name TEXT NOT NULL,
    qualname TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    language TEXT NOT NULL,
    signature TEXT NOT NULL DEFAULT '',
    doc TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL,
    parent_id TEXT
);
CREATE INDEX IF NOT EXISTS entities_path ON entities(path);
CREATE INDEX IF NOT EXISTS entities_name ON entities(name);
CREATE INDEX IF NOT EXISTS entities_parent ON entities(parent_id);
CREATE INDEX IF NOT EXISTS entities_kind ON entities(kind);
CREATE TABLE IF NOT EXISTS edges (
    src TEXT NOT NULL,
    dst TEXT NOT NULL,           -- an entity id, or a module/base name when resolution = 'external'
    kind TEXT NOT NULL,          -- contains | imports | calls | inherits
    path TEXT NOT NULL,          -- the file whose parse produced the edge
    resolution TEXT NOT NULL DEFAULT '',  -- how a reference found its target (see resolve.py)
    PRIMARY KEY (src, dst, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (    -- unresolved references, kept to re-resolve without re-parsing
    path TEXT NOT NULL,
    src TEXT NOT NULL,
    kind TEXT NOT NULL,              -- calls | imports | inherits
    name TEXT NOT NULL,
    qualifier TEXT NOT NULL,
    alias TEXT NOT NULL,
    line INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refs_path ON refs(path);
CREATE INDEX IF NOT EXISTS refs_name ON refs(name);
CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst, kind);
CREATE INDEX IF NOT EXISTS edges_path ON edges(path);
CREATE VIRTUAL TABLE IF NOT EXISTS entities_fts USING fts5(
    path, name, signature, doc, body,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
"""

ENTITY_COLUMNS = (
    "id", "kind", "subkind", "path", "name", "qualname", "start_line", "end_line",
    "language", "signature", "doc", "hash", "parent_id",
)

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def split_identifier(text: str) -> str:
    """Words of every identifier in ``text``: ``getHTTPResponse_code`` → ``get HTTP Response code``.

    FTS5's unicode61 tokenizer already splits on ``_`` and ``.``; this adds the
    camelCase boundaries it cannot see, so "email message" finds ``EmailMessage``.
    """
    return " ".join(_CAMEL.findall(text))


def _drop_if_outdated(conn: sqlite3.Connection) -> None:
    """Drop every table when the stored schema version differs from ours.

    The index is a projection of the work tree, so dropping it loses nothing:
    the next refresh rebuilds it.
    """
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:
        return  # a new database
    if row is not None and row[0] == SCHEMA_VERSION:
        return
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'entities_fts_%'")]
    for table in tables:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    conn.commit()


def connect(path: Path, *, readonly: bool = False, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open the index database in WAL mode (creating the schema unless ``readonly``).

    ``check_same_thread``: leave it on and give each thread its own connection;
    off only for a per-thread reader that another thread closes at shutdown
    (see :meth:`cogd.daemon.service.Service.close`). Raises sqlite3.Error when
    the file is not a database.
    """
    if readonly:
        safepath.prepare_db(path, create=False)  # SQLite follows links: lstat its files first
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0,
                               check_same_thread=check_same_thread)
    else:
        safepath.prepare_db(path)  # folders 0700, files 0600, no links (raises UnsafePath)
        conn = sqlite3.connect(path, timeout=5.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        _drop_if_outdated(conn)
        conn.executescript(SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        conn.commit()
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


# Indexes over columns a bulk load writes in no particular order: maintained row by row they
# cost a b-tree insert each (most of a full build's writes); built once at the end, a sort.
SECONDARY_INDEXES = tuple(re.findall(r"CREATE INDEX IF NOT EXISTS (\w+) ON", SCHEMA))
# A bulk load keeps SQLite's default page cache (2,000 KiB): its writes are appends (rowids,
# and ids and paths in ascending order), so a larger cache holds pages nothing reads again. A
# 64 MB cache for the writer and as much for the index build beside it were 128 MB of a daemon's
# peak resident size on the standard library, for no measurable speed (docs/architecture.md,
# "The daemon's memory while it indexes"). The index builds' sorts stay in memory
# (temp_store=MEMORY): the sorter holds the keys it sorts (14 MB more peak there than a sort
# that spills) and never writes them to a temporary file, which SQLite would create outside
# .cogd/ (in the system's temporary directory).
BULK_TEMP_STORE = "MEMORY"
_INDEX_STATEMENTS = dict(zip(SECONDARY_INDEXES, re.findall(r"CREATE INDEX IF NOT EXISTS [^;]+", SCHEMA)))
# The indexes a bulk load can build while its references are being resolved: those over the
# tables the resolution only reads (the edges it writes afterwards).
RESOLUTION_SAFE_INDEXES = tuple(name for name in SECONDARY_INDEXES if not name.startswith("edges_"))


def begin_bulk(conn: sqlite3.Connection) -> None:
    """Before filling an empty index in one refresh: drop the secondary indexes and keep the
    writer's sorts in memory (:data:`BULK_TEMP_STORE`; it stays so). :func:`end_bulk` builds
    the indexes again (so does :func:`connect`, should the process die first). Readers
    meanwhile search by id, FTS and edges' key as always; lookups by name or path scan, on a
    table still being filled. Commits."""
    conn.commit()
    conn.execute(f"PRAGMA temp_store={BULK_TEMP_STORE}")  # outside a transaction, as SQLite requires
    for name in SECONDARY_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    conn.commit()


def end_bulk(conn: sqlite3.Connection) -> None:
    """After a bulk load (:func:`begin_bulk`): build the secondary indexes still missing (see
    :func:`build_indexes`). No commit."""
    for statement in _INDEX_STATEMENTS.values():
        conn.execute(statement)


def build_indexes(path: Path, names: Sequence[str] = SECONDARY_INDEXES) -> None:
    """Build the secondary indexes ``names`` (of :data:`SECONDARY_INDEXES`) of the index at
    ``path`` on a connection of its own, and commit.

    Why a connection of its own: a bulk load's writer (:func:`begin_bulk`) runs this in a
    thread while its own thread resolves references in Python; SQLite builds an index without
    holding the GIL, so the sort runs on the core the parse pool no longer uses. The writer
    must hold no write transaction meanwhile (SQLite has one writer at a time: this one waits
    up to the busy timeout, then raises sqlite3.OperationalError). An index that exists is
    left as it is. Raises sqlite3.Error, safepath.UnsafePath.
    """
    safepath.prepare_db(path, create=False)
    conn = sqlite3.connect(path, timeout=5.0)
    try:
        conn.execute(f"PRAGMA temp_store={BULK_TEMP_STORE}")  # the sort in memory, no temporary file
        for name in names:
            conn.execute(_INDEX_STATEMENTS[name])
        conn.commit()
    finally:
        conn.close()


def close_writer(conn: sqlite3.Connection) -> None:
    """Fold the WAL into ``index.db`` (``PRAGMA wal_checkpoint(TRUNCATE)``) and close the connection.

    At a clean stop, so that no multi-MB ``index.db-wal`` is left behind: the
    last connection to close removes the (now empty) WAL file. A checkpoint
    that fails (a reader still busy) only leaves the WAL for the next open.
    """
    try:
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass
    finally:
        conn.close()


def get_meta(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else default


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))


def known_files(conn: sqlite3.Connection, paths: Iterable[str] | None = None) -> dict[str, sqlite3.Row]:
    """Every indexed file's row (``path, language, hash, size, mtime_ns, status, indexed_at`` by name), keyed by path;
    with ``paths``, only those of them that are indexed (chunked: a save reads one row, not the
    whole table's ~2,000 on the standard library, 2 ms of its CPU).

    Rows are :class:`sqlite3.Row` whatever the connection's row factory.
    """
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    if paths is None:
        return {row["path"]: row for row in cursor.execute("SELECT * FROM files")}
    found: dict[str, sqlite3.Row] = {}
    for chunk in chunked(_distinct(paths)):
        found.update((row["path"], row) for row in cursor.execute(
            f"SELECT * FROM files WHERE path IN ({marks(len(chunk))})", chunk))
    return found


def delete_file(conn: sqlite3.Connection, path: str) -> None:
    """Remove a file and everything its parse produced (entities, FTS rows, edges)."""
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM entities WHERE path = ?", (path,))]
    conn.executemany("DELETE FROM entities_fts WHERE rowid = ?", [(r,) for r in rowids])
    conn.execute("DELETE FROM entities WHERE path = ?", (path,))
    conn.execute("DELETE FROM edges WHERE path = ?", (path,))
    conn.execute("DELETE FROM refs WHERE path = ?", (path,))
    conn.execute("DELETE FROM files WHERE path = ?", (path,))


def _fts_row(entity: Entity, path_words: str | None = None) -> tuple[str, str, str, str, str]:
    """The FTS5 row of ``entity``; ``path_words``: its path's words when the caller has them (the
    same for every entity of a file)."""
    name_words = f"{entity.qualname} {split_identifier(entity.qualname)}"
    if path_words is None:
        path_words = f"{entity.path} {split_identifier(entity.path)}"
    return (path_words, name_words, entity.signature, entity.doc, entity.body)


class FileRows(NamedTuple):
    """What :func:`write_files` stores for one parsed file, as plain rows (cheap to pickle).

    ``entities``: one tuple per entity in :data:`ENTITY_COLUMNS` order;
    ``fts``: its FTS5 row (path, name, signature, doc, body words), in the same
    order; ``edges``: ``(src, dst, kind)``; ``refs``: ``(src, kind, name,
    qualifier, alias, line)``. Parser processes return these, so the writer
    only binds them.
    """

    path: str
    language: str
    hash: str
    entities: list[tuple]
    fts: list[tuple[str, str, str, str, str]]
    edges: list[tuple[str, str, str]]
    refs: list[tuple[str, str, str, str, str, int]]


def file_rows(parsed: ParsedFile) -> FileRows:
    """The rows of ``parsed`` (see :class:`FileRows`)."""
    words: dict[str, str] = {}  # path → its words: one split per file, not per entity
    fts = []
    for entity in parsed.entities:
        path_words = words.get(entity.path)
        if path_words is None:
            path_words = words[entity.path] = f"{entity.path} {split_identifier(entity.path)}"
        fts.append(_fts_row(entity, path_words))
    return FileRows(
        parsed.path, parsed.language, parsed.entities[0].hash if parsed.entities else "",
        list(map(_ENTITY_ROW, parsed.entities)), fts, list(map(_EDGE_ROW, parsed.edges)),
        list(map(tuple, parsed.references)),
    )


_ENTITY_ROW = operator.attrgetter(*ENTITY_COLUMNS)  # an entity's row, in ENTITY_COLUMNS order
_EDGE_ROW = operator.attrgetter("src", "dst", "kind")


class ResolutionTables:
    """What a full reference resolution reads of the index (:func:`entity_table`, :func:`all_refs`),
    kept by :func:`write_files` as it writes the rows, so that the resolution of a bulk load
    after its last file need not read them back.

    ``entities``: ``(id, kind, path, parent_id, name, start_line)`` in rowid order; ``refs``:
    ``{path: [(src, kind, name, qualifier, alias), ...]}`` in stored order. Exact only while
    every write appended new rows: ``valid`` turns False for good when a file was rewritten or
    deleted, and the resolution then reads the tables (:meth:`cogd.index.resolve.Resolver.preload`).

    Names, kinds and qualifiers are kept as one string object per distinct value (the rows of
    each file arrive unpickled from a parser process, each with its own copies): on the
    standard library 220,980 references hold 17,359 distinct names and 11,141 qualifiers, and
    the copies were 13 of the writer's 53 MB of Python objects when its last file was written.
    """

    __slots__ = ("entities", "refs", "valid", "_strings")

    def __init__(self) -> None:
        self.entities: list[tuple[str, str, str, str | None, str, int]] = []
        self.refs: dict[str, list[tuple[str, str, str, str, str]]] = {}
        self.valid = True
        self._strings: dict[str, str] = {}  # each distinct name, kind or qualifier: its one kept object

    def add(self, rows: FileRows) -> None:
        """Keep the rows of one file just inserted (none of it stored before)."""
        one = self._strings.setdefault
        self.entities.extend((e[0], one(e[1], e[1]), e[3], e[12], one(e[4], e[4]), e[6]) for e in rows.entities)
        if rows.refs:
            self.refs.setdefault(rows.path, []).extend(
                (src, one(kind, kind), one(name, name), one(qualifier, qualifier), alias)
                for src, kind, name, qualifier, alias, *_rest in rows.refs)


def write_file(
    conn: sqlite3.Connection,
    parsed: ParsedFile,
    *,
    size: int,
    mtime_ns: int,
    status: str,
    now: float,
    keep: ResolutionTables | None = None,
) -> None:
    """Replace everything stored for ``parsed.path`` with ``parsed`` (no commit); ``keep``: see
    :func:`write_files`."""
    write_files(conn, [(file_rows(parsed), size, mtime_ns, status)], now=now, replaced=[parsed.path], keep=keep)


def delete_files(conn: sqlite3.Connection, paths: Sequence[str]) -> None:
    """:func:`delete_file` for each of ``paths``, one statement per table (no commit)."""
    if not paths:
        return
    keys = [(path,) for path in paths]
    rowids = [(r[0],) for chunk in chunked(list(paths))
              for r in conn.execute(f"SELECT rowid FROM entities WHERE path IN ({marks(len(chunk))})", chunk)]
    conn.executemany("DELETE FROM entities_fts WHERE rowid = ?", rowids)
    for table in ("entities", "edges", "refs", "files"):
        conn.executemany(f"DELETE FROM {table} WHERE path = ?", keys)


def write_files(
    conn: sqlite3.Connection,
    files: Sequence[tuple[FileRows, int, int, str]],
    *,
    now: float,
    replaced: Sequence[str] | None = None,
    keep: ResolutionTables | None = None,
) -> None:
    """Store ``(rows, size, mtime_ns, status)`` files (:func:`file_rows`), one ``executemany`` per table (no commit).

    ``replaced``: the paths among them that may already be stored (None: all of them). A
    stored file is rewritten in place (:func:`_rewrite_file`): only the rows that differ are
    deleted, updated or inserted, so a save touches a few pages rather than every index entry
    of the file. New entities get the next free rowids in order, and their FTS rows the same
    rowids, exactly as writing the files one by one with :func:`write_file` would. The
    ``imports``/``calls``/``inherits`` edges of a rewritten file stay until the reference
    resolution that follows replaces them (:func:`cogd.index.resolve.resolve`). ``keep``: the
    resolution's tables to add the new rows to (:class:`ResolutionTables`).
    """
    candidates = [rows.path for rows, *_rest in files] if replaced is None else list(replaced)
    stored = _stored_entities(conn, candidates)
    if keep is not None and stored:
        keep.valid = False  # stored rows rewritten: the kept tables no longer match the index
    delete_files(conn, [path for path in candidates if path not in stored])  # stray rows without entities
    first = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM entities").fetchone()[0]
    file_rows_, entity_rows, fts_rows, edge_rows, ref_rows = [], [], [], [], []
    for rows, size, mtime_ns, status in files:
        path = rows.path
        if path in stored:
            first = _rewrite_file(conn, rows, stored.pop(path), first)
            conn.execute("UPDATE files SET language = ?, hash = ?, size = ?, mtime_ns = ?, status = ?, indexed_at = ? "
                         "WHERE path = ?", (rows.language, rows.hash, size, mtime_ns, status, now, path))
            continue
        file_rows_.append((path, rows.language, rows.hash, size, mtime_ns, status, now))
        # Explicit rowids let entities and their FTS rows go in as two batches
        # instead of one statement per entity (the FTS rowid must match).
        entity_rows.extend((rowid, *entity) for rowid, entity in enumerate(rows.entities, first))
        fts_rows.extend((rowid, *fts) for rowid, fts in enumerate(rows.fts, first))
        first += len(rows.entities)
        edge_rows.extend((*edge, path) for edge in rows.edges)
        ref_rows.extend((path, *ref) for ref in rows.refs)
        if keep is not None:
            keep.add(rows)
    conn.executemany(
        "INSERT INTO files(path, language, hash, size, mtime_ns, status, indexed_at) VALUES (?,?,?,?,?,?,?)",
        file_rows_)
    _insert_entities(conn, entity_rows, fts_rows)
    conn.executemany("INSERT OR IGNORE INTO edges(src, dst, kind, path) VALUES (?,?,?,?)", edge_rows)
    conn.executemany("INSERT INTO refs(path, src, kind, name, qualifier, alias, line) VALUES (?,?,?,?,?,?,?)",
                     ref_rows)


def _insert_entities(conn: sqlite3.Connection, entity_rows: list[tuple], fts_rows: list[tuple]) -> None:
    conn.executemany(
        f"INSERT INTO entities(rowid, {', '.join(ENTITY_COLUMNS)}) VALUES (?, {', '.join('?' * len(ENTITY_COLUMNS))})",
        entity_rows)
    conn.executemany("INSERT INTO entities_fts(rowid, path, name, signature, doc, body) VALUES (?,?,?,?,?,?)",
                     fts_rows)


def _stored_entities(conn: sqlite3.Connection, paths: Sequence[str]) -> dict[str, list[tuple]]:
    """``{path: [(rowid, *ENTITY_COLUMNS), ...]}`` in rowid order, for the ``paths`` that have entities."""
    found: dict[str, list[tuple]] = {}
    for chunk in chunked(_distinct(paths)):
        for row in conn.execute(f"SELECT rowid, {', '.join(ENTITY_COLUMNS)} FROM entities "
                                f"WHERE path IN ({marks(len(chunk))}) ORDER BY rowid", chunk):
            found.setdefault(row[4], []).append(tuple(row))
    return found


def _kept_prefix(old_keys: list, new_keys: list) -> int:
    """How many leading rows of ``new_keys`` can keep their stored rows: the longest prefix whose
    keys appear among ``old_keys`` in increasing stored order (so stored order stays file order)."""
    position = {key: n for n, key in enumerate(old_keys)}
    last, kept = -1, 0
    for key in new_keys:
        at = position.get(key)
        if at is None or at <= last:
            break
        last, kept = at, kept + 1
    return kept


def _rewrite_file(conn: sqlite3.Connection, rows: FileRows, old: list[tuple], first: int) -> int:
    """Bring one stored file's entities, FTS rows, ``contains`` edges and references to ``rows``,
    writing only what differs. Returns the next free entity rowid.

    Rows keep their place, so that the stored order of a file's entities and references is
    the file's order, as a full rebuild writes them (resolution reads both in stored order):
    the longest prefix of the new entities found in the same order among the stored ones
    keeps its rowids (each updated in the columns that changed; its FTS row rewritten only
    when its text changed); every other stored entity is deleted and every other new one
    inserted with the next rowids. References likewise: the common prefix stays (its line
    numbers updated), the rest is replaced.
    """
    path = rows.path
    new_ids = [entity[0] for entity in rows.entities]
    kept = _kept_prefix([row[1] for row in old], new_ids)
    old_by_id = {row[1]: row for row in old}
    keep = {new_ids[n]: n for n in range(kept)}
    drop = [row[0] for row in old if row[1] not in keep]
    if drop:
        for chunk in chunked(drop):
            conn.execute(f"DELETE FROM entities_fts WHERE rowid IN ({marks(len(chunk))})", chunk)
            conn.execute(f"DELETE FROM entities WHERE rowid IN ({marks(len(chunk))})", chunk)
    changed: dict[tuple[int, ...], list[tuple]] = {}
    kept_rowids = [old_by_id[new_ids[n]][0] for n in range(kept)]
    old_fts: dict[int, tuple] = {}
    for chunk in chunked(kept_rowids):
        old_fts.update((r[0], tuple(r)[1:]) for r in conn.execute(
            f"SELECT rowid, path, name, signature, doc, body FROM entities_fts WHERE rowid IN ({marks(len(chunk))})",
            chunk))
    fts_again: list[tuple] = []
    for n in range(kept):
        entity, before = rows.entities[n], old_by_id[new_ids[n]]
        rowid = before[0]
        columns = tuple(i for i, value in enumerate(entity) if value != before[i + 1])
        if columns:
            changed.setdefault(columns, []).append((*(entity[i] for i in columns), rowid))
        if old_fts.get(rowid) != tuple(rows.fts[n]):
            fts_again.append((rowid, *rows.fts[n]))
    for columns, values in changed.items():  # only the indexes of the changed columns are touched
        conn.executemany(f"UPDATE entities SET {', '.join(f'{ENTITY_COLUMNS[i]} = ?' for i in columns)} "
                         "WHERE rowid = ?", values)
    if fts_again:
        conn.executemany("DELETE FROM entities_fts WHERE rowid = ?", [(r[0],) for r in fts_again])
        conn.executemany("INSERT INTO entities_fts(rowid, path, name, signature, doc, body) VALUES (?,?,?,?,?,?)",
                         fts_again)
    fresh = list(range(kept, len(rows.entities)))
    _insert_entities(conn, [(rowid, *rows.entities[n]) for rowid, n in enumerate(fresh, first)],
                     [(rowid, *rows.fts[n]) for rowid, n in enumerate(fresh, first)])
    first += len(fresh)
    # contains edges: a set (the table's key), so a plain difference
    stored_edges = {tuple(r) for r in conn.execute("SELECT src, dst, kind FROM edges WHERE path = ? AND kind = 'contains'",
                                                   (path,))}
    wanted_edges = {tuple(edge) for edge in rows.edges}
    conn.executemany("DELETE FROM edges WHERE src = ? AND dst = ? AND kind = ?", sorted(stored_edges - wanted_edges))
    conn.executemany("INSERT OR IGNORE INTO edges(src, dst, kind, path) VALUES (?,?,?,?)",
                     [(*edge, path) for edge in rows.edges if tuple(edge) not in stored_edges])
    # references: the common prefix (by everything but the line) stays in place
    stored_refs = [tuple(r) for r in conn.execute("SELECT rowid, src, kind, name, qualifier, alias, line FROM refs "
                                                  "WHERE path = ? ORDER BY rowid", (path,))]
    same = 0
    for before, ref in zip(stored_refs, rows.refs):
        if tuple(before[1:6]) != tuple(ref[:5]):
            break
        same += 1
    conn.executemany("UPDATE refs SET line = ? WHERE rowid = ?",
                     [(rows.refs[n][5], stored_refs[n][0]) for n in range(same) if stored_refs[n][6] != rows.refs[n][5]])
    rest = [r[0] for r in stored_refs[same:]]
    for chunk in chunked(rest):
        conn.execute(f"DELETE FROM refs WHERE rowid IN ({marks(len(chunk))})", chunk)
    conn.executemany("INSERT INTO refs(path, src, kind, name, qualifier, alias, line) VALUES (?,?,?,?,?,?,?)",
                     [(path, *ref) for ref in rows.refs[same:]])
    return first


def update_file_stat(conn: sqlite3.Connection, path: str, size: int, mtime_ns: int) -> None:
    """Record a new size/mtime for a file whose content hash did not change."""
    conn.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", (size, mtime_ns, path))


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """``files``, ``entities`` (code entities), ``file_entities`` (one per indexed file, embedded
    too: the embedding total is their sum) and ``edges`` row counts."""
    return {
        "files": conn.execute("SELECT count(*) FROM files").fetchone()[0],
        "entities": conn.execute("SELECT count(*) FROM entities WHERE kind != 'file'").fetchone()[0],
        "file_entities": conn.execute("SELECT count(*) FROM entities WHERE kind = 'file'").fetchone()[0],
        "edges": conn.execute("SELECT count(*) FROM edges").fetchone()[0],
    }


# ---- reading -----------------------------------------------------------------------------
# Every query on the index's tables (files, entities, edges, refs, entities_fts, meta) lives in
# this module; other modules call these functions and never write SQL against the tables, so a
# schema change is made and checked here. The functions take any connection to index.db (the
# row factory does not matter: results are plain tuples, dicts, sets or dataclasses) and raise
# sqlite3.Error when the database is broken or holds no index.


#: The columns a ranked hit carries, in :class:`cogd.retrieve.lexical.Hit` order.
SUMMARY_COLUMNS = (
    "id", "kind", "subkind", "path", "name", "qualname", "start_line", "end_line", "signature", "doc", "parent_id",
)



def _query(conn: sqlite3.Connection, sql: str, args: Sequence[object] = ()) -> sqlite3.Cursor:
    """``conn.execute(sql, args)`` on a cursor that yields plain tuples whatever ``conn.row_factory``
    (no per-row conversion: the whole-index scans read tens of thousands of rows)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(sql, args)


def _select(columns: Sequence[str], prefix: str = "") -> str:
    """``columns`` as a SELECT list; each must be an entity column (ValueError otherwise: no SQL from callers)."""
    unknown = [c for c in columns if c not in ENTITY_COLUMNS]
    if unknown or not columns:
        raise ValueError(f"not entity columns: {unknown or 'none given'}; columns are {', '.join(ENTITY_COLUMNS)}")
    return ", ".join(prefix + c for c in columns)


def _distinct(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def entities_by_ids(
    conn: sqlite3.Connection, ids: Iterable[str], columns: Sequence[str] = SUMMARY_COLUMNS,
) -> dict[str, tuple]:
    """``{id: row}`` for those of ``ids`` the index holds (unknown ids are absent).

    ``row`` is a tuple of ``columns`` (entity columns, :data:`ENTITY_COLUMNS`;
    default :data:`SUMMARY_COLUMNS`), in that order. Any number of ids: the
    lookup runs in chunks of :data:`MAX_PARAMS`. Raises ValueError for an
    unknown column.
    """
    select = _select(columns)
    found: dict[str, tuple] = {}
    for chunk in chunked(_distinct(ids)):
        for row in _query(conn, f"SELECT id, {select} FROM entities WHERE id IN ({marks(len(chunk))})", chunk):
            found[row[0]] = row[1:]
    return found


def existing_ids(conn: sqlite3.Connection, ids: Iterable[str]) -> set[str]:
    """Those of ``ids`` that name an entity in the index (any number, chunked)."""
    found: set[str] = set()
    for chunk in chunked(_distinct(ids)):
        found.update(r[0] for r in _query(conn, f"SELECT id FROM entities WHERE id IN ({marks(len(chunk))})", chunk))
    return found


def entity_exists(conn: sqlite3.Connection, entity_id: str) -> bool:
    """Whether ``entity_id`` names an entity in the index."""
    return _query(conn, "SELECT 1 FROM entities WHERE id = ?", (entity_id,)).fetchone() is not None


def entity_hashes(conn: sqlite3.Connection, ids: Iterable[str]) -> dict[str, str]:
    """``{id: content hash}`` (xxh3-64 hex, as :func:`cogd.index.extract.content_hash`) for those of ``ids`` held."""
    return {entity_id: row[0] for entity_id, row in entities_by_ids(conn, ids, ("hash",)).items()}


def entities_in_paths(
    conn: sqlite3.Connection, paths: Iterable[str], columns: Sequence[str] = SUMMARY_COLUMNS,
    *, kinds: Sequence[str] | None = None,
) -> list[tuple]:
    """Rows (tuples of ``columns``) of the entities defined in ``paths`` (root-relative).

    ``kinds``: the entity kinds to keep; None keeps every kind but ``file``
    (the definitions, not the file's own entity). Each path's entities come
    in index order (the order the extractor produced them). Any number of
    paths, chunked. Raises ValueError for an unknown column.
    """
    select = _select(columns)
    kind_sql, kind_args = ("kind != 'file'", []) if kinds is None else (f"kind IN ({marks(len(kinds))})", list(kinds))
    if kinds is not None and not kinds:
        return []
    rows: list[tuple] = []
    for chunk in chunked(_distinct(paths), MAX_PARAMS - len(kind_args)):
        rows.extend(_query(
            conn, f"SELECT {select} FROM entities WHERE path IN ({marks(len(chunk))}) AND {kind_sql} ORDER BY rowid",
            [*chunk, *kind_args]))
    return rows


def entities_named(conn: sqlite3.Connection, names: Iterable[str]) -> list[tuple[str, str, str, str | None, str]]:
    """``(id, kind, path, parent_id, name)`` of every non-file entity whose name is one of ``names`` (chunked)."""
    rows: list[tuple[str, str, str, str | None, str]] = []
    for chunk in chunked(_distinct(names)):
        rows.extend(_query(
            conn, f"SELECT id, kind, path, parent_id, name FROM entities WHERE name IN ({marks(len(chunk))}) "
            "AND kind != 'file'", chunk))
    return rows


def name_counts(conn: sqlite3.Connection, names: Iterable[str]) -> dict[str, int]:
    """``{name: number of entities of that name}`` for ``names`` (file entities included; one
    pass over the name index per chunk, no table rows read)."""
    found: dict[str, int] = {}
    for chunk in chunked(_distinct(names)):
        found.update((r[0], r[1]) for r in _query(
            conn, f"SELECT name, count(*) FROM entities WHERE name IN ({marks(len(chunk))}) GROUP BY name", chunk))
    return found


def entities_named_in_paths(conn: sqlite3.Connection, names: Sequence[str],
                            paths: Sequence[str]) -> list[tuple[int, str, str, str, str | None, str]]:
    """``(rowid, id, kind, path, parent_id, name)`` of the non-file entities of ``paths`` whose
    name is one of ``names``, in rowid order (chunked by paths)."""
    rows: list[tuple[int, str, str, str, str | None, str]] = []
    half = MAX_PARAMS // 2
    for some_names in chunked(_distinct(names), half):
        for chunk in chunked(_distinct(paths), half):
            rows.extend(tuple(r) for r in _query(
                conn, f"SELECT rowid, id, kind, path, parent_id, name FROM entities INDEXED BY entities_path "
                      f"WHERE path IN ({marks(len(chunk))}) AND name IN ({marks(len(some_names))}) AND kind != 'file'",
                (*chunk, *some_names)))
    return sorted(rows)


def definitions_of(conn: sqlite3.Connection, name: str, kinds: Sequence[str], languages: Sequence[str],
                   limit: int) -> list[tuple[str, str, str, str | None]]:
    """Up to ``limit`` ``(id, kind, path, parent_id)`` of the entities named ``name`` of one of
    ``kinds`` in one of ``languages`` (read through the name index, stopping at ``limit``)."""
    return [tuple(r) for r in _query(
        conn, f"SELECT id, kind, path, parent_id FROM entities INDEXED BY entities_name WHERE name = ? "
              f"AND kind IN ({marks(len(kinds))}) AND language IN ({marks(len(languages))}) LIMIT ?",
        (name, *kinds, *languages, int(limit)))]


def members(conn: sqlite3.Connection, parent_id: str) -> list[tuple[str, str]]:
    """``(id, name)`` of the entities directly inside ``parent_id``, last defined first (so that, put
    in a dict by name, the first definition of a repeated name wins)."""
    return list(_query(
        conn, "SELECT id, name FROM entities WHERE parent_id = ? ORDER BY start_line DESC", (parent_id,)))


def child_names(conn: sqlite3.Connection, parent_ids: Iterable[str], per_parent: int) -> dict[str, list[str]]:
    """``{parent id: names of its first ``per_parent`` children by start line}`` (parents without children absent).

    One query for all parents (a window function ranks each parent's children).
    """
    found: dict[str, list[str]] = {}
    for chunk in chunked(_distinct(parent_ids), MAX_PARAMS - 1):
        for parent, name in _query(
                conn, "SELECT parent_id, name FROM (SELECT parent_id, name, start_line, row_number() OVER "
                "(PARTITION BY parent_id ORDER BY start_line) AS n FROM entities "
                f"WHERE parent_id IN ({marks(len(chunk))})) WHERE n <= ? ORDER BY parent_id, n", [*chunk, per_parent]):
            found.setdefault(parent, []).append(name)
    return found


def definitions_at(
    conn: sqlite3.Connection, path: str, start_line: int, end_line: int, kinds: Sequence[str],
) -> list[tuple[str, int, int]]:
    """``(id, start_line, end_line)`` of the ``kinds`` entities in ``path`` overlapping lines
    ``start_line``..``end_line`` (1-based, inclusive), narrowest span first."""
    if not kinds:
        return []
    return list(_query(
        conn, f"SELECT id, start_line, end_line FROM entities WHERE path = ? AND kind IN ({marks(len(kinds))}) "
        "AND start_line <= ? AND end_line >= ? ORDER BY end_line - start_line",
        (path, *kinds, end_line, start_line)))


def entity_paths(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """``(id, path)`` of every entity, in index order (one scan; for whole-graph computations)."""
    return list(_query(conn, "SELECT id, path FROM entities ORDER BY rowid"))


def entity_states(conn: sqlite3.Connection) -> dict[str, tuple[str, str, str]]:
    """``{id: (content hash, kind, path)}`` of every entity (one scan; what the embedder compares against).

    The entities of one file share one path string and every kind is interned: SQLite hands
    out a new string per row, which for the standard library's 60,445 entities (1,796 paths,
    5 kinds) was 7.6 MB of copies in a map an embedding pass holds while its first tier syncs."""
    paths: dict[str, str] = {}
    return {r[0]: (r[1], sys.intern(r[2]), paths.setdefault(r[3], r[3]))
            for r in _query(conn, "SELECT id, hash, kind, path FROM entities")}


def embedding_rows(conn: sqlite3.Connection, ids: Iterable[str]) -> list[tuple]:
    """``(id, kind, qualname, signature, doc, path, hash, body)`` of those of ``ids`` held (chunked).

    ``body`` is the source text stored for search; an entity without its FTS
    row (never written that way) is left out rather than embedded without a body.
    """
    rows: list[tuple] = []
    for chunk in chunked(_distinct(ids)):
        rows.extend((*r[:7], r[7] or "") for r in _query(
            conn, "SELECT e.id, e.kind, e.qualname, e.signature, e.doc, e.path, e.hash, f.body "
            f"FROM entities e JOIN entities_fts f ON f.rowid = e.rowid WHERE e.id IN ({marks(len(chunk))})",
            chunk))
    return rows


def entity_detail(conn: sqlite3.Connection, entity_id: str) -> dict | None:
    """Everything the index holds about one entity, or None when it holds none.

    ``{"entity": {column: value for ENTITY_COLUMNS}, "edges": {"out": [{"id", "kind",
    "resolution"}], "in": [...]}, "body": str}``; ``out`` edges sorted by kind then
    destination, ``in`` by kind then source; ``body`` '' when the FTS row is missing.
    """
    row = _query(
        conn, f"SELECT {_select(ENTITY_COLUMNS, 'e.')}, f.body FROM entities e "
        "LEFT JOIN entities_fts f ON f.rowid = e.rowid WHERE e.id = ?", (entity_id,)).fetchone()
    if row is None:
        return None
    values = tuple(row)
    outgoing = [{"id": r[0], "kind": r[1], "resolution": r[2]} for r in _query(
        conn, "SELECT dst, kind, resolution FROM edges WHERE src = ? ORDER BY kind, dst", (entity_id,))]
    incoming = [{"id": r[0], "kind": r[1], "resolution": r[2]} for r in _query(
        conn, "SELECT src, kind, resolution FROM edges WHERE dst = ? ORDER BY kind, src", (entity_id,))]
    return {"entity": dict(zip(ENTITY_COLUMNS, values)), "edges": {"out": outgoing, "in": incoming},
            "body": values[-1] or ""}


def search_fts(
    conn: sqlite3.Connection, match: str, weights: Sequence[float], *, limit: int,
    kinds: Sequence[str] | None = None,
) -> list[tuple]:
    """Entities whose FTS row matches the FTS5 expression ``match``, best first, at most ``limit``.

    Rows are :data:`SUMMARY_COLUMNS` plus the score ``-bm25(entities_fts, *weights)``
    (Okapi BM25 as FTS5 computes it, negated so that higher is better);
    ``weights`` are the five column weights (path, name, signature, doc,
    body). ``kinds`` restricts entity kinds inside the query, before the
    limit cut. Raises ValueError for a weight count other than five,
    sqlite3.Error for a malformed expression or a broken index.
    """
    if len(weights) != 5:
        raise ValueError(f"bm25 needs five column weights (path, name, signature, doc, body), got {len(weights)}")
    bm25 = ", ".join(str(float(w)) for w in weights)
    sql = (f"SELECT {_select(SUMMARY_COLUMNS, 'e.')}, -bm25(entities_fts, {bm25}) AS score "
           "FROM entities_fts JOIN entities e ON e.rowid = entities_fts.rowid WHERE entities_fts MATCH ?")
    params: list[object] = [match]
    if kinds:
        sql += f" AND e.kind IN ({marks(len(kinds))})"
        params.extend(kinds)
    sql += " ORDER BY score DESC LIMIT ?"
    params.append(limit)
    return list(_query(conn, sql, params))


def edges_touching(
    conn: sqlite3.Connection, ids: Sequence[str], kinds: Sequence[str],
) -> list[tuple[str, str, str, str]]:
    """``(src, dst, kind, resolution)`` of the ``kinds`` edges with either end in ``ids``.

    One query for up to MAX_PARAMS/2 ids (each id is bound twice); more run in
    chunks, an edge met in two chunks reported once.
    """
    ids = _distinct(ids)
    if not ids or not kinds:
        return []
    seen: dict[tuple[str, str, str], tuple[str, str, str, str]] = {}
    for chunk in chunked(ids, max((MAX_PARAMS - len(kinds)) // 2, 1)):
        holes = marks(len(chunk))
        for r in _query(
                conn, f"SELECT src, dst, kind, resolution FROM edges WHERE (src IN ({holes}) OR dst IN ({holes})) "
                f"AND kind IN ({marks(len(kinds))})", [*chunk, *chunk, *kinds]):
            seen.setdefault(r[:3], r)
    return list(seen.values())


def all_edges(conn: sqlite3.Connection) -> Iterator[tuple[str, str, str]]:
    """``(src, dst, kind)`` of every edge, streamed in key order (for whole-graph computations)."""
    yield from _query(conn, "SELECT src, dst, kind FROM edges")


def call_neighbours(
    conn: sqlite3.Connection, entity_id: str, direction: str, limit: int, columns: Sequence[str],
) -> tuple[list[dict], int]:
    """Entities one ``calls`` edge away from ``entity_id``: ``direction`` ``in`` (its callers) or ``out`` (its callees).

    Returns (at most ``limit`` dicts of ``columns`` plus the edge's ``resolution``,
    sorted by path, start line and id; the total count). Edges to ids the
    index does not hold are not counted. Raises ValueError for another direction.
    """
    if direction not in ("in", "out"):
        raise ValueError(f"direction must be 'in' or 'out', got {direction!r}")
    near, far = ("dst", "src") if direction == "in" else ("src", "dst")
    total = _query(
        conn, f"SELECT count(*) FROM edges e JOIN entities n ON n.id = e.{far} WHERE e.{near} = ? AND e.kind = 'calls'",
        (entity_id,)).fetchone()[0]
    rows = _query(
        conn, f"SELECT {_select(columns, 'n.')}, e.resolution FROM edges e JOIN entities n ON n.id = e.{far} "
        f"WHERE e.{near} = ? AND e.kind = 'calls' ORDER BY n.path, n.start_line, n.id LIMIT ?",
        (entity_id, limit)).fetchall()
    keys = (*columns, "resolution")
    return [dict(zip(keys, r)) for r in rows], int(total)


def caller_ids(conn: sqlite3.Connection, entity_id: str) -> list[str]:
    """Distinct sources of the ``calls`` edges into ``entity_id``, sorted (ids the index may no longer hold)."""
    return [r[0] for r in _query(
        conn, "SELECT DISTINCT src FROM edges WHERE dst = ? AND kind = 'calls' ORDER BY src", (entity_id,))]


@dataclass(frozen=True)
class FileSummary:
    """A file as its ``file`` entity describes it: ``lines`` (its last line number) and ``doc`` (module docstring)."""

    path: str
    lines: int
    doc: str


def file_summaries(conn: sqlite3.Connection, paths: Iterable[str]) -> dict[str, FileSummary]:
    """``{path: FileSummary}`` for those of ``paths`` that have a ``file`` entity (chunked)."""
    found: dict[str, FileSummary] = {}
    for chunk in chunked(_distinct(paths)):
        for entity_id, end_line, doc in _query(
            conn, f"SELECT id, end_line, doc FROM entities WHERE id IN ({marks(len(chunk))}) AND kind = 'file'", chunk):
            found[entity_id] = FileSummary(entity_id, end_line, doc)
    return found


def file_languages(conn: sqlite3.Connection, paths: Iterable[str] | None = None) -> dict[str, str]:
    """``{path: language}`` from the ``files`` table: for ``paths`` (those indexed; chunked), or every file when None."""
    if paths is None:
        return {r[0]: r[1] for r in _query(conn, "SELECT path, language FROM files")}
    found: dict[str, str] = {}
    for chunk in chunked(_distinct(paths)):
        found.update((r[0], r[1]) for r in _query(
            conn, f"SELECT path, language FROM files WHERE path IN ({marks(len(chunk))})", chunk))
    return found


def indexed_paths(conn: sqlite3.Connection, paths: Iterable[str]) -> set[str]:
    """Those of ``paths`` (root-relative) that the ``files`` table holds, whatever their status (chunked)."""
    return set(file_languages(conn, paths))


def holds_index(conn: sqlite3.Connection) -> bool:
    """Whether the database has the index's ``files`` table (a foreign or half-made file has not)."""
    return _query(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'files'").fetchone() is not None


def has_files(conn: sqlite3.Connection) -> bool:
    """Whether any file is indexed (a refresh that found no source leaves none)."""
    return _query(conn, "SELECT 1 FROM files LIMIT 1").fetchone() is not None


def skipped_files(conn: sqlite3.Connection) -> dict[str, int]:
    """``{status: file count}`` of the files not indexed as ``ok`` (too_large, binary, …), by status."""
    return {r[0]: r[1] for r in _query(
        conn, "SELECT status, count(*) FROM files WHERE status != 'ok' GROUP BY status ORDER BY status")}


def breakdown(conn: sqlite3.Connection) -> dict[str, list[dict]]:
    """Counts by group, sorted by the group's keys: ``{"entities": [{"language", "kind", "n"}],
    "edges": [{"kind", "resolution", "n"}], "files": [{"language", "status", "n"}]}``."""
    def grouped(table: str, a: str, b: str) -> list[dict]:
        return [{a: r[0], b: r[1], "n": r[2]} for r in _query(
            conn, f"SELECT {a}, {b}, count(*) FROM {table} GROUP BY {a}, {b} ORDER BY {a}, {b}")]
    return {"entities": grouped("entities", "language", "kind"), "edges": grouped("edges", "kind", "resolution"),
            "files": grouped("files", "language", "status")}


# ---- references (read and written by cogd.index.resolve) ---------------------------------

def refs_of(conn: sqlite3.Connection, path: str) -> list[tuple[str, str, str, str, str]]:
    """``(src, kind, name, qualifier, alias)`` of the unresolved references stored for ``path``, in stored order."""
    return list(_query(
        conn, "SELECT src, kind, name, qualifier, alias FROM refs WHERE path = ? ORDER BY rowid", (path,)))


def all_refs(conn: sqlite3.Connection) -> dict[str, list[tuple[str, str, str, str, str]]]:
    """:func:`refs_of` for every file at once: ``{path: [(src, kind, name, qualifier, alias), ...]}``."""
    found: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for row in _query(conn, "SELECT path, src, kind, name, qualifier, alias FROM refs ORDER BY rowid"):
        found.setdefault(row[0], []).append(row[1:])
    return found


def entity_table(conn: sqlite3.Connection) -> list[tuple[str, str, str, str | None, str, int]]:
    """``(id, kind, path, parent_id, name, start_line)`` of every entity, files included, in rowid order."""
    return list(_query(conn, "SELECT id, kind, path, parent_id, name, start_line FROM entities ORDER BY rowid"))


def referenced_names(conn: sqlite3.Connection) -> set[str]:
    """Every name a ``calls`` or ``inherits`` reference mentions (what a full resolution pass loads)."""
    return {r[0] for r in _query(conn, "SELECT DISTINCT name FROM refs WHERE kind != 'imports'")}


def paths_referencing(conn: sqlite3.Connection, names: Iterable[str]) -> set[str]:
    """Files holding a reference to any of ``names`` (chunked)."""
    found: set[str] = set()
    for chunk in chunked(sorted(set(names))):
        found.update(r[0] for r in _query(
            conn, f"SELECT DISTINCT path FROM refs WHERE name IN ({marks(len(chunk))})", chunk))
    return found


def delete_reference_edges(conn: sqlite3.Connection, path: str | None = None) -> None:
    """Delete the ``imports``/``calls``/``inherits`` edges produced by ``path`` (None: every file's). No commit;
    ``contains`` edges, which the parse itself produced, stay."""
    if path is None:
        conn.execute("DELETE FROM edges WHERE kind != 'contains'")
    else:
        conn.execute("DELETE FROM edges WHERE path = ? AND kind != 'contains'", (path,))


def replace_reference_edges(conn: sqlite3.Connection, path: str, edges: list[tuple[str, str, str, str, str]]) -> int:
    """Make ``path``'s ``imports``/``calls``/``inherits`` edges exactly ``edges`` (``(src, dst, kind,
    path, resolution)``), deleting and inserting only the ones that differ. Returns how many
    rows changed. No commit."""
    stored = {tuple(r) for r in conn.execute(
        "SELECT src, dst, kind, path, resolution FROM edges WHERE path = ? AND kind != 'contains'", (path,))}
    wanted = set(edges)
    gone = sorted(stored - wanted)
    conn.executemany("DELETE FROM edges WHERE src = ? AND dst = ? AND kind = ?", [e[:3] for e in gone])
    new = [e for e in edges if e not in stored]
    write_reference_edges(conn, new)
    return len(gone) + len(new)


def reference_edges_from(conn: sqlite3.Connection, path: str, sources: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """``(src, dst, kind, resolution)`` of ``path``'s ``calls``/``inherits`` edges from ``sources`` (chunked)."""
    rows: list[tuple[str, str, str, str]] = []
    for chunk in chunked(list(sources)):
        rows.extend(tuple(r) for r in _query(
            conn, f"SELECT src, dst, kind, resolution FROM edges WHERE path = ? AND kind IN ('calls', 'inherits') "
                  f"AND src IN ({marks(len(chunk))})", (path, *chunk)))
    return rows


def entity_name_of(conn: sqlite3.Connection, ids: Iterable[str]) -> dict[str, str]:
    """``{id: name}`` of the entities among ``ids`` (chunked; ids that are no entity are left out)."""
    found: dict[str, str] = {}
    for chunk in chunked(_distinct(ids)):
        found.update((r[0], r[1]) for r in _query(conn, f"SELECT id, name FROM entities WHERE id IN ({marks(len(chunk))})",
                                                  chunk))
    return found


def write_reference_edges(conn: sqlite3.Connection, edges: Iterable[tuple[str, str, str, str, str]]) -> None:
    """Store ``(src, dst, kind, path, resolution)`` edges; an edge already stored (same src, dst,
    kind) is kept. No commit."""
    conn.executemany("INSERT OR IGNORE INTO edges(src, dst, kind, path, resolution) VALUES (?,?,?,?,?)", edges)


# ---- what the embedder does first (cogd.daemon.embed_order) -----------------------------

def most_referenced_files(conn: sqlite3.Connection, limit: int) -> list[tuple[str, int]]:
    """Up to ``limit`` ``(path, n)`` pairs: the files whose entities other files' ``calls``,
    ``imports`` and ``inherits`` edges point at most (``n`` such edges), most first, ties by path.

    Edges inside one file and edges to external names (no entity) are not counted: this is
    how much the rest of the tree leans on a file. One scan of ``edges``.
    """
    return [(r[0], r[1]) for r in _query(
        conn, "SELECT d.path, count(*) AS n FROM edges g JOIN entities d ON d.id = g.dst "
              "WHERE g.kind != 'contains' AND g.path != d.path GROUP BY d.path ORDER BY n DESC, d.path LIMIT ?",
        (int(limit),))]


def newest_files(conn: sqlite3.Connection, limit: int) -> list[str]:
    """Up to ``limit`` indexed paths, the most recently modified first (by the stored mtime; a
    file stored with ``mtime_ns`` 0 was too recent to trust at index time, so it comes first)."""
    return [r[0] for r in _query(
        conn, "SELECT path FROM files WHERE status = 'ok' "
              "ORDER BY CASE WHEN mtime_ns = 0 THEN 1 ELSE 0 END DESC, mtime_ns DESC, path LIMIT ?", (int(limit),))]


# ---- snapshots (cogd.snapshot) ---------------------------------------------------------------

def unsafe_paths(conn: sqlite3.Connection, limit: int = 5) -> list[str]:
    """Up to ``limit`` paths in ``files`` or ``entities`` that no refresh of a work tree writes:
    absolute, with a ``..`` or empty component, a backslash, or under ``.git/`` or ``.cogd/``.
    A snapshot's index must have none (it came from elsewhere)."""
    bad = ("p LIKE '/%' OR p = '' OR p LIKE '%\\%' OR p = '..' OR p LIKE '../%' OR p LIKE '%/../%' OR p LIKE '%/..' "
           "OR p LIKE '%//%' OR p LIKE '.git/%' OR p LIKE '.cogd/%' OR p LIKE './%' OR p LIKE '%/./%'")
    sql = (f"SELECT p FROM (SELECT path AS p FROM files UNION SELECT path FROM entities) WHERE {bad} LIMIT ?")
    return [r[0] for r in _query(conn, sql, (limit,))]


def forget_file_stats(conn: sqlite3.Connection) -> None:
    """Set every file's mtime to 0, so the next refresh hashes each file again instead of trusting
    a size and mtime recorded on another machine (unchanged content is still not re-parsed)."""
    conn.execute("UPDATE files SET mtime_ns = 0")


def rebuild_fts(conn: sqlite3.Connection) -> None:
    """Rebuild the FTS5 index from its stored rows (FTS5's ``rebuild`` command): the full-text
    b-trees of a snapshot are recomputed here rather than trusted."""
    conn.execute("INSERT INTO entities_fts(entities_fts) VALUES ('rebuild')")


# ---- prompt clues (cogd.retrieve.clues) ------------------------------------------------------

def paths_ending_with(conn: sqlite3.Connection, names: Iterable[str]) -> dict[str, list[str]]:
    """Indexed file paths by file name: ``{"wcs.py": ["astropy/wcs/wcs.py", ...]}`` for each of
    ``names`` (a last path component each; LIKE wildcards in them are escaped)."""
    out: dict[str, list[str]] = {}
    for name in _distinct(names):
        like = name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        out[name] = [r[0] for r in _query(
            conn, "SELECT path FROM files WHERE status = 'ok' AND (path = ? OR path LIKE ? ESCAPE '\\')",
            (name, "%/" + like))]
    return out


def entities_named_in(conn: sqlite3.Connection, path: str, names: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """``(id, qualname, start_line, end_line)`` of the non-file entities in ``path`` whose name
    is one of ``names``, in index order."""
    if not names:
        return []
    return list(_query(
        conn, f"SELECT id, qualname, start_line, end_line FROM entities WHERE path = ? AND kind != 'file' "
        f"AND name IN ({marks(len(names))}) ORDER BY rowid", (path, *names)))


def entities_with_names(conn: sqlite3.Connection, names: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """``(id, path, name, qualname)`` of the non-file entities whose (last) name is one of
    ``names`` (chunked; one indexed lookup per chunk)."""
    rows: list[tuple[str, str, str, str]] = []
    for chunk in chunked(_distinct(names)):
        rows.extend(_query(
            conn, f"SELECT id, path, name, qualname FROM entities WHERE name IN ({marks(len(chunk))}) "
            "AND kind != 'file'", chunk))
    return rows
