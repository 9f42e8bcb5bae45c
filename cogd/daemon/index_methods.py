"""The daemon's index methods: ``index.touch``, ``index.refresh``, ``search``, ``entity.get``, ``stats``.

Reads run on the calling thread's read-only index connection (:meth:`Parts.reader`);
writes are queued to the index worker. An editor's saves reported by
``index.touch`` are attributed to recent sessions as ``edit`` touches once the
files are re-indexed (:func:`attribute_saves`). See docs/protocol.md.
"""

from __future__ import annotations

import logging
import threading
from cogd.daemon import params as p
from cogd.daemon.parts import Handler, Parts, bind, learned_evidence
from cogd.errors import not_found
from cogd.index import store
from cogd.index.boundary import tree_relpath
from cogd.retrieve.feedback import LEARNED_SOURCES, Feedback
from cogd.retrieve.hybrid import retrieve
from cogd.retrieve.lexical import query_terms, stopword_names
from cogd.retrieve.prompt import analyze
from cogd.usage.touches import Touch
from cogd.fusion import MODES

log = logging.getLogger(__name__)

SAVE_SESSION_WINDOW_S = 1800.0  # an editor's save counts for sessions with a pack this recent
MAX_TOUCHED_PATHS = 10_000


def touch(parts: Parts, params: dict) -> dict:
    """Queue ``paths`` for re-indexing (``wait``: until done); attribute the saves unless ``attribute`` is false."""
    paths = p.str_list(params, "paths", MAX_TOUCHED_PATHS, required=True)
    # Relative to the root; `..`, absolute paths and symlinks that lead out of the tree are dropped.
    root = parts.layout.root
    rel = list(dict.fromkeys(path for path in (tree_relpath(root, raw) for raw in paths) if path))
    timeout = p.seconds(params, 60.0)
    before = _entity_hashes(parts, rel) if rel and params.get("attribute", True) is not False else None
    ticket = parts.worker.request(rel)
    if before is not None:
        now = p.event_time(params, parts.config.usage.trust_client_clock)
        threading.Thread(target=attribute_saves, args=(parts, rel, before, ticket, now),
                         name="cogd-save-touches", daemon=True).start()
    if params.get("wait"):
        parts.worker.wait(ticket, timeout=timeout)
    return {"queued": rel, "ticket": ticket}


def _entity_hashes(parts: Parts, paths: list[str]) -> dict[str, str]:
    """``{entity id: content hash}`` of the definitions in ``paths`` (before a save is re-indexed)."""
    return dict(store.entities_in_paths(parts.reader(), paths, ("id", "hash")))


def attribute_saves(parts: Parts, paths: list[str], before: dict[str, str], ticket: int, now: float) -> None:
    """An editor's saves count as touches: once the saved files are re-indexed, each entity
    whose content hash changed (or that is new) is an ``edit`` touch of its lines, recorded
    for every session with a pack delivered in the last SAVE_SESSION_WINDOW_S."""
    try:
        if not parts.worker.wait(ticket, timeout=30.0):
            return
        conn = store.connect(parts.layout.index_db, readonly=True)
        try:
            rows = store.entities_in_paths(conn, paths, ("id", "hash", "path", "start_line", "end_line"))
        finally:
            conn.close()
        touches = [Touch(path, "edit", start, end) for entity_id, digest, path, start, end in rows
                   if before.get(entity_id) != digest]
        if not touches:
            # The watcher may have re-indexed the file before this request saw the old
            # hashes: fall back to a file-level touch of each saved file.
            touches = [Touch(path, "write") for path in paths]
        for session in parts.ledger.open_sessions(since=now - SAVE_SESSION_WINDOW_S):
            parts.ledger.record_tool_use(session, "FileSave", "", touches, now=now)
            parts.associate(session, touches, now)
    except Exception:
        log.exception("could not attribute saved files %s", paths[:5])


def refresh(parts: Parts, params: dict) -> dict:
    """A stat-scan refresh (``full``: re-parse everything); waits for it unless ``wait`` is false."""
    timeout = p.seconds(params, 3600.0, limit=86400.0)
    ticket = parts.worker.request(None, full=params.get("full") is True)
    if params.get("wait", True):
        done = parts.worker.wait(ticket, timeout=timeout)
        result = parts.worker.last_result
        return {"ticket": ticket, "done": done, "result": result.as_dict() if result else None}
    return {"ticket": ticket, "done": False, "result": None}


