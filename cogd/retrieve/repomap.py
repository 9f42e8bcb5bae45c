"""The repository map: personalised PageRank over the code graph, rendered file by file.

Like aider's repo map, the map answers "what matters in this repository, for
this person, now" in a few hundred tokens: the definitions the rest of the
code leans on most, weighted towards what is being worked on.

Graph: every entity is a node; ``calls`` and ``inherits`` edges point from the
user to the used, ``imports`` from the importing file to the imported one, and
``contains`` from a member to its container (weight 0.3: a class is as
important as the methods others call). PageRank (Page, Brin, Motwani &
Winograd, "The PageRank citation ranking", 1999) with teleport vector ``p``:

    r ← (1 − d)·p + d·(Wᵀ r + (mass of dangling nodes)·p),   d = 0.85

iterated until the L1 change is below 1e-6 (at most 50 rounds). ``p`` is the
personalisation (Haveliwala, "Topic-sensitive PageRank", WWW 2002): uniform,
plus extra mass on the entities of recently changed files and on entities
with high utility.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from cogd.index import store
from cogd.retrieve.lexical import Hit

DAMPING = 0.85
MAX_ROUNDS = 50
TOLERANCE = 1e-6
EDGE_KIND_WEIGHT = {"calls": 1.0, "inherits": 1.0, "imports": 1.0, "contains": 0.3}
RECENT_SHARE = 0.5  # of the teleport mass, on recently changed files' entities (when there are some)
UTILITY_SHARE = 0.2  # of the teleport mass, on entities in proportion to utility above the prior
_DEFINITIONS = ("class", "function", "method", "constant")  # what the map lists under a file


@dataclass
class RankedGraph:
    """PageRank scores by entity id (summing to 1) and the ids in score order."""

    scores: dict[str, float]
    order: list[str]


def pagerank(
    conn: sqlite3.Connection,
    recent_paths: list[str] | None = None,
    utility: dict[str, float] | None = None,
) -> RankedGraph:
    """Personalised PageRank over the index's entities and edges.

    ``recent_paths``: files to favour, newest first (earlier ones weigh more).
    ``utility``: entity id → weight ≥ 0 to favour (e.g. utility above the
    prior). Unresolved edges (to external modules) are ignored. Runs in
    O(rounds × edges); about 0.1 s for 60,000 entities. Raises sqlite3.Error
    on a broken index.
    """
    rows = store.entity_paths(conn)
    if not rows:
        return RankedGraph({}, [])
    ids = [r[0] for r in rows]
    index = {entity_id: i for i, entity_id in enumerate(ids)}
    n = len(ids)
    src: list[int] = []
    dst: list[int] = []
    weight: list[float] = []
    for a, b, kind in store.all_edges(conn):
        i, j = index.get(a), index.get(b)
        w = EDGE_KIND_WEIGHT.get(kind)
        if i is None or j is None or w is None or i == j:
            continue
        if kind == "contains":  # member → container
            i, j = j, i
        src.append(i)
        dst.append(j)
        weight.append(w)
    s = np.asarray(src, dtype=np.int64)
    t = np.asarray(dst, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    out_weight = np.bincount(s, weights=w, minlength=n) if len(s) else np.zeros(n)
    norm = np.divide(w, out_weight[s], out=np.zeros_like(w), where=out_weight[s] > 0) if len(s) else w
    dangling = out_weight == 0

    teleport = np.full(n, 1.0 / n)
    extra = np.zeros(n)
    if recent_paths:
        rank_of = {path: k for k, path in enumerate(recent_paths)}
        marks = np.array([1.0 / (1 + rank_of[r[1]] / 5) if r[1] in rank_of else 0.0 for r in rows])
        if marks.sum() > 0:
            extra += RECENT_SHARE * marks / marks.sum()
    if utility:
        marks = np.zeros(n)
        for entity_id, value in utility.items():
            k = index.get(entity_id)
            if k is not None and value > 0:
                marks[k] = value
        if marks.sum() > 0:
            extra += UTILITY_SHARE * marks / marks.sum()
    if extra.sum() > 0:
        teleport = (1 - extra.sum()) * teleport + extra
    teleport /= teleport.sum()

    rank = teleport.copy()
    for _ in range(MAX_ROUNDS):
        spread = np.bincount(t, weights=rank[s] * norm, minlength=n) if len(s) else np.zeros(n)
        new = (1 - DAMPING) * teleport + DAMPING * (spread + rank[dangling].sum() * teleport)
        change = np.abs(new - rank).sum()
        rank = new
        if change < TOLERANCE:
            break
    order = [ids[k] for k in np.argsort(-rank, kind="stable")]
    return RankedGraph({ids[k]: float(rank[k]) for k in range(n)}, order)


def map_entities(
    conn: sqlite3.Connection, graph: RankedGraph, *, max_files: int = 8, per_file: int = 4,
    skip_path=None,
) -> list[tuple[str, float, list[Hit]]]:
    """The map's content: ``(path, file score, top definitions)`` for the best files.

    A file's score is the sum of its entities' PageRank. Definitions are
    classes, functions, methods and constants, best first. ``skip_path``:
    a predicate for paths to leave out (tests, examples).
    """
    file_score: dict[str, float] = {}
    path_of = dict(store.entity_paths(conn))
    for entity_id, score in graph.scores.items():
        path = path_of.get(entity_id)
        if path is not None:
            file_score[path] = file_score.get(path, 0.0) + score
    files = [p for p in sorted(file_score, key=file_score.get, reverse=True) if not (skip_path and skip_path(p))]
    files = files[:max_files]
    by_path: dict[str, list[Hit]] = {path: [] for path in files}
    for row in store.entities_in_paths(conn, files, kinds=_DEFINITIONS):
        hit = Hit(*row, graph.scores.get(row[0], 0.0))
        by_path[hit.path].append(hit)
    result = []
    for path in files:
        defs = sorted(by_path[path], key=lambda h: -h.score)[:per_file]
        result.append((path, file_score[path], sorted(defs, key=lambda h: h.start_line)))
    return result
