"""The code index projection: SQLite tables for files, entities, edges and FTS5.

``.cogd/index/index.db`` is a projection (DESIGN.md §1): it can be deleted and
rebuilt from the work tree at any time. One writer (the indexer); any number of
readers, which WAL mode serves from the last committed state while a write is
under way.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from cogd import safepath
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
    status TEXT NOT NULL,        -- ok | too_large | binary | unreadable
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


def known_files(conn: sqlite3.Connection) -> dict[str, sqlite3.Row]:
    """Every indexed file's row, keyed by path."""
    return {row["path"]: row for row in conn.execute("SELECT * FROM files")}


def delete_file(conn: sqlite3.Connection, path: str) -> None:
    """Remove a file and everything its parse produced (entities, FTS rows, edges)."""
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM entities WHERE path = ?", (path,))]
    conn.executemany("DELETE FROM entities_fts WHERE rowid = ?", [(r,) for r in rowids])
    conn.execute("DELETE FROM entities WHERE path = ?", (path,))
    conn.execute("DELETE FROM edges WHERE path = ?", (path,))
    conn.execute("DELETE FROM refs WHERE path = ?", (path,))
    conn.execute("DELETE FROM files WHERE path = ?", (path,))


def _fts_row(entity: Entity) -> tuple[str, str, str, str, str]:
    name_words = f"{entity.qualname} {split_identifier(entity.qualname)}"
    path_words = f"{entity.path} {split_identifier(entity.path)}"
    return (path_words, name_words, entity.signature, entity.doc, entity.body)


def write_file(
    conn: sqlite3.Connection,
    parsed: ParsedFile,
    *,
    size: int,
    mtime_ns: int,
    status: str,
    now: float,
) -> None:
    """Replace everything stored for ``parsed.path`` with ``parsed`` (no commit)."""
    delete_file(conn, parsed.path)
    file_hash = parsed.entities[0].hash if parsed.entities else ""
    conn.execute(
        "INSERT INTO files(path, language, hash, size, mtime_ns, status, indexed_at) VALUES (?,?,?,?,?,?,?)",
        (parsed.path, parsed.language, file_hash, size, mtime_ns, status, now),
    )
    # Explicit rowids let entities and their FTS rows go in as two batches
    # instead of one statement per entity (the FTS rowid must match).
    first = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM entities").fetchone()[0]
    rowids = range(first, first + len(parsed.entities))
    conn.executemany(
        f"INSERT INTO entities(rowid, {', '.join(ENTITY_COLUMNS)}) VALUES (?, {', '.join('?' * len(ENTITY_COLUMNS))})",
        [(rowid, *(getattr(entity, column) for column in ENTITY_COLUMNS)) for rowid, entity in zip(rowids, parsed.entities)],
    )
    conn.executemany(
        "INSERT INTO entities_fts(rowid, path, name, signature, doc, body) VALUES (?,?,?,?,?,?)",
        [(rowid, *_fts_row(entity)) for rowid, entity in zip(rowids, parsed.entities)],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO edges(src, dst, kind, path) VALUES (?,?,?,?)",
        [(edge.src, edge.dst, edge.kind, parsed.path) for edge in parsed.edges],
    )
    conn.executemany(
        "INSERT INTO refs(path, src, kind, name, qualifier, alias, line) VALUES (?,?,?,?,?,?,?)",
        [(parsed.path, r.src, r.kind, r.name, r.qualifier, r.alias, r.line) for r in parsed.references],
    )


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
