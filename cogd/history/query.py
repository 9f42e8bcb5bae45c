"""What ranking asks of history, for one request: associations and co-change partners, on current ids.

Everything here reads the projection through this thread's read-only connection and only
while :meth:`HistoryMiner.usable` says the live set matches the tree's HEAD (else it returns
nothing: strictly no history from after HEAD). Ids recorded at past parents are mapped onto
the current index (:func:`cogd.history.store.current_ids`); two old ids that map to one
current entity are merged (scores added, commits united).
"""

from __future__ import annotations

import sqlite3
from typing import Callable

from cogd.config import HistoryConfig
from cogd.history import store
from cogd.history.miner import HistoryMiner
from cogd.history.store import Association, AssociationSettings, LiveView


class HistoryQueries:
    """Read side of history for the daemon's methods (see the module doc)."""

    def __init__(self, miner: HistoryMiner, config: HistoryConfig):
        self.miner = miner
        self.config = config
        self.settings = AssociationSettings(config.association_commits, config.per_commit, config.half_life_days,
                                            config.request_decay, config.min_match_share, config.name_weight,
                                            config.request_order, config.request_members)
        # Old id → current id (None: gone), valid for one state of the index and of the live set.
        self._mapped: dict[str, str | None] = {}
        self._mapped_for: tuple | None = None
        # Per state of the live set (synced HEAD, projection file, writer's commits): the newest
        # live commit's time and the evidence counts, read once per state instead of per request.
        self._per_state: tuple | None = None
        self._changes: tuple | None = None  # (state, {path: change requests}) of file_changes

    def _current(self, index_conn: sqlite3.Connection, ids: list[str], index_version: object) -> dict[str, str]:
        """:func:`cogd.history.store.current_ids`, cached while ``index_version`` and the synced
        HEAD stay the same (None: no cache)."""
        key = (index_version, self.miner.synced_head)
        if index_version is None or key != self._mapped_for or len(self._mapped) > 50_000:
            self._mapped, self._mapped_for = {}, key
        wanted = [i for i in ids if i not in self._mapped]
        if wanted:
            found = store.current_ids(index_conn, wanted)
            for i in wanted:
                self._mapped[i] = found.get(i)
        mapped = {i: self._mapped.get(i) for i in ids}
        if index_version is None:
            self._mapped = {}
        return {i: c for i, c in mapped.items() if c is not None}

    def _view(self) -> LiveView | None:
        """The miner's :class:`LiveView` when it was built for the live set as it is now, else None
        (mid-pass, or before the first pass: the reads then go to SQL)."""
        view = self.miner.view
        if view is not None and view.key == self.miner.state_key():
            return view
        return None

    def _state(self) -> dict:
        """``{"newest": newest live commit time, "evidence": {...}}`` for the live set as it is now."""
        view = self._view()
        if view is not None:
            return {"newest": view.newest, "evidence": view.evidence}
        key = self.miner.state_key()
        if self._per_state is None or self._per_state[0] != key:
            conn = self.miner.store.reader()
            self._per_state = (key, {"newest": store.newest_time(conn),
                                     "evidence": store.evidence(conn, self.config.co_change_max_definitions)})
        return self._per_state[1]

    def _newest_time(self) -> int | None:
        return self._state()["newest"]

    def evidence(self) -> dict[str, int]:
        """``{"history_association": change requests, "co_change": pair commits}`` behind the two
        history sources (:func:`cogd.history.store.evidence`); zeros while history is not usable
        (nothing from history may be used, so it weighs nothing)."""
        if not self.miner.usable():
            return {"history_association": 0, "co_change": 0}
        return dict(self._state()["evidence"])

    def associations(self, index_conn: sqlite3.Connection, match: str, limit: int,
                     query: str | None = None, index_version: object = None,
                     tests_unwanted: Callable[[str], bool] | None = None,
                     terms: list[str] | None = None) -> list[Association]:
        """The entities of the commits whose messages match ``match`` (an FTS5 expression), best
        first, at most ``limit``, with each one's evidence (independent commits) and commits.
        With ``[history] mask_exact_message``, commits whose message is ``query`` are left out
        (:func:`cogd.history.store.associated`). ``index_version``: a token that changes with the
        index (the daemon's refresh count), for the id-mapping cache. ``tests_unwanted``: the
        caller's test-path predicate when the request does not ask for tests (None when it does);
        with ``[history] test_changes = "wanted"`` a request's test edits are then left out of its
        change (:func:`cogd.history.store.associated`'s ``leave_out``), with ``"always"`` kept.
        ``terms``: the query's words (lower case), for ``[history] request_order = "named"``."""
        if not match or not self.miner.usable():
            return []
        limit = min(limit, self.config.max_associations)
        exclude = query if self.config.mask_exact_message else None
        view = self._view()
        leave_out = tests_unwanted if self.config.test_changes == "wanted" else None
        found = store.associated(self.miner.store.reader(), match, self.settings, exclude,
                                 view.newest if view is not None else self._newest_time(), view, leave_out, terms)
        mapping = self._current(index_conn, [a.entity_id for a in found], index_version)
        merged: dict[str, Association] = {}
        for item in found:
            current = mapping.get(item.entity_id)
            if current is None:
                continue
            known = merged.get(current)
            if known is None:
                merged[current] = Association(current, item.score, item.evidence, list(item.commits),
                                              list(item.times))
            else:
                known.score += item.score
                for position, hash_ in enumerate(item.commits):
                    if hash_ not in known.commits:
                        known.commits.append(hash_)
                        if position < len(item.times):
                            known.times.append(item.times[position])
                known.evidence = len(known.commits)
        return sorted(merged.values(), key=lambda a: (-a.score, a.entity_id))[:limit]

    def co_changed(self, index_conn: sqlite3.Connection, seeds: list[str],
                   index_version: object = None) -> list[tuple[str, str, float, int]]:
        """``(seed, partner, confidence, support)`` for the seeds' co-change partners that exist now."""
        if not seeds or not self.miner.usable():
            return []
        rows = store.co_changed(self.miner.store.reader(), seeds, self.config.co_change_min_confidence,
                                view=self._view())
        mapping = self._current(index_conn, list({r[1] for r in rows}), index_version)
        return [(seed, mapping[b], conf, sup) for seed, b, conf, sup in rows if b in mapping and mapping[b] != seed]

    def file_changes(self, index_conn: sqlite3.Connection, index_version: object = None) -> dict[str, int]:
        """``{current path: live commits that changed it}``: how often each file of the index was
        where a change went, the prior P(file) of the file-level ranking
        (:meth:`cogd.retrieve.feedback.Feedback.file_prior_shares`; counted by
        :func:`cogd.history.store.file_changes`: a commit once per file, a moved file's
        definitions following it). Only live commits not skipped count; {} while history is not
        usable. Read from the miner's :class:`LiveView` when it holds them (counted at the end of
        the pass against the index as it was then: no request pays for them), else counted here
        once per state of the live set and cached (a prior moves with history, not with each
        edit; ``index_version`` only feeds the id-mapping cache). Raises sqlite3.Error."""
        if not self.miner.usable():
            return {}
        view = self._view()
        if view is not None and view.file_changes is not None:
            return view.file_changes
        key = self.miner.state_key()
        if self._changes is not None and self._changes[0] == key:
            return self._changes[1]
        rows = view.touched_rows() if view is not None else store.touched_rows(self.miner.store.reader())
        counts = store.file_changes(index_conn, rows, lambda ids: self._current(index_conn, ids, index_version))
        self._changes = (key, counts)
        return counts

    def subjects(self, hashes: list[str]) -> dict[str, str]:
        """hash → subject of stored commits (for ``--explain``)."""
        view = self._view()
        if view is not None and all(h in view.subjects for h in hashes):
            return {h: view.subjects[h] for h in hashes}
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
