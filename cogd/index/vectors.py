"""Entity vectors: LanceDB on disk, an exact in-memory KNN index for queries.

LanceDB (``.cogd/index/vectors/``) is the durable projection: one row per
entity id with its kind, path, the model that made the vector and the content
hash of the entity it was made from, upserted with ``merge_insert`` on ``id``
(never duplicated) and deleted when the entity leaves the index.

Queries do not go to LanceDB on the hook path. Measured on this kind of
development machine (2 cores): brute-force LanceDB search over
50k × 384 took 65–76 ms, exact numpy 3.2 ms; so the daemon keeps the vectors
in a float32 matrix (:class:`DenseIndex`, 1.5 KB per entity) and does exact
cosine KNN there, with the kind filter applied *before* the top-k cut.
:meth:`VectorStore.search` (LanceDB, prefiltered) remains for tools and tests.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from cogd import safepath
from cogd.inlist import chunked

log = logging.getLogger("cogd.vectors")

TABLE = "entities"
CLEANUP_AFTER = datetime.timedelta(minutes=5)  # old table versions kept this long for concurrent readers
COMPACT_EVERY_WRITES = 50  # writes between two compactions the writes themselves trigger
COMPACT_MIN_WRITES = 10  # an asked-for compaction with fewer writes since the last one waits for more


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class VectorStore:
    """The LanceDB table of entity vectors. One writer (the embedding thread).

    Raises whatever LanceDB raises on a corrupt directory; callers treat the
    directory as a projection and may delete it.
    """

    def __init__(self, directory: Path, dim: int):
        import lancedb  # ~1.5 s to import: daemon only, never on a hook path
        import pyarrow as pa

        safepath.check_chain(directory, create=True)  # a real folder of ours, 0700 (raises UnsafePath)
        safepath.secure_tree(directory)  # LanceDB follows links inside its folder
        self.dim = dim
        self._db = lancedb.connect(str(directory))
        self._schema = pa.schema([
            pa.field("id", pa.string()),
            pa.field("kind", pa.string()),
            pa.field("status", pa.string()),  # "active" for code; memory statuses later
            pa.field("path", pa.string()),
            pa.field("model", pa.string()),
            pa.field("src_hash", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ])
        existing = set(self._db.list_tables().tables) if hasattr(self._db, "list_tables") else set()
        if TABLE in existing:
            self.table = self._db.open_table(TABLE)
            if self.table.schema != self._schema:
                log.info("vector table has another schema or dimension: dropping it (the cache refills it)")
                self._db.drop_table(TABLE)
                self.table = self._db.create_table(TABLE, schema=self._schema)
        else:
            self.table = self._db.create_table(TABLE, schema=self._schema)
        self._writes = 0
        self._since_compact = 0  # writes since the last compaction
        # id → (model, src_hash) of every row, kept in step by this (the only) writer: a pass after
        # a save reads it instead of the whole table (vectors included) from disk.
        self._state: dict[str, tuple[str, str]] | None = None

    def count(self) -> int:
        return self.table.count_rows()

    def state(self) -> dict[str, tuple[str, str]]:
        """id → (model, src_hash) for every stored row (a copy).

        Read from the table once, then kept up to date by :meth:`upsert` and
        :meth:`delete` (one writer: the embedding thread); a write that fails
        makes the next call read the table again.
        """
        if self._state is None:
            data = self.table.to_arrow().select(["id", "model", "src_hash"]).to_pydict()
            self._state = {i: (m, h) for i, m, h in zip(data["id"], data["model"], data["src_hash"])}
        return dict(self._state)

    def upsert(self, rows: list[dict]) -> None:
        """Insert or replace rows keyed by ``id``: dicts with id, kind, path, model, src_hash, vector
        (and ``status``, default ``active``)."""
        if not rows:
            return
        rows = [row if "status" in row else {**row, "status": "active"} for row in rows]
        if self._state is None:
            self.state()
        known, self._state = self._state, None  # unknown until the write has succeeded
        assert known is not None
        # Rows of ids the table lacks are appended; only the others go through merge_insert,
        # which joins against the whole id column on every call. Measured on 20,000 rows in
        # writes of 64 (random vectors, this kind of machine): merge_insert alone 6.7 s and
        # +148 MB resident, append 1.7 s and +41 MB. An id is never appended twice: ``known``
        # holds every stored id (one writer).
        fresh, again, seen = [], [], set()
        for row in rows:
            if row["id"] in known or row["id"] in seen:
                again.append(row)
            else:
                fresh.append(row)
                seen.add(row["id"])
        if fresh:
            self.table.add(fresh)
        if again:
            self.table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(again)
        known.update((row["id"], (row["model"], row["src_hash"])) for row in rows)
        self._state = known
        self._note_write()

    def delete(self, ids: Iterable[str]) -> int:
        """Delete rows by id; returns how many ids were asked for."""
        ids = list(ids)
        known, self._state = self._state, None
        for chunk in chunked(ids):  # a filter string per chunk, not one as long as the whole list
            self.table.delete(f"id IN ({', '.join(_quote(i) for i in chunk)})")
        if known is not None:
            for i in ids:
                known.pop(i, None)
            self._state = known
        if ids:
            self._note_write()
        return len(ids)

    def _note_write(self) -> None:
        # Every write is a new table version; compact and drop old versions now
        # and then so the directory does not grow without bound.
        self._writes += 1
        self._since_compact += 1
        if self._writes % COMPACT_EVERY_WRITES == 0:
            self.compact(force=True)

    def compact(self, *, force: bool = False) -> None:
        """Merge small fragments and remove versions older than ``CLEANUP_AFTER``.

        Unless ``force``, only when at least ``COMPACT_MIN_WRITES`` writes were
        made since the last compaction: the embedding pass after every save
        asks for one, and compacting a table for one or two new rows cost more
        than the save's whole embedding (the fragments wait for the next
        compaction; writes force one every ``COMPACT_EVERY_WRITES``).
        """
        if not force and self._since_compact < COMPACT_MIN_WRITES:
            return
        self._since_compact = 0
        try:
            self.table.optimize(cleanup_older_than=CLEANUP_AFTER)
        except Exception:  # never fatal: it only saves disk
            log.exception("vector table optimize failed")

    def load(self, model: str) -> tuple[list[str], list[str], list[str], np.ndarray]:
        """(ids, kinds, paths, matrix float32 (n, dim)) of the rows made by ``model``."""
        data = self.table.to_arrow()
        if data.num_rows == 0:
            return [], [], [], np.zeros((0, self.dim), dtype=np.float32)
        models = data.column("model").to_pylist()
        keep = [i for i, m in enumerate(models) if m == model]
        data = data.take(keep)
        ids = data.column("id").to_pylist()
        kinds = data.column("kind").to_pylist()
        paths = data.column("path").to_pylist()
        flat = data.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return ids, kinds, paths, np.asarray(flat, dtype=np.float32).reshape(len(ids), self.dim)

    def search(
        self, vector: np.ndarray, k: int, kinds: tuple[str, ...] | None = None,
        statuses: tuple[str, ...] | None = ("active",),
    ) -> list[tuple[str, float]]:
        """KNN in LanceDB (cosine) with kind/status filters pushed down before the k cut.

        Returns (id, cosine similarity) best first, up to ``k`` rows that pass the filters.
        """
        query = self.table.search(np.asarray(vector, dtype=np.float32)).metric("cosine").limit(k)
        where = []
        if kinds:
            where.append(f"kind IN ({', '.join(_quote(x) for x in kinds)})")
        if statuses:
            where.append(f"status IN ({', '.join(_quote(x) for x in statuses)})")
        if where:
            query = query.where(" AND ".join(where), prefilter=True)
        return [(row["id"], 1.0 - float(row["_distance"])) for row in query.to_list()]


def open_vectors(directory: Path, dim: int, model: str) -> tuple[VectorStore, tuple[list[str], list[str], list[str], np.ndarray]]:
    """Open the vector store and read ``model``'s rows; a store that fails either is moved aside.

    LanceDB reports a damaged directory (a garbled manifest or data file) at
    open or only at the first full read, so both are tried here. On failure
    the directory becomes ``vectors.corrupt-<time>`` (only the newest kept) and
    an empty store is opened: the embedding worker refills it from the
    embedding cache. Returns ``(store, VectorStore.load(model))``. A second
    failure on the fresh directory propagates (then the cause is not the data).
    """
    from cogd.recovery import quarantine

    try:
        vectors = VectorStore(directory, dim)
        return vectors, vectors.load(model)
    except Exception as exc:  # LanceDB and Arrow raise their own error types for damaged data
        quarantine(directory, f"{exc.__class__.__name__}: {exc}"[:500],
                   "refilled from the embedding cache in the background", store="vectors")
    vectors = VectorStore(directory, dim)
    return vectors, vectors.load(model)


QUANT_LEVELS = 127  # int8 rows: each component is round(x / step), step = max |x| / 127
# Rows turned back into float32 at a time by a search (1.5 MB at 384-d). Kept below the size at
# which OpenBLAS hands a product to its threads: a process without the daemon's one-thread BLAS
# (cogd.daemon.scheduling) measured 218 ms of CPU per search at 2,048 rows, 5.2 ms at 1,024.
SEARCH_CHUNK_ROWS = 1024


def quantize_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``matrix`` (n × dim float) as int8 codes and one float32 factor each: ``(codes, factors)``.

    ``codes = round(row / (max |row| / 127))`` (symmetric per-row quantisation), and ``factor =
    1 / ‖codes‖``, so that ``codes * factor`` is a unit vector in the row's direction up to
    rounding and ``(codes @ q) * factor`` is the exact cosine between that vector and a unit
    query ``q``: never above 1, only the direction is rounded. An all-zero row gets codes 0
    and factor 0 (it matches nothing). Rounding moves each component by at most half a step
    (``max |row| / 254``); measured on unit 384-d rows, cosines move by ≤ 0.002."""
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    peak = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows), dtype=np.float32)
    steps = np.where(peak > 0, peak / QUANT_LEVELS, 1.0).astype(np.float32)
    codes = np.rint(rows / steps[:, None]).clip(-QUANT_LEVELS, QUANT_LEVELS).astype(np.int8)
    norms = np.linalg.norm(codes.astype(np.float32), axis=1)
    factors = np.divide(1.0, norms, out=np.zeros(len(rows), dtype=np.float32), where=norms > 0).astype(np.float32)
    return codes, factors


