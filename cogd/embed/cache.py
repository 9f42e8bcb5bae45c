"""A persistent cache of embeddings keyed by content hash (SQLite).

Keys come from :func:`cogd.embed.text.text_key` (model id, token cap and the
exact text), so a vector is reused whenever the same text meets the same
model again: across daemon restarts, branch switches, reverts and renames that
keep the text. Vectors are stored as little-endian float32 BLOBs (4 × dim
bytes; 1,536 bytes for dim 384).

One connection, used from the thread that opened it (sqlite3's own check
enforces this); WAL journal so that readers in other processes are not
blocked by a write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from cogd import safepath
from cogd.inlist import chunked, marks

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS embeddings_model ON embeddings(model_id);
"""


class EmbeddingCache:
    """Embeddings by key, in the SQLite file ``path`` (created with its folder if missing).

    A file that is damaged (fails to open or ``PRAGMA quick_check``) is moved
    aside as ``<name>.corrupt-<time>`` and a fresh cache opened in its place;
    raises sqlite3.Error when the file cannot be opened for another reason.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | Path):
        from cogd.recovery import open_projection  # a damaged cache is moved aside: vectors are recomputed

        self.path = Path(path)
        self._db = open_projection(self.path, self._connect, "emptied: vectors are recomputed by the model")

    def _connect(self) -> sqlite3.Connection:
        safepath.prepare_db(self.path)  # folders 0700, files 0600, no links (raises UnsafePath)
        db = sqlite3.connect(self.path, timeout=10.0)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached vectors among ``keys``: key → float32 array of shape (dim,).

        Keys not in the cache are simply absent from the result; a row whose
        BLOB does not hold ``dim`` floats is treated as absent.
        """
        wanted = list(dict.fromkeys(keys))
        found: dict[str, np.ndarray] = {}
        for chunk in chunked(wanted):
            rows = self._db.execute(f"SELECT key, dim, vector FROM embeddings WHERE key IN ({marks(len(chunk))})", chunk)
            for key, dim, blob in rows:
                if len(blob) == 4 * dim:
                    found[key] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return found

    def put_many(self, items: Mapping[str, np.ndarray], model_id: str) -> int:
        """Store ``items`` (key → 1-D vector) made by ``model_id``, in one transaction.

        Vectors are converted to float32; an existing key is overwritten.
        Returns the number stored. Raises ValueError for a vector that is not
        1-D, is empty or holds NaN/inf (nothing is stored then).
        """
        rows = []
        for key, vector in items.items():
            array = np.asarray(vector, dtype="<f4")
            if array.ndim != 1 or array.size == 0 or not np.isfinite(array).all():
                raise ValueError(f"vector for {key!r} must be a finite, non-empty 1-D array, "
                                 f"got shape {array.shape}")
            rows.append((key, model_id, int(array.size), array.tobytes()))
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings (key, model_id, dim, vector) VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def delete_model(self, model_id: str) -> int:
        """Drop every vector of ``model_id`` (e.g. after switching models); returns how many."""
        with self._db:
            return self._db.execute("DELETE FROM embeddings WHERE model_id = ?", (model_id,)).rowcount

    def __len__(self) -> int:
        return self._db.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
