"""What ranking asks of history, for one request: associations and co-change partners, on current ids.

Everything here reads the projection through this thread's read-only connection and only
while :meth:`HistoryMiner.usable` says the live set matches the tree's HEAD (else it returns
nothing: strictly no history from after HEAD). Ids recorded at past parents are mapped onto
the current index (:func:`cogd.history.store.current_ids`); two old ids that map to one
current entity are merged (scores added, commits united).
"""

from __future__ import annotations

import sqlite3

from cogd import secrets
from cogd.config import HistoryConfig
from cogd.history import store
from cogd.history.miner import HistoryMiner
from cogd.history.store import Association, AssociationSettings


class HistoryQueries:
    """Read side of history for the daemon's methods (see the module doc)."""

    def __init__(self, miner: HistoryMiner, config: HistoryConfig):
        self.miner = miner
        self.config = config
        self.settings = AssociationSettings(config.association_commits, config.per_commit, config.half_life_days)

    def associations(self, index_conn: sqlite3.Connection, match: str, limit: int,
                     query: str | None = None) -> list[Association]:
        """The entities of the commits whose messages match ``match`` (an FTS5 expression), best
        first, at most ``limit``, with each one's evidence (independent commits) and commits.
        With ``[history] mask_exact_message``, commits whose message is ``query`` are left out
        (:func:`cogd.history.store.associated`)."""
        if not match or not self.miner.usable():
            return []
        exclude = secrets.mask(query.strip()) if query is not None and self.config.mask_exact_message else None
        found = store.associated(self.miner.store.reader(), match, self.settings, exclude)
        mapping = store.current_ids(index_conn, [a.entity_id for a in found])
        merged: dict[str, Association] = {}
        for item in found:
            current = mapping.get(item.entity_id)
            if current is None:
                continue
            known = merged.get(current)
            if known is None:
                merged[current] = Association(current, item.score, item.evidence, list(item.commits))
            else:
                known.score += item.score
                known.commits += [h for h in item.commits if h not in known.commits]
                known.evidence = len(known.commits)
        return sorted(merged.values(), key=lambda a: (-a.score, a.entity_id))[:limit]

    def co_changed(self, index_conn: sqlite3.Connection, seeds: list[str]) -> list[tuple[str, str, float, int]]:
        """``(seed, partner, confidence, support)`` for the seeds' co-change partners that exist now."""
        if not seeds or not self.miner.usable():
            return []
        rows = store.co_changed(self.miner.store.reader(), seeds, self.config.co_change_min_confidence)
        mapping = store.current_ids(index_conn, list({r[1] for r in rows}))
        return [(seed, mapping[b], conf, sup) for seed, b, conf, sup in rows if b in mapping and mapping[b] != seed]

    def subjects(self, hashes: list[str]) -> dict[str, str]:
        """hash → subject of stored commits (for ``--explain``)."""
        return store.subjects(self.miner.store.reader(), hashes)

    def entity(self, entity_id: str, limit: int = 10) -> dict:
        """``{"commits": [...], "co_changed": [...]}`` for ``cogd show``: the live commits that
        touched the entity (newest first) and its strongest partners (confidence ≥ 0)."""
        if not self.miner.usable():
            return {"commits": [], "co_changed": [], "usable": False}
        conn = self.miner.store.reader()
        partners = [{"id": b, "confidence": round(conf, 3), "support": sup}
                    for _seed, b, conf, sup in store.co_changed(conn, [entity_id], 0.0, per_seed=limit)]
        return {"commits": store.entity_commits(conn, entity_id, limit), "co_changed": partners, "usable": True}