class DenseIndex:
    """Cosine KNN over an in-memory matrix of L2-normalised vectors, every row scanned. Thread-safe.

    Replaced wholesale or patched by the embedding thread; read by request
    threads. Rows are kept as int8 with a factor per row (:func:`quantize_rows`):
    384 + 4 bytes per vector instead of 1,536, which is 23 MB instead of 92 MB at
    the standard library's 60k entities. A search turns ``SEARCH_CHUNK_ROWS``
    rows at a time back into float32 for the product: it reads a quarter of the
    memory, and measured faster than a float32 product over the whole matrix
    (5.2 against 10.6 ms of CPU at 60k × 384, one BLAS thread). Scores are the cosines of the
    quantised rows' directions, within about 0.002 of the exact ones. float16 rows would
    halve the memory only, and numpy's float16 conversion made a search ~6×
    slower.

    Each row may also carry a *stamp*, a 64-bit unsigned number the caller chooses (the first
    tier stores its entity's content hash there: :meth:`upsert` with ``stamps``,
    :meth:`changed`), 8 bytes per row in one array instead of a dict of strings beside the index.
    """

    def __init__(self, dim: int):
        self.dim = dim
        self._lock = threading.Lock()
        self._ids: list[str] = []  # row i holds self._ids[i]; rows past len(self._ids) are spare capacity
        self._pos: dict[str, int] = {}
        self._kinds = np.zeros(0, dtype=object)
        self._matrix = np.zeros((0, dim), dtype=np.int8)
        self._factors = np.zeros(0, dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._stamps = np.zeros(0, dtype=np.uint64)  # the caller's stamp of each row (0 when none was given)
        # (sorted kinds or None) -> (mask of live rows of those kinds, its count); any change clears it.
        # Building a mask compares every row's kind (a Python object): not on every query.
        self._masks: dict[tuple[str, ...] | None, tuple[np.ndarray, int]] = {}

    def __len__(self) -> int:
        with self._lock:
            return int(self._alive[:len(self._ids)].sum())

    def replace(self, ids: list[str], kinds: list[str], matrix: np.ndarray) -> None:
        """Hold exactly ``ids`` (with their ``kinds`` and the rows of ``matrix``, n × dim float)."""
        rows = np.asarray(matrix, dtype=np.float32).reshape(len(ids), self.dim)
        codes = np.empty((len(ids), self.dim), dtype=np.int8)
        factors = np.empty(len(ids), dtype=np.float32)
        for start in range(0, len(ids), SEARCH_CHUNK_ROWS):  # quantised in slices: no second full-size float copy
            codes[start:start + SEARCH_CHUNK_ROWS], factors[start:start + SEARCH_CHUNK_ROWS] = quantize_rows(
                rows[start:start + SEARCH_CHUNK_ROWS])
        with self._lock:
            self._ids = list(ids)
            self._pos = {entity_id: i for i, entity_id in enumerate(ids)}
            self._kinds = np.array(kinds, dtype=object)
            self._matrix, self._factors = codes, factors
            self._alive = np.ones(len(ids), dtype=bool)
            self._stamps = np.zeros(len(ids), dtype=np.uint64)
            self._masks.clear()

    def _grown(self, rows: int) -> None:
        """Reallocate every per-row array to ``rows`` rows, keeping the used ones (caller holds the lock)."""
        n = len(self._ids)
        matrix = np.zeros((rows, self.dim), dtype=np.int8)
        matrix[:n] = self._matrix[:n]
        factors = np.zeros(rows, dtype=np.float32)
        factors[:n] = self._factors[:n]
        kinds = np.empty(rows, dtype=object)
        kinds[:n] = self._kinds[:n]
        alive = np.zeros(rows, dtype=bool)
        alive[:n] = self._alive[:n]
        stamps = np.zeros(rows, dtype=np.uint64)
        stamps[:n] = self._stamps[:n]
        self._matrix, self._factors, self._kinds, self._alive, self._stamps = matrix, factors, kinds, alive, stamps

    def _reserve(self, rows: int) -> None:
        """Room for ``rows`` rows in all, growing by doubling (caller holds the lock).

        Appending a chunk with ``np.vstack`` copied the whole matrix on every chunk of an
        embedding pass: 60k entities in chunks of 64 made ~940 copies of up to 90 MB, and the
        freed blocks left the heap fragmented (resident size grew with every chunk). Doubling
        makes a pass copy each row about twice.
        """
        capacity = len(self._matrix)
        if rows <= capacity:
            return
        self._grown(max(rows, 2 * capacity, 1024))

    def make_room(self, extra: int) -> None:
        """Room for ``extra`` more new rows, allocated at once (an embedding pass knows how many
        it may add): growing by doubling held the old and the new matrix together at each step."""
        with self._lock:
            rows = len(self._ids) + max(0, extra)
            if rows > len(self._matrix):
                self._grown(rows)

    def upsert(self, ids: list[str], kinds: list[str], matrix: np.ndarray, stamps: Iterable[int] | None = None) -> None:
        """Add or overwrite vectors (rows of ``matrix``, same order as ``ids``). The index keeps the
        ``ids`` and ``kinds`` objects themselves (pass shared, interned strings to hold one copy).
        ``stamps``: one unsigned 64-bit number per id, kept with its row (:meth:`changed`); None
        stamps the rows 0. Raises OverflowError for a stamp outside 0 … 2**64 - 1."""
        codes, factors = quantize_rows(np.asarray(matrix, dtype=np.float32).reshape(len(ids), self.dim))
        marks = np.zeros(len(ids), dtype=np.uint64) if stamps is None else np.fromiter(
            (int(x) for x in stamps), dtype=np.uint64, count=len(ids))
        with self._lock:
            self._masks.clear()
            for entity_id, kind, code, factor, stamp in zip(ids, kinds, codes, factors, marks):
                i = self._pos.get(entity_id)
                if i is None:
                    i = len(self._ids)
                    self._reserve(i + 1)
                    self._ids.append(entity_id)
                    self._pos[entity_id] = i
                self._matrix[i] = code
                self._factors[i] = factor
                self._kinds[i] = kind
                self._alive[i] = True
                self._stamps[i] = stamp

    def changed(self, ids: list[str], stamps: np.ndarray) -> list[int]:
        """Positions ``k`` into ``ids`` whose id has no live row here or one stamped other than
        ``stamps[k]`` (``stamps``: uint64, one per id, as given to :meth:`upsert`), in order."""
        with self._lock:
            rows = np.fromiter((self._pos.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))
            held = rows >= 0
            fresh = np.zeros(len(ids), dtype=bool)
            fresh[held] = self._alive[rows[held]] & (self._stamps[rows[held]] == np.asarray(stamps, dtype=np.uint64)[held])
        return np.flatnonzero(~fresh).tolist()

    def live_ids(self) -> list[str]:
        """The ids of the live rows (the index's own string objects), in row order."""
        with self._lock:
            n = len(self._ids)
            return [self._ids[i] for i in np.flatnonzero(self._alive[:n])]

    def remove(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._masks.clear()
            for entity_id in ids:
                i = self._pos.get(entity_id)
                if i is not None:
                    self._alive[i] = False

    def vectors(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vector of each id that has one: float32, unit length, the quantised row's direction."""
        with self._lock:
            return {i: self._matrix[self._pos[i]].astype(np.float32) * self._factors[self._pos[i]]
                    for i in ids if i in self._pos and self._alive[self._pos[i]]}

    def search(self, vector: np.ndarray, k: int, kinds: tuple[str, ...] | None = None) -> list[tuple[str, float]]:
        """The ``k`` most similar live entities as (id, cosine similarity), best first.

        ``kinds`` filters before the cut, so a filtered search still returns
        up to ``k`` rows of the wanted kinds.
        """
        with self._lock:
            if not len(self._ids) or k < 1:
                return []
            n = len(self._ids)
            key = tuple(sorted(kinds)) if kinds else None
            cached = self._masks.get(key)
            if cached is None:
                mask = self._alive[:n].copy()
                if kinds:
                    mask &= np.isin(self._kinds[:n], list(kinds))
                cached = self._masks[key] = (mask, int(mask.sum()))
            mask, live = cached
            if not live:
                return []
            # Every row, then the mask: a product over the whole matrix reads it once, where
            # selecting the candidate rows first copied it on every query. The spare capacity
            # past the last row is never read.
            query = np.asarray(vector, dtype=np.float32).reshape(self.dim)
            scores = np.empty(n, dtype=np.float32)
            rows = np.empty((min(n, SEARCH_CHUNK_ROWS), self.dim), dtype=np.float32)  # reused per slice
            for start in range(0, n, SEARCH_CHUNK_ROWS):
                end = min(start + SEARCH_CHUNK_ROWS, n)
                part = rows[:end - start]
                np.copyto(part, self._matrix[start:end], casting="unsafe")
                np.matmul(part, query, out=scores[start:end])
            scores *= self._factors[:n]
            scores = np.where(mask, scores, -np.inf)
            top = min(k, live)
            best = np.argpartition(-scores, top - 1)[:top]
            best = best[np.argsort(-scores[best])]
            return [(self._ids[i], float(scores[i])) for i in best]
