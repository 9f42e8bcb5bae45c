"""The embedding worker: a background thread that keeps entity vectors current.

It starts after the lexical index is committed and never blocks it: hooks
answer with BM25 from the first second and gain vectors as coverage grows.
A pass compares every entity's content hash with the stored vector's
(``src_hash``) and embeds what is missing or changed — through the embedding
cache keyed by (model, text hash), so an entity that comes back (a branch
switched away and back) is never embedded twice. Rows whose entity is gone, or
that another model made, are deleted: vectors of two models are never mixed.
What packs need first is embedded first (file entities, then the definitions of
recently changed and most-referenced files: the *front*, cogd.daemon.embed_order),
and the front's coverage is reported on its own.

Status words (``phase`` in :meth:`EmbeddingWorker.status`), so that a number
is never shown before it means something:

``loading``
    the model is loading; nothing is counted yet;
``counting``
    the model is loaded and a pass is due or is listing the entities (the
    counts, if any, are from the previous pass);
``embedding``
    a pass is embedding: ``embedded_entities`` of ``entities`` have a current vector;
``current``
    every entity counted by the last pass has a current vector, and no pass is due;
``error`` / ``stopped``
    the model could not be loaded (``error`` says why) / the worker ended.

The daemon adds one case it alone knows: ``counting`` while its first index
has not committed (the entities are not listed yet).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from cogd.config import EmbedConfig
from cogd.daemon.scheduling import Yielding, lower_thread_priority
from cogd.index import store
from cogd.inlist import chunked
from cogd import faults
from cogd.daemon import embed_order
from cogd.daemon.first_tier import CHUNK as FIRST_TIER_CHUNK, FirstTier
from cogd.index.vector_proc import IDLE_S as VECTOR_CHILD_IDLE_S, ChildVectorStore
from cogd.index.vectors import DenseIndex

log = logging.getLogger(__name__)

CHUNK = 64  # entities per encoder call and KNN update: readers see coverage grow in steps this size
# Rows per LanceDB write. Searches read the in-memory KNN index (updated every CHUNK), so the
# table is written in bigger steps: a write is a table version, and 60k entities in writes of 64
# left ~940 versions to compact and a fragmented heap. Measured on 60,000 random 384-d rows
# written as a pass writes them (KNN index included): writes of 64 ended at 748 MB resident,
# of 512 at 511 MB, of 2,048 at 426 MB (4,096: no better). Vectors not yet written when the
# daemon dies are in the embedding cache already: the next pass writes them without the model.
WRITE_ROWS = 2048
LIGHT_THREADS = 1  # onnxruntime threads for a batch that runs while a request is in flight


def background_threads(configured: int) -> int:
    """Intra-op threads for the embedding pass: ``configured`` (``[embed] threads``), or every
    core this process may run on when it is 0. A pass drops to ``LIGHT_THREADS`` for any batch
    that starts while a request is in flight (:meth:`EmbeddingWorker._before_batch`), so the
    second core is the pass's only while nobody is asking.
    """
    if configured > 0:
        return configured
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); True when it ran.

    The first index's parse results and resolution leave a heap with much free space that glibc
    keeps (measured on the standard library: the daemon's resident size at the end of its first
    index stays near its peak); the model and its arena would otherwise come on top of that.
    A no-op where glibc is not the C library.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


QUERY_CACHE_SIZE = 4  # recent query embeddings kept: enough for one request's code and memory searches (the oldest goes first)


class EmbeddingWorker:
    """Owns the encoder, the LanceDB vector table and the in-memory KNN index."""

    def __init__(self, index_dir: Path, index_db: Path, config: EmbedConfig, yielding: Yielding | None = None,
                 after_first_index: bool = False):
        # yielding: give way to requests between encoder batches, at a lower thread priority
        # (cogd.daemon.scheduling); None (an in-process CLI worker) never waits.
        self.yielding = yielding
        # after_first_index: load the model only once the first refresh has called notify().
        # The first index's resolution step and the model's load and first batches were the
        # daemon's two largest transient allocations, and overlapping them set its peak
        # resident size (measured on the standard library: 519 MB at the end of the index with
        # the model loaded beside it, 210 MB for the index alone); the model's ~2 s load
        # after the index delays only the first vectors, never the first (lexical) pack.
        self._index_seen = not after_first_index
        self.batches = 0  # encoder batches run by passes (the counters tests and status read)
        self.light_batches = 0  # of those, batches run on the one-thread session (a request was in flight)
        self.yields = 0  # times a pass waited between batches for requests to end
        self.index_dir = index_dir
        self.index_db = index_db
        self.config = config
        self.state = "loading"  # loading | idle | embedding | error | stopped
        self.error: str | None = None
        self.model_id: str | None = None
        self.encoder = None
        self._query_cache: dict[tuple, object] = {}
        self._query_lock = threading.Lock()
        self.dense: DenseIndex | None = None
        self.total = 0
        self.done = 0
        self.rate = 0.0  # entities per second over the current pass
        self.embedded = 0  # vectors computed by the model (cache misses) since start
        self.counted = False  # the current pass has listed the entities (total and done are its counts)
        # The front (cogd.daemon.embed_order): embedded first; its coverage is shown on its own.
        self.front = embed_order.Front()
        # The static first tier (cogd.daemon.first_tier): serves searches while a big pass runs.
        self.first_tier = FirstTier(config)
        self.front_total = 0
        self.front_done = 0
        self.ever_counted = False  # some pass has: coverage means something
        self._cond = threading.Condition()
        self._pending = True
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="cogd-embed", daemon=True)
        self._thread.start()

    # ---- called from other threads ------------------------------------------
    def notify(self) -> None:
        """The index changed: schedule a pass."""
        with self._cond:
            self._pending = True
            self._index_seen = True
            self._cond.notify_all()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.yielding is not None:
            self.yielding.tracker.wake()  # a pass waiting for requests re-checks _stopping
        self._thread.join(timeout)

    @property
    def coverage(self) -> float:
        """Share of entities with a current vector, 0.0–1.0 (1.0 for an empty index; 0.0 before
        any pass has counted the entities)."""
        if not self.ever_counted:
            return 0.0
        return 1.0 if self.total == 0 else min(1.0, self.done / self.total)

    @property
    def phase(self) -> str:
        """``loading`` | ``counting`` | ``embedding`` | ``current`` | ``error`` | ``stopped`` (module docstring)."""
        state = self.state
        if state in ("loading", "error", "stopped"):
            return state
        with self._cond:
            pending = self._pending
        if pending or not self.counted:
            return "counting"
        return "embedding" if state == "embedding" and self.done < self.total else "current"

    def status(self) -> dict:
        remaining = max(self.total - self.done, 0)
        eta = remaining / self.rate if self.rate > 0 and remaining else 0.0
        return {
            "front": self.front_status(),  # what is embedded first, and how much of it is (cogd.daemon.embed_order)
            "state": self.state, "phase": self.phase, "model": self.model_id, "coverage": round(self.coverage, 4),
            "entities": self.total, "embedded_entities": self.done, "pending": remaining,
            "rate_per_s": round(self.rate, 1), "eta_s": round(eta, 1), "error": self.error,
            "queued": self._pending,  # a pass is due (the index changed since the last one)
            "computed": self.embedded,  # vectors the model computed since start (the rest came from the cache)
            "yields": self.yields,
            "light_batches": self.light_batches,  # batches run on one thread because a request was in flight  # waits between batches while requests were answered (cogd.daemon.scheduling)
            "first_tier": self.first_tier.status(),  # static vectors answering searches meanwhile (cogd.daemon.first_tier)
        }

    def front_status(self) -> dict:
        """The front's coverage (cogd.daemon.embed_order): ``entities`` in it, ``embedded_entities``
        of them with a current vector, the ``files`` whose definitions it holds besides every file
        entity (``recent_files`` recently changed, ``connected_files`` most referenced; one file
        may be both), ``coverage`` 0.0–1.0 (0.0 before any pass has counted)."""
        total, done = self.front_total, min(self.front_done, self.front_total)
        coverage = (1.0 if total == 0 else done / total) if self.ever_counted else 0.0
        return {"entities": total, "embedded_entities": done, "files": len(self.front.paths),
                "recent_files": self.front.recent, "connected_files": self.front.connected,
                "coverage": round(coverage, 4)}

    def query_vector(self, text: str) -> np.ndarray | None:
        """The query's embedding, or None while the model is not loaded (callers fall back to BM25)."""
        encoder = self.encoder
        if encoder is None or not text.strip():
            return None
        key = (self.model_id, text)
        with self._query_lock:
            cached = self._query_cache.get(key)
        if cached is not None:  # one prompt is embedded once for code and memory search
            return cached
        vector = encoder.encode_query(text)
        with self._query_lock:
            if len(self._query_cache) >= QUERY_CACHE_SIZE:
                self._query_cache.pop(next(iter(self._query_cache)))
            self._query_cache[key] = vector
        return vector

    def search_pair(self, texts: str | list[str]) -> tuple[np.ndarray | None, DenseIndex | None]:
        """``(query vector(s), KNN index)`` of one model for a code search: the static first tier's
        while it is active (cogd.daemon.first_tier), else the transformer's. ``texts``: one query
        (vector of shape (dim,)) or a long prompt's windows (shape (n, dim)). The two come from one
        tier read once, so a search never compares a query of one model with vectors of another."""
        vector, dense = self.first_tier.pair(texts)
        if dense is not None:
            return vector, dense
        if isinstance(texts, str):
            return self.query_vector(texts), self.dense
        return self.query_vectors(texts), self.dense

    def query_vectors(self, texts: list[str]) -> np.ndarray | None:
        """The embeddings of several query texts (e.g. a long prompt's prose windows) as one
        ``(len(texts), dim)`` array, uncached ones encoded in one batch; None while the model is
        not loaded or when ``texts`` is empty."""
        encoder = self.encoder
        if encoder is None or not texts:
            return None
        with self._query_lock:
            found = {t: self._query_cache.get((self.model_id, t)) for t in texts}
        missing = [t for t, v in found.items() if v is None]
        if missing:
            for text, vector in zip(missing, encoder.encode(missing)):
                found[text] = vector
                with self._query_lock:
                    if len(self._query_cache) >= QUERY_CACHE_SIZE:
                        self._query_cache.pop(next(iter(self._query_cache)))
                    self._query_cache[(self.model_id, text)] = vector
        return np.stack([found[t] for t in texts])

    # ---- the thread -------------------------------------------------------------
    def _load(self) -> ChildVectorStore:
        from cogd.embed.cache import EmbeddingCache
        from cogd.embed.encoder import load_encoder
        from cogd.embed.model import resolve_model

        info = resolve_model(self.config, self.index_dir.parent.parent)  # model_dir may be relative to the root
        release_free_heap()  # what the first index freed, before the model's ~200 MB come on top
        self.encoder = load_encoder(info, background_threads(self.config.threads), self.config.max_tokens,
                               self.config.batch_size, batch_tokens=self.config.batch_tokens)
        self.model_id = info.id
        self._cache = EmbeddingCache(self.index_dir / "embed_cache.db")
        # The table is written by a child process (cogd.index.vector_proc): LanceDB and Arrow
        # never load into the daemon.
        vectors = ChildVectorStore(self.index_dir / "vectors", info.dim, info.id)
        ids, kinds, _paths, matrix = vectors.open()
        dense = DenseIndex(info.dim)
        dense.replace(ids, kinds, matrix)
        self.dense = dense
        log.info("model %s loaded; %d stored vectors", info.id, len(ids))
        return vectors

    def _run(self) -> None:
        if self.yielding is not None:  # first: onnxruntime's pool threads, created at load, inherit it
            lower_thread_priority(self.yielding.nice)
        with self._cond:
            self._cond.wait_for(lambda: self._index_seen or self._stopping)
            if self._stopping:
                self.state = "stopped"
                return
        try:
            vectors = self._load()
        except Exception as exc:
            self.state, self.error = "error", f"{exc.__class__.__name__}: {exc}"
            log.exception("embedding disabled: the model could not be loaded")
            return
        try:
            while True:
                with self._cond:
                    while not (self._pending or self._stopping):
                        idle = vectors.idle_for()
                        if idle is not None and idle >= VECTOR_CHILD_IDLE_S:
                            vectors.release()  # a quiet daemon keeps no LanceDB process
                            idle = None
                        self._cond.wait(None if idle is None else max(0.05, VECTOR_CHILD_IDLE_S - idle))
                    if self._stopping:
                        return
                    self._pending = False
                self.counted = False  # until this pass has listed the entities
                self.state = "embedding"
                try:
                    # A fresh connection per pass: the index file may have been rebuilt since.
                    conn = store.connect(self.index_db, readonly=True)
                    try:
                        self._pass(conn, vectors)
                    finally:
                        conn.close()
                    self.error = None
                except Exception as exc:
                    self.error = f"{exc.__class__.__name__}: {exc}"
                    log.exception("embedding pass failed")
                self.state = "idle"
        finally:
            vectors.close()
            self.state = "stopped"

    def _hold_for_tests(self) -> None:
        """While the ``hold_embed`` fault is on (tests only, cogd.faults), wait before the next chunk."""
        while faults.active("hold_embed"):
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait(0.05)

    def _interrupted(self) -> bool:
        with self._cond:
            return self._stopping or self._pending

    def _encode_yielding(self, texts: list[str]) -> np.ndarray:
        """``encoder.encode(texts)``, giving way to requests before each of its batches.

        The encoder's own batches (token-sorted, ``batch_tokens`` at most): before each one
        :meth:`_before_batch` waits while a request is in flight
        (:meth:`cogd.daemon.scheduling.RequestTracker.wait_quiet`, counted in ``yields``) and
        picks the session: all of the encoder's threads when no request is in flight, the
        one-thread session (``LIGHT_THREADS``) when one still is, so that a hook's own query
        embedding and search keep a core. The vectors do not depend on the session.
        """
        assert self.encoder is not None
        return self.encoder.encode(texts, threads=self._before_batch)

    def _before_batch(self) -> int | None:
        y = self.yielding
        if y is not None and y.preempts:
            y.tracker.wait_quiet(y.quiet_s, y.max_s, lambda: self._stopping, self._count_yield)
        self.batches += 1
        if y is not None and y.tracker.in_flight > 0:
            self.light_batches += 1
            return LIGHT_THREADS
        return None

    def _count_yield(self) -> None:
        self.yields += 1

    def _pass(self, conn, vectors: ChildVectorStore) -> None:
        assert self.encoder is not None and self.dense is not None
        entities = store.entity_states(conn)
        gone = vectors.stale_ids(entities)
        if gone:
            vectors.delete(gone)
            self.dense.remove(gone)
        pending = [i for i, (h, _k, _p) in entities.items() if not vectors.holds(i, h)]
        self.dense.make_room(len(pending))  # one allocation, not a doubling per step
        pending, front = self._ordered(conn, entities, pending)
        self.total = len(entities)
        self.done = self.total - len(pending)
        self.front_total = len(front)
        self.front_done = self.front_total - sum(1 for i in pending if i in front)
        self.counted = self.ever_counted = True
        if self.first_tier.wanted(len(pending)):
            try:
                if self.first_tier.sync(conn, entities) > FIRST_TIER_CHUNK:
                    # the sync's texts and token lists are freed: measured on the standard library,
                    # 43 of the 79 MB it added went back to the system here, not at the pass's end
                    release_free_heap()
            except Exception as exc:  # a missing or broken static model: the pass goes on without it
                self.first_tier.error = f"{exc.__class__.__name__}: {exc}"
                log.exception("first tier unavailable")
        # The pass needs only ``pending`` and ``front`` from here on: the id → (hash, kind, path)
        # map of every entity (23 MB of small objects for the standard library's 60,445) would
        # otherwise stay alive for the whole pass, under the model and its arena.
        del entities
        if not pending:
            self.first_tier.drop()
            vectors.flush()  # a pass that only deleted: the table is told now (table deletes wait for a write)
            return
        log.info("embedding %d of %d entities (front: %d of %d)", len(pending), self.total,
                 self.front_total - self.front_done, self.front_total)
        started, embedded_at_start = time.monotonic(), self.done
        unwritten: list[dict] = []  # rows in the KNN index, not yet in the table (WRITE_ROWS)
        try:
            self._embed_chunks(conn, vectors, pending, front, started, embedded_at_start, unwritten)
        finally:
            vectors.upsert(unwritten)  # however the pass ends, what it embedded is stored
        if self.done >= self.total and not self._interrupted():
            self.first_tier.drop()  # the model covers every entity: searches switch to its vectors
        vectors.compact()
        if len(pending) > WRITE_ROWS:
            release_free_heap()  # a big pass's rows and texts are freed now

    def _embed_chunks(self, conn, vectors: ChildVectorStore, pending: list[str], front: set[str], started: float,
                      embedded_at_start: int, unwritten: list[dict]) -> None:
        """The chunks of :meth:`_pass`: encode (through the cache), update the KNN index, and
        write the table every WRITE_ROWS rows (the rest stays in ``unwritten`` for the caller)."""
        from cogd.embed.text import entity_text, text_key

        model = self.model_id
        for chunk in chunked(pending, CHUNK):
            self._hold_for_tests()
            if self._interrupted():
                return  # the index moved on (or we are stopping): start a fresh pass
            rows = store.embedding_rows(conn, chunk)
            texts = {r[0]: entity_text(r[1], r[2], r[3], r[4], r[7], r[5], style=self.config.text) for r in rows}
            keys = {i: text_key(model, self.config.max_tokens, t) for i, t in texts.items()}
            cached = self._cache.get_many(list(set(keys.values())))
            missing = [i for i in texts if keys[i] not in cached]
            if missing:
                fresh = self._encode_yielding([texts[i] for i in missing])
                new = {keys[i]: fresh[n] for n, i in enumerate(missing)}
                self._cache.put_many(new, model)
                cached.update(new)
                self.embedded += len(missing)
            # The pass's own id strings and interned kinds: the KNN index and the vector store's state
            # then share one string per id (about 100 bytes each) instead of a copy each.
            same = {i: i for i in chunk}
            batch = [
                {"id": same.get(r[0], r[0]), "kind": sys.intern(r[1]), "path": r[5], "model": model, "src_hash": r[6],
                 "vector": np.asarray(cached[keys[r[0]]], dtype=np.float32)}
                for r in rows
            ]
            self.dense.upsert([b["id"] for b in batch], [b["kind"] for b in batch],
                              np.stack([b["vector"] for b in batch]) if batch else np.zeros((0, self.dense.dim)))
            unwritten.extend(batch)
            if len(unwritten) >= WRITE_ROWS:
                vectors.upsert(unwritten)
                unwritten.clear()
            self.done += len(chunk)
            self.front_done += sum(1 for i in chunk if i in front)
            elapsed = time.monotonic() - started
            self.rate = (self.done - embedded_at_start) / elapsed if elapsed > 0 else 0.0

    def _ordered(self, conn, entities: dict, pending: list[str]) -> tuple[list[str], set[str]]:
        """``pending`` in embedding order and the front's ids (cogd.daemon.embed_order).

        The front's files are chosen again when they are older than FRONT_TTL_S (or none were
        found) and the pass has more than one chunk to do (a save's few entities go in one
        chunk: order does not matter there, and git is not asked on every save). If choosing
        fails, the last front is kept (file entities still go first).
        """
        front = self.front
        # An empty front is stale at once: it was chosen before the first index had committed.
        stale = not front.paths or time.monotonic() - front.chosen_at > embed_order.FRONT_TTL_S
        if front.chosen_at == 0.0 or (stale and len(pending) > CHUNK):
            try:
                indexed = {path for _h, _k, path in entities.values()}
                began = time.monotonic()
                front = self.front = embed_order.choose_front(self.index_dir.parent.parent, conn, indexed)
                log.info("embedding front: %d files (%d recent, %d most referenced), chosen in %.0f ms",
                         len(front.paths), front.recent, front.connected, (time.monotonic() - began) * 1000)
            except Exception:
                log.exception("could not choose the embedding front; keeping the last one")
                front = self.front = embed_order.Front(front.paths, front.recent, front.connected, time.monotonic())
        return embed_order.order(pending, entities, front), embed_order.front_ids(entities, front)
