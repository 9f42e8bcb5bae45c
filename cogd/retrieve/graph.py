"""Call-graph queries over the code index: callers, callees, impact.

Pure functions over an open ``index.db`` connection (the queries are
:mod:`cogd.index.store`'s); nothing here writes. The edges
are the index's ``calls`` edges (``src`` calls ``dst``), resolved by name as
:mod:`cogd.index.resolve` explains; each result row keeps the edge's
``resolution`` (``scope``, ``file``, ``import``, ``global``) so a caller can
weigh a same-scope call above a repository-wide guess.

Every function raises :class:`GraphError` for bad arguments or an unknown
entity id (the daemon turns it into ``bad_request`` / ``not_found``) and
``sqlite3.Error`` for a broken database.
"""

from __future__ import annotations

import sqlite3
from collections import deque

from cogd.errors import CogdError
from cogd.index import store

#: Bounds for :func:`impact` (and the defaults the daemon methods use).
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
DEFAULT_DEPTH = 3
MAX_DEPTH = 10

_ENTITY_COLUMNS = ("id", "kind", "path", "qualname", "start_line", "end_line", "signature")


class GraphError(CogdError, ValueError):
    """A graph query cannot run. ``kind`` is ``not_found`` or ``bad_request``."""


def _check_int(value: object, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise GraphError("bad_request", f"{name} must be an integer in {low}..{high}, got {value!r}")
    return value


def _require(conn: sqlite3.Connection, entity_id: str) -> None:
    if not isinstance(entity_id, str) or not entity_id:
        raise GraphError("bad_request", "id must be a non-empty entity id such as 'json/decoder.py::JSONDecoder.decode'")
    if not store.entity_exists(conn, entity_id):
        raise GraphError("not_found", f"no entity {entity_id!r} (ids come from search results)", id=entity_id)


def callers(conn: sqlite3.Connection, entity_id: str, limit: int = DEFAULT_LIMIT) -> dict:
    """The entities whose body calls ``entity_id``.

    ``limit``: 1..MAX_LIMIT rows. Returns ``{"id", "callers": [row], "total",
    "truncated"}``; a row has ``id, kind, path, qualname, start_line,
    end_line, signature, resolution``. Raises GraphError.
    """
    _require(conn, entity_id)
    limit = _check_int(limit, "limit", 1, MAX_LIMIT)
    rows, total = store.call_neighbours(conn, entity_id, "in", limit, _ENTITY_COLUMNS)
    return {"id": entity_id, "callers": rows, "total": total, "truncated": total > len(rows)}


def callees(conn: sqlite3.Connection, entity_id: str, limit: int = DEFAULT_LIMIT) -> dict:
    """The entities that ``entity_id`` calls (resolved calls only; see module doc).

    Same shape as :func:`callers`, with ``callees`` for ``callers``.
    """
    _require(conn, entity_id)
    limit = _check_int(limit, "limit", 1, MAX_LIMIT)
    rows, total = store.call_neighbours(conn, entity_id, "out", limit, _ENTITY_COLUMNS)
    return {"id": entity_id, "callees": rows, "total": total, "truncated": total > len(rows)}


def impact(conn: sqlite3.Connection, entity_id: str, depth: int = DEFAULT_DEPTH, limit: int = DEFAULT_LIMIT) -> dict:
    """Transitive callers of ``entity_id``: what a change to it may affect.

    Breadth-first over ``calls`` edges backwards, at most ``depth`` hops
    (1..MAX_DEPTH) and ``limit`` entities (1..MAX_LIMIT); each entity is
    reported once, at its shortest distance, with ``via`` (the entity it calls
    on that shortest path). Deterministic: neighbours are visited in id order.

    Returns ``{"id", "depth", "impacted": [row + {"distance", "via"}],
    "truncated"}`` where ``truncated`` says the limit cut the walk short.
    Raises GraphError.
    """
    _require(conn, entity_id)
    depth = _check_int(depth, "depth", 1, MAX_DEPTH)
    limit = _check_int(limit, "limit", 1, MAX_LIMIT)
    seen = {entity_id}
    found: list[tuple[str, int, str]] = []  # (id, distance, via)
    frontier = deque([(entity_id, 0)])
    truncated = False
    while frontier and not truncated:
        current, distance = frontier.popleft()
        if distance >= depth:
            continue
        for src in store.caller_ids(conn, current):
            if src in seen:
                continue
            if len(found) >= limit:
                truncated = True
                break
            seen.add(src)
            found.append((src, distance + 1, current))
            frontier.append((src, distance + 1))
    rows = {entity_id: dict(zip(_ENTITY_COLUMNS, row))
            for entity_id, row in store.entities_by_ids(conn, [f[0] for f in found], _ENTITY_COLUMNS).items()}
    impacted = [{**rows[i], "distance": d, "via": via} for i, d, via in found if i in rows]
    return {"id": entity_id, "depth": depth, "impacted": impacted, "truncated": truncated}