def search(parts: Parts, params: dict) -> dict:
    """Entities ranked for ``query`` (``kind``, ``limit`` 1..1000, ``mode``)."""
    query = p.text(params, "query", required=True)
    kind = p.text(params, "kind", limit=40)
    limit = p.integer(params, "limit", 20, 1, 1000)
    mode = p.choice(params, "mode", MODES, parts.config.retrieve.mode)
    vector, dense = parts.query_vector(query, mode)
    # A searched word that prose drops as filler (``hello``, ``get``) may be a definition's name:
    # it is looked up as one, and a search of nothing but such words is a BM25 search of them.
    names = stopword_names(query)
    analysed = analyze(query)
    analysed.identifiers += [w for w in names if w not in analysed.identifiers]
    extra = () if query_terms(query) else tuple(dict.fromkeys(w.lower() for w in names))
    hits = retrieve(parts.reader(), query, parts.config.retrieve, mode=mode, query_vector=vector, dense=dense,
                    kinds=(kind,) if kind else None, limit=limit, parts=analysed, extra_terms=extra)
    return {"mode": mode, "vectors": vector is not None,
            "hits": [{**h.__dict__, "score": round(h.score, 6)} for h in hits]}


def entity_get(parts: Parts, params: dict) -> dict:
    """One entity with its edges both ways, its body and its delivery counts; ``not_found`` for an unknown id."""
    entity_id = p.identifier(params, p.ENTITY_ID)
    detail = store.entity_detail(parts.reader(), entity_id)
    if detail is None:
        raise not_found(f"no entity {entity_id!r}", id=entity_id)
    answer = {**detail, "usage": parts.ledger.entity_usage(entity_id, detail["entity"]["path"])}
    if parts.history is not None:  # the commits that changed it and its co-change partners
        answer["history"] = parts.history.entity(entity_id)
    return answer


def stats(parts: Parts, params: dict) -> dict:
    """Counts of the index (by language and kind, edges, files) and of the ledger."""
    conn = parts.reader()
    groups = store.breakdown(conn)
    totals = parts.ledger.totals()
    # Deterministic: the same index and ledger give the same answer (no clock
    # fields; `status` carries index.indexed_at), so a reset can be checked.
    return {
        "index": {**store.counts(conn), "commit": store.get_meta(conn, "commit") or None},
        "entities": groups["entities"],
        "edges": groups["edges"],
        "files": groups["files"],
        "ledger": totals,
        "by_client": parts.ledger.by_client(),
        **{key: totals[key] for key in ("deliveries", "hits", "misses", "hit_rate")},
        "learned": learned(parts),
    }


def learned(parts: Parts) -> dict[str, dict]:
    """Per learned source: the evidence behind it, its configured and its applied weight.

    ``{"utility": {"sessions": n, "weight": w, "effective_weight": w·n/(n+k)}, ...,
    "history_association": {"commits": n, ...}, "co_change": {"commits": n, ...}}``: sessions for
    the ledger's sources, reachable change requests / pair commits for history's
    (:mod:`cogd.evidence`, :meth:`cogd.retrieve.feedback.Feedback.weight`).
    """
    feedback = Feedback(parts.config.rank, evidence=learned_evidence(parts))
    unit = {"evidence_k": "sessions"}
    return {source: {unit.get(LEARNED_SOURCES[source], "commits"): int(feedback.evidence.get(source, 0)),
                     "weight": getattr(parts.config.rank, f"{source}_weight"),
                     "effective_weight": round(feedback.weight(source), 4)} for source in LEARNED_SOURCES}


HANDLERS = {"index.touch": touch, "index.refresh": refresh, "search": search, "entity.get": entity_get,
            "stats": stats}


def methods(parts: Parts) -> dict[str, Handler]:
    """Method name → handler(params), over ``parts``' index readers, index worker and ledger."""
    return bind(parts, HANDLERS)
