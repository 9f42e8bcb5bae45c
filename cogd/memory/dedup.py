"""Duplicate detection on the write path: exact content, fuzzy title, embedding similarity.

Compared against **all** memories the caller passes (the store passes every
active memory of the type — no candidate cap). Fuzzy titles use rapidfuzz's
normalised Levenshtein ratio over :func:`~cogd.memory.normalise.normalise`\\d
titles; embeddings are unit float32 vectors, so similarity is a dot product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
from rapidfuzz import fuzz

from cogd.memory.normalise import normalise

TITLE_RATIO = 92.0  # rapidfuzz ratio (0–100) at or above which two titles are one
TITLE_MIN_CHARS = 8  # shorter normalised titles must match exactly


@dataclass
class Existing:
    """What dedup needs of a stored memory."""

    id: str
    title: str
    content_hash: str
    vector: np.ndarray | None = None


@dataclass
class Match:
    id: str
    how: str  # exact | title | embedding
    score: float  # 1.0 for exact; ratio/100 for title; cosine for embedding

    def as_dict(self) -> dict:
        return {"id": self.id, "how": self.how, "score": round(self.score, 4)}


def title_score(a: str, b: str) -> float:
    """Similarity of two titles in [0, 1]; 1.0 when their normalised forms are equal."""
    na, nb = normalise(a), normalise(b)
    if not na or not nb:
        return 0.0
    if na == nb:
        return 1.0
    if min(len(na), len(nb)) < TITLE_MIN_CHARS:
        return 0.0
    return fuzz.ratio(na, nb) / 100.0


def find_duplicate(title: str, content_hash: str, vector: np.ndarray | None, existing: Iterable[Existing],
                   *, similarity: float) -> Match | None:
    """The first stored memory that duplicates the new one, or None.

    Order of tests: exact normalised content, then title (ratio ≥
    :data:`TITLE_RATIO`), then embedding cosine ≥ ``similarity`` (only when
    both vectors exist and have the same size). The best match of the
    strongest test wins.
    """
    best: Match | None = None
    rank = {"exact": 3, "title": 2, "embedding": 1}
    for item in existing:
        found: Match | None = None
        if item.content_hash == content_hash:
            found = Match(item.id, "exact", 1.0)
        else:
            score = title_score(title, item.title)
            if score * 100 >= TITLE_RATIO:
                found = Match(item.id, "title", score)
            elif vector is not None and item.vector is not None and item.vector.shape == vector.shape:
                cosine = float(np.dot(vector, item.vector))
                if cosine >= similarity:
                    found = Match(item.id, "embedding", cosine)
        if found and (best is None or (rank[found.how], found.score) > (rank[best.how], best.score)):
            best = found
    return best


def nearest(vector: np.ndarray | None, existing: Iterable[Existing], threshold: float) -> Match | None:
    """The most similar memory by embedding with cosine ≥ ``threshold``, or None (no vector → None)."""
    if vector is None:
        return None
    best: Match | None = None
    for item in existing:
        if item.vector is None or item.vector.shape != vector.shape:
            continue
        cosine = float(np.dot(vector, item.vector))
        if cosine >= threshold and (best is None or cosine > best.score):
            best = Match(item.id, "embedding", cosine)
    return best
