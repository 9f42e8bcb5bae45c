"""The files of a snapshot — ``index.db`` and ``vectors.db`` — made from the local projection, and
checked before a downloaded one is used.

``index.db`` is the index projection itself, copied with SQLite's online backup API (a
consistent copy of a database another connection may be writing, never a file copy of a live
WAL database) and switched to rollback journal mode so it is one self-contained file.

``vectors.db`` holds the entity vectors that are current for that copy (made by the model the
manifest names, from the entity's present content hash), each with the embedding-cache key of
the text it was made from (:func:`cogd.embed.text.text_key`), so a pull fills both the LanceDB
table and the embedding cache::

    meta(key TEXT PRIMARY KEY, value TEXT)       -- model, dim, text, max_tokens
    vectors(id TEXT PRIMARY KEY, kind, path, src_hash, key, vector BLOB)  -- little-endian float32

A downloaded file is opened only after its SHA-256 matched the manifest, read-only, with
``trusted_schema`` off, and must then pass :func:`check_index` / :func:`check_vectors`: exactly
the schema this cogd creates (no trigger, no view, no extra table), ``quick_check``, the counts
and model of the manifest, and for the index only work-tree paths. Anything else raises
:class:`~cogd.snapshot.manifest.SnapshotError`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from cogd.index import store
from cogd.inlist import chunked
from cogd.snapshot.manifest import Manifest, SnapshotError

VECTORS_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE vectors (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    src_hash TEXT NOT NULL,
    key TEXT NOT NULL,
    vector BLOB NOT NULL
);
"""
STAT_TABLES = ("sqlite_stat1", "sqlite_stat4")  # ANALYZE's statistics: they only steer the planner
BATCH = 2000  # rows per write when vectors are exported or installed


# ---- making them (publish) ---------------------------------------------------------------------

def backup_index(src: Path, dest: Path) -> None:
    """Copy the index database ``src`` to the new file ``dest`` with SQLite's backup API (consistent
    even while the daemon writes), in rollback journal mode. Raises sqlite3.Error."""
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30.0)
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")
            target.commit()
        finally:
            target.close()
    finally:
        source.close()


def export_vectors(index_copy: Path, vectors_dir: Path, model: dict, dest: Path) -> int:
    """Write ``dest`` (a new ``vectors.db``) with every vector in the LanceDB directory ``vectors_dir``
    that ``model["id"]`` made from the content an entity of ``index_copy`` has now; returns how many.

    ``model``: ``{"id", "dim", "text", "max_tokens"}`` as the manifest records it. Rows of other
    models, or of content that has changed since, are left out (the puller embeds those).
    Reads LanceDB without writing (a running daemon may be its writer).
    """
    from cogd.embed.text import entity_text, text_key
    import lancedb

    conn = sqlite3.connect(f"file:{index_copy}?mode=ro", uri=True)
    out = sqlite3.connect(dest)
    try:
        out.executescript(VECTORS_SCHEMA)
        out.executemany("INSERT INTO meta(key, value) VALUES (?, ?)",
                        [(k, str(model[k])) for k in ("id", "dim", "text", "max_tokens")])
        entities = store.entity_states(conn)
        if not vectors_dir.is_dir():  # embedding never ran here: the puller embeds everything
            out.commit()
            return 0
        db = lancedb.connect(str(vectors_dir))
        if "entities" not in set(db.list_tables().tables):
            out.commit()
            return 0
        data = db.open_table("entities").to_arrow().select(["id", "model", "src_hash", "vector"])
        ids, models, hashes = (data.column(c).to_pylist() for c in ("id", "model", "src_hash"))
        keep = [n for n, (i, m, h) in enumerate(zip(ids, models, hashes))
                if m == model["id"] and i in entities and entities[i][0] == h]
        flat = data.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        matrix = np.asarray(flat, dtype="<f4").reshape(len(ids), int(model["dim"]))
        position = {ids[n]: n for n in keep}
        written = 0
        for chunk in chunked(list(position), BATCH):
            rows = store.embedding_rows(conn, chunk)
            out.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?, ?, ?)", [
                (r[0], r[1], r[5], r[6],
                 text_key(model["id"], int(model["max_tokens"]), entity_text(r[1], r[2], r[3], r[4], r[7], r[5], style=model["text"])),
                 matrix[position[r[0]]].tobytes()) for r in rows])
            written += len(rows)
        out.commit()
        return written
    finally:
        conn.close()
        out.close()


# ---- checking a downloaded one (pull) ----------------------------------------------------------

