"""How ranked lists become one ranking: the retrieval modes and reciprocal rank fusion.

Standard library only and low in the import graph (docs/architecture.md, "Layers"), because
both code retrieval (:mod:`cogd.retrieve.hybrid`) and memory search
(:mod:`cogd.memory.api`) fuse a BM25 list with a vector list, and the configuration checks
the mode by name. A mode says which lists are fused: ``bm25`` the lexical one, ``vector``
the nearest neighbours of the query embedding, ``hybrid`` both.
"""

from __future__ import annotations

from collections.abc import Iterable

# The retrieval modes, in the order the CLI and the docs list them.
BM25, VECTOR, HYBRID = "bm25", "vector", "hybrid"
MODES: tuple[str, ...] = (BM25, VECTOR, HYBRID)
# The constant of reciprocal rank fusion: 60 is the value Cormack et al. found robust.
RRF_K = 60


def describe_modes() -> str:
    """``"bm25, vector or hybrid"``: the modes as an error message names them."""
    return ", ".join(MODES[:-1]) + " or " + MODES[-1]


def reciprocal_rank_fusion(
    lists: Iterable[tuple[float, Iterable[str]]],
    k: int = RRF_K,
    into: dict[str, float] | None = None,
) -> dict[str, float]:
    """Fuse ranked lists of ids: ``score(d) = Σ_s w_s / (k + rank_s(d))``, ranks from 1.

    Source: Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
    individual rank learning methods", SIGIR 2009 (unweighted there, with k = 60; the
    weight ``w_s`` per list is cogd's, e.g. ``retrieve.bm25_weight``).

    Args:
        lists: ``(weight, ids best first)`` per ranked list; an id repeated within one list
            counts at each of its ranks (callers pass lists without repeats).
        k: the fusion constant, > 0; larger flattens the advantage of the top ranks.
        into: scores to add to (updated in place and returned), e.g. to fuse one more list
            later; a new dict when None.

    Returns:
        id → fused score, in the order ids were first seen (sort it for a ranking).
    """
    fused = {} if into is None else into
    for weight, ids in lists:
        for rank, entity_id in enumerate(ids, 1):
            fused[entity_id] = fused.get(entity_id, 0.0) + weight / (k + rank)
    return fused
