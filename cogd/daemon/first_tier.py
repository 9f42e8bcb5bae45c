"""The first tier: static vectors for every entity within seconds, while the transformer catches up.

A pass with many entities to embed (``[embed] first_tier_min`` or more; 0 =
never) first embeds *every* entity with the trained static table shipped in
the package (:mod:`cogd.embed.static_table`, ``embed.model = "minilm-static-code"``:
thousands a second, no onnxruntime, nothing distilled or trained at run time)
into a KNN index of its own (int8 rows, :class:`DenseIndex`), and searches use
that index until the transformer's pass has covered every entity; then the
static tier is dropped (its memory freed) and searches use the transformer's index.

Never mixed: the two tiers' vectors live in two :class:`DenseIndex` objects
of different dimensions, and a search takes one ``(query vector, index)``
pair from :meth:`FirstTier.pair` / ``EmbeddingWorker.search_pair``, both of
the same tier, read in one step; the fusion (``cogd.retrieve.hybrid``) gets
one vector list from one model, exactly as without tiers. Memory records
are always embedded by the transformer (their vectors are stored).
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import numpy as np

from cogd.config import EmbedConfig
from cogd.index import store
from cogd.index.vectors import DenseIndex
from cogd.inlist import chunked

log = logging.getLogger(__name__)

CHUNK = 512  # entities per static encode call: their rows, texts and token lists are the sync's scratch memory


def content_stamp(src_hash: str) -> int:
    """The 64-bit stamp the tier keeps for an entity's content hash (``DenseIndex`` stamps).

    The index's hashes are xxh3-64 as 16 hex digits (:func:`cogd.index.extract.content_hash`):
    their number, exactly (two hashes differ iff their stamps do). Any other string gets the
    xxh3-64 of its UTF-8 bytes. One uint64 per row instead of a dict entry and a 65-byte
    string: 5.3 MB less for the standard library's 60,445 entities.
    """
    if len(src_hash) == 16:
        try:
            return int(src_hash, 16)
        except ValueError:
            pass
    import xxhash

    return xxhash.xxh3_64_intdigest(src_hash.encode("utf-8", "surrogatepass"))


class FirstTier:
    """The static tier of one embedding worker. One writer (the embedding thread); ``pair`` from any thread."""

    def __init__(self, config: EmbedConfig):
        self.config = config
        self._lock = threading.Lock()
        self._encoder = None
        # Not None while the tier serves searches; each row is stamped with the content_stamp of
        # the src_hash its static vector was made from (what a later sync compares).
        self._dense: DenseIndex | None = None
        self.model_id: str | None = None
        self.embedded = 0  # static vectors computed since start
        self.seconds = 0.0  # time the last sync took
        self.error: str | None = None

    @property
    def active(self) -> bool:
        """True while static vectors answer searches."""
        return self._dense is not None

    def wanted(self, pending: int) -> bool:
        """Whether a pass with ``pending`` entities to embed should use (or keep) the tier."""
        return self.active or (self.config.first_tier_min > 0 and pending >= self.config.first_tier_min)

    def _load(self):
        from cogd.config import EmbedConfig as _Embed
        from cogd.embed.encoder import load_encoder
        from cogd.embed.model import SHIPPED_STATIC_MODEL, resolve_model

        info = resolve_model(_Embed(model=SHIPPED_STATIC_MODEL))  # the pinned table in the package
        self._encoder = load_encoder(info)
        self.model_id = info.id
        return self._encoder

    def sync(self, conn, entities: dict) -> int:
        """Give every entity of ``entities`` (id -> (src_hash, kind, path)) its current static vector
        and drop the vectors of entities that are gone; returns how many were embedded. The tier
        serves searches from the end of the first sync. Raises ModelError when the static model
        cannot be loaded (the caller goes on without the tier).

        The tier's index keeps the key strings of ``entities`` as its ids (the embedding pass's
        own, which the transformer's index and the vector store's state keep too: one string per
        id in the daemon, not one per tier), interned kinds, and a content stamp per row instead
        of a dict of hash strings."""
        from cogd.embed.text import entity_text

        began = time.monotonic()
        encoder = self._encoder or self._load()
        dense = self._dense or DenseIndex(encoder.dim)
        gone = [i for i in dense.live_ids() if i not in entities]
        if gone:
            dense.remove(gone)
        ids = list(entities)
        stamps = np.fromiter((content_stamp(h) for h, _k, _p in entities.values()), dtype=np.uint64, count=len(ids))
        todo = [ids[k] for k in dense.changed(ids, stamps)]
        del ids, stamps
        dense.make_room(len(todo))
        for chunk in chunked(todo, CHUNK):
            rows = store.embedding_rows(conn, chunk)
            texts = [entity_text(r[1], r[2], r[3], r[4], r[7], r[5], style=self.config.text) for r in rows]
            vectors = encoder.encode(texts) if texts else np.zeros((0, encoder.dim), dtype=np.float32)
            own = {i: i for i in chunk}  # the row's id → the pass's string of it
            dense.upsert([own.get(r[0], r[0]) for r in rows], [sys.intern(r[1]) for r in rows], vectors,
                         stamps=[content_stamp(r[6]) for r in rows])
        with self._lock:
            self._dense = dense
        self.embedded += len(todo)
        self.seconds = time.monotonic() - began
        if todo:
            log.info("first tier: %d static vectors in %.1f s (%s)", len(todo), self.seconds, self.model_id)
        return len(todo)

    def drop(self) -> None:
        """Stop serving searches and free the static vectors (the transformer covers every entity)."""
        with self._lock:
            was, self._dense = self._dense is not None, None
        if was:
            log.info("first tier dropped: the model's vectors cover every entity")

    def pair(self, texts: str | list[str]) -> tuple[np.ndarray | None, DenseIndex | None]:
        """``(query vector(s), index)`` of the static tier, or ``(None, None)`` when it is not active.
        ``texts``: one query (→ shape (dim,)) or several windows (→ (n, dim))."""
        with self._lock:
            dense, encoder = self._dense, self._encoder
        if dense is None or encoder is None:
            return None, None
        if isinstance(texts, str):
            return encoder.encode_query(texts), dense
        return encoder.encode(texts), dense

    def status(self) -> dict:
        """``active``, ``model``, ``entities`` (static vectors held), ``computed`` since start,
        ``seconds`` of the last sync, ``error``, ``min`` (``[embed] first_tier_min``: 0 = off)."""
        dense = self._dense
        return {"active": dense is not None, "model": self.model_id, "entities": len(dense) if dense else 0,
                "computed": self.embedded, "seconds": round(self.seconds, 2), "error": self.error,
                "min": self.config.first_tier_min}