def _open_untrusted(path: Path) -> sqlite3.Connection:
    """A read-only connection to a downloaded database whose checksum has been verified, with
    the schema's own SQL distrusted (``trusted_schema=OFF``). Raises SnapshotError."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA cell_size_check=ON")
        return conn
    except sqlite3.Error as exc:
        raise SnapshotError(f"{path.name} does not open as a database: {exc}") from exc


def _schema(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(tuple(r) for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
                  if r[1] not in STAT_TABLES)


def _reference_schema(script: str) -> list[tuple]:
    ref = sqlite3.connect(":memory:")
    try:
        ref.executescript(script)
        return _schema(ref)
    finally:
        ref.close()


def _check_common(conn: sqlite3.Connection, name: str, script: str) -> None:
    try:
        found = _schema(conn)
        if found != _reference_schema(script):
            extra = sorted({r[1] for r in found} ^ {r[1] for r in _reference_schema(script)})
            raise SnapshotError(f"{name} has another schema than this cogd's"
                                + (f" (differs in: {', '.join(extra[:5])})" if extra else " (same names, other SQL)"))
        rows = [r[0] for r in conn.execute("PRAGMA quick_check")]
    except sqlite3.Error as exc:
        raise SnapshotError(f"{name} is damaged: {exc}") from exc
    if rows != ["ok"]:
        raise SnapshotError(f"{name} fails quick_check: {'; '.join(map(str, rows[:3]))}")


def check_index(path: Path, manifest: Manifest) -> None:
    """Raise SnapshotError unless the downloaded ``index.db`` at ``path`` is this cogd's index schema,
    undamaged, of the manifest's commit and schema version, with its counts and only work-tree paths."""
    conn = _open_untrusted(path)
    try:
        _check_common(conn, "index.db", store.SCHEMA)
        try:
            version = store.get_meta(conn, "schema_version")
            commit = store.get_meta(conn, "commit")
            counts = store.counts(conn)
            bad = store.unsafe_paths(conn)
        except sqlite3.Error as exc:
            raise SnapshotError(f"index.db cannot be read: {exc}") from exc
    finally:
        conn.close()
    if version != manifest.schema_version or commit != manifest.commit:
        raise SnapshotError(f"index.db says schema {version!r} at commit {str(commit)[:12]}, its manifest "
                            f"schema {manifest.schema_version!r} at {manifest.commit[:12]}")
    wanted = {k: manifest.counts[k] for k in counts}
    if counts != wanted:
        raise SnapshotError(f"index.db holds {counts}, its manifest says {wanted}")
    if bad:
        raise SnapshotError(f"index.db names paths outside a work tree: {', '.join(repr(p[:80]) for p in bad)}")


def check_vectors(path: Path, manifest: Manifest) -> None:
    """Raise SnapshotError unless the downloaded ``vectors.db`` at ``path`` has the vectors schema, is
    undamaged, names the manifest's model and holds its number of vectors, each of ``dim`` floats."""
    model = manifest.model or {}
    conn = _open_untrusted(path)
    try:
        _check_common(conn, "vectors.db", VECTORS_SCHEMA)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            count, wrong = conn.execute(
                "SELECT count(*), coalesce(sum(length(vector) != ? OR typeof(vector) != 'blob'), 0) FROM vectors",
                (4 * int(model.get("dim", 0)),)).fetchone()
        except sqlite3.Error as exc:
            raise SnapshotError(f"vectors.db cannot be read: {exc}") from exc
    finally:
        conn.close()
    expected = {k: str(model.get(k)) for k in ("id", "dim", "text", "max_tokens")}
    if meta != expected:
        raise SnapshotError(f"vectors.db describes model {meta}, its manifest {expected}")
    if count != manifest.counts["vectors"] or wrong:
        raise SnapshotError(f"vectors.db holds {count} vectors ({wrong} of the wrong length), its manifest says "
                            f"{manifest.counts['vectors']} of {model.get('dim')} floats")


def prepare_index(path: Path) -> None:
    """Make the checked copy at ``path`` ready to be the local index: file stats forgotten (the next
    refresh hashes every file) and the full-text index rebuilt from its rows. Raises SnapshotError."""
    try:
        conn = sqlite3.connect(path, timeout=5.0)
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            with conn:
                store.forget_file_stats(conn)
                store.rebuild_fts(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SnapshotError(f"index.db could not be prepared: {exc}") from exc


def vector_rows(path: Path, model_id: str, dim: int) -> Iterator[list[dict]]:
    """Batches of the checked ``vectors.db`` at ``path`` as rows for
    :meth:`cogd.index.vectors.VectorStore.upsert` (with the cache ``key`` besides). Raises
    SnapshotError for a vector that is not finite."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        cursor = conn.execute("SELECT id, kind, path, src_hash, key, vector FROM vectors ORDER BY id")
        while batch := cursor.fetchmany(BATCH):
            rows = [{"id": i, "kind": k, "path": p, "model": model_id, "src_hash": h, "key": key,
                     "vector": np.frombuffer(v, dtype="<f4").astype(np.float32).reshape(dim)}
                    for i, k, p, h, key, v in batch]
            if not all(np.isfinite(r["vector"]).all() for r in rows):
                raise SnapshotError("vectors.db holds a vector that is not finite (NaN or infinity)")
            yield rows
    finally:
        conn.close()
