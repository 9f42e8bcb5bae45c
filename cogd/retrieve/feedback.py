"""The usage loop's feed into ranking: utility, the session's working set, recency of edits.

Applied to the candidates after the kind/test priors and before MMR
(docs/architecture.md, "Retrieval, in order", step 5). Each signal multiplies a candidate's score and is
recorded in its ``signals`` for ``--explain``:

* ``utility`` — ``exp(rank.utility_weight · (u − b))`` where ``u`` is the
  entity's Beta posterior mean of use and ``b`` the repository's base rate
  (:mod:`cogd.usage.utility`); 1 for code never delivered, so it is not starved;
* ``working_set`` — ``1 + rank.working_set_weight`` when the session already
  touched the entity's lines (read or edit), half that bonus when it touched
  only its file;
* ``recency`` — ``1 + rank.recency_weight / (1 + position / 5)`` for files in
  the recently-changed list (uncommitted first, then git log order).

All weights 0 turns feedback off (the replay's control arm).

The learned association list (fused in retrieval, step 2) has two sources, one mechanism
(:meth:`Feedback.association_lists`): ``session`` (the ledger: code edited after similar
prompts) and ``history`` (:mod:`cogd.history`: code changed by commits with similar
messages, each item carrying the number of independent commits behind it). Each source's
weight comes from one place, :meth:`Feedback.source_weight`; how an entity's two terms combine
(``rank.association_combine``, default ``pooled``: one list, what both sources hold counted
once) from another, :meth:`Feedback.association_terms`.

Every learned source goes through one shrinkage towards no effect (:mod:`cogd.evidence`,
:data:`LEARNED_SOURCES`): the weight applied is ``w · n / (n + k)``, ``n`` the independent
units of evidence behind the source (``evidence``), ``k`` the prior strength in those units.

* ``utility`` and ``association`` (what earlier sessions taught): ``n`` = earlier sessions
  that gave the source evidence (the ledger's ``evidence_sessions``), ``k`` = ``rank.evidence_k``;
* ``history_association`` (commit messages → the definitions they changed): ``n`` = the
  independent change requests mined and reachable from HEAD (a merged pull request's commits
  count once), ``k`` = ``rank.history_evidence_k``;
* ``co_change``: ``n`` = the reachable mined commits co-change pairs are counted over,
  ``k`` = ``rank.history_evidence_k`` (both from :meth:`cogd.history.query.HistoryQueries.evidence`).

A repository with no past (no sessions, no commits) ranks as with feedback off.
:meth:`Feedback.weight` is the one place a source's weight is read, shrunk or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from cogd.config import RankConfig
from cogd.evidence import shrunk_weight, uncovered_share
from cogd.retrieve.lexical import Hit
from cogd.usage.outcomes import ACTION_CLASS
from cogd.usage.touches import Touch
from cogd.usage.utility import UtilityModel

RECENCY_HALF_POSITION = 5  # the recency bonus halves at this position in the list
# Learned sources → the [rank] key holding their prior strength k (in sessions for the ledger's
# sources, in commits for history's). Recency (git's order) and the working set (this session's
# own touches) are not learned from the past and keep their weight as configured.
LEARNED_SOURCES = {"utility": "evidence_k", "association": "evidence_k",
                   "history_association": "history_evidence_k", "co_change": "history_evidence_k"}
# Session sources → the [rank] key of their discount by history's evidence (uncovered_share): a
# committed session's edits are also history's, so the ledger's reading of them counts again.
HISTORY_COVERED = {"utility": "utility_history_k", "association": "association_history_k"}


@dataclass
class Feedback:
    """What the ledger knows that ranking should use, for one request."""

    config: RankConfig
    utility: UtilityModel | None = None
    touches: list[Touch] = field(default_factory=list)  # this session's, any order
    recent_paths: list[str] = field(default_factory=list)  # newest first
    # text → [(entity_id, score)]: code earlier sessions edited after prompts like this one
    associations: Callable[[str], list[tuple[str, float]]] | None = None
    # (text, tests_unwanted) → [Association] (cogd.history.store): code commits with messages like
    # this one changed; tests_unwanted a test-path predicate when the request does not ask for
    # tests, else None (cogd.history.query.HistoryQueries.associations)
    history: Callable[..., list] | None = None
    # current seed ids → [(seed, partner, confidence, support)]: definitions changed with them
    co_changed: Callable[[list[str]], list[tuple[str, str, float, int]]] | None = None
    # entity ids → {entity_id: [unix seconds]}: when sessions' edits associated them with a prompt
    # (cogd.usage.ledger.Ledger.association_times), for rank.same_change_days
    session_times: Callable[[list[str]], dict[str, list[float]]] | None = None
    # learned source → independent units of evidence behind it: earlier sessions for utility and
    # association (cogd.usage.ledger.Ledger.evidence_sessions), reachable change requests / pair
    # commits for history_association / co_change (cogd.history.query.HistoryQueries.evidence)
    evidence: dict[str, float] = field(default_factory=dict)
    # → {path: live change requests that changed it} (cogd.history.query.HistoryQueries.file_changes)
    file_changes: Callable[[], dict[str, int]] | None = None

    def __post_init__(self) -> None:
        self._ranges: dict[str, list[tuple[int, int]]] = {}
        self._files: set[str] = set()
        for touch in self.touches:
            if ACTION_CLASS.get(touch.action) not in ("edit", "read"):
                continue
            self._files.add(touch.path)
            if touch.start_line is not None and touch.end_line is not None:
                self._ranges.setdefault(touch.path, []).append((touch.start_line, touch.end_line))
            else:
                self._ranges.setdefault(touch.path, []).append((1, 1 << 30))
        self._recent = {path: i for i, path in enumerate(self.recent_paths)}
        self._history_files: dict[str, float] = {}  # set by association_lists: path → history evidence
        self._history_named: set[str] = set()  # set by association_lists: the ids history's list names
        self._history_times: dict[str, list[int]] = {}  # set by association_lists: id → its requests' times
        self.counted_once: set[str] = set()  # set by association_terms: the ids of same_change

    def weight(self, source: str) -> float:
        """``rank.<source>_weight``, shrunk by its evidence when ``source`` is learned (:data:`LEARNED_SOURCES`).

        ``w · n / (n + k)`` (:func:`cogd.evidence.shrunk_weight`) with ``n`` =
        ``evidence[source]`` (0 when unknown) and ``k`` the source's prior-strength key;
        0 for a repository with no evidence yet (unless ``k`` = 0: shrinkage off). A session
        source (:data:`HISTORY_COVERED`) is further multiplied by :meth:`history_uncovered`.
        """
        base = getattr(self.config, f"{source}_weight")
        prior_key = LEARNED_SOURCES.get(source)
        if prior_key is None:
            return base
        weight = shrunk_weight(base, self.evidence.get(source, 0.0), getattr(self.config, prior_key))
        return weight * self.history_uncovered(source) if source in HISTORY_COVERED else weight

    def history_uncovered(self, source: str) -> float:
        """``k_c / (k_c + n_h)`` (:func:`cogd.evidence.uncovered_share`): the share of a session
        source's evidence that history does not already hold.

        ``source``: ``utility`` or ``association`` (a key of :data:`HISTORY_COVERED`, else
        KeyError); ``k_c`` its ``rank.<source>_history_k`` (0: 1, no discount); ``n_h`` =
        ``evidence["history_association"]`` (history's reachable change requests) while history
        association is on (its configured weight > 0), else 0 — history that ranks nothing
        covers nothing, so with history off or unmined the session source is unchanged.
        """
        prior = getattr(self.config, HISTORY_COVERED[source])
        covered = self.evidence.get("history_association", 0.0) if self.config.history_association_weight > 0 else 0.0
        return uncovered_share(covered, prior)

    @property
    def learns_associations(self) -> bool:
        return self.associations is not None and self.weight("association") > 0

    def source_weight(self, source: str, evidence: int | None = None) -> float:
        """The fusion weight of one item of a learned association source: :meth:`weight` of
        ``association`` for ``session``, of ``history_association`` for ``history`` — each shrunk
        by the evidence behind the whole source (sessions, change requests). ``evidence``: the
        independent sessions or commits behind the item (None when the source does not count
        them); unused: an item's own count already sets its score (a sum over its commits), and
        shrinking it again would count the same evidence twice."""
        return self.weight("history_association" if source == "history" else "association")

    def association_lists(self, text: str, limit: int, tests_unwanted: Callable[[str], bool] | None = None
                          ) -> list[tuple[str, list[tuple[str, int | None, list[str]]]]]:
        """``[(source, [(entity_id, evidence, commits)] best first)]`` for the sources that are on,
        each at most ``limit`` long (``evidence`` None and ``commits`` [] for ``session``).
        ``tests_unwanted``: passed to :attr:`history` (a test-path predicate when the request does
        not ask for tests)."""
        out: list[tuple[str, list[tuple[str, int | None, list[str]]]]] = []
        if self.learns_associations:
            out.append(("session", [(entity_id, None, []) for entity_id, _ in self.associations(text)[:limit]]))
        self._history_files = {}
        self._history_named = set()
        self._history_times = {}
        if self.history is not None and self.weight("history_association") > 0:
            found = self.history(text, tests_unwanted)[:limit]
            out.append(("history", [(a.entity_id, a.evidence, a.commits) for a in found]))
            self._history_named = {a.entity_id for a in found}
            self._history_times = {a.entity_id: list(a.times) for a in found}
            for a in found:  # the request's history evidence per file, for the file-level ranking
                path = a.entity_id.split("::", 1)[0]
                self._history_files[path] = self._history_files.get(path, 0.0) + a.score
        return out

    def same_change(self, lists: list) -> set[str]:
        """The entities both association sources name for one change read twice
        (``rank.same_change_days``): ids in the ``session`` and the ``history`` list of ``lists``
        (the last :meth:`association_lists` of this object, which also keeps history's times) with a session association time ``s``
        (:attr:`session_times`) and a matching request's commit time ``c`` (``Association.times``)
        such that ``|c − s| ≤ days × 86,400``. A committed session's edits are a commit history
        mines, and its prompt and that commit's message are two wordings of one request; either
        side of the session, since a commit's recorded time may be its committer's (a rebase, a
        merge later) or precede the edit's record (a clock, an amend). Empty when the window is
        0, a source is off, or the times are unknown."""
        window = self.config.same_change_days * 86400.0
        by_source = dict((source, items) for source, items in lists)
        if window <= 0 or self.session_times is None or "session" not in by_source or "history" not in by_source:
            return set()
        history_times = {entity_id: times for entity_id, times in
                         ((a, self._history_times.get(a, [])) for a, _e, _c in by_source["history"]) if times}
        both = [entity_id for entity_id, _e, _c in by_source["session"] if entity_id in history_times]
        if not both:
            return set()
        session_times = self.session_times(both)
        return {entity_id for entity_id in both
                if any(abs(c - s) <= window for s in session_times.get(entity_id, ()) for c in history_times[entity_id])}

    def association_terms(self, text: str, limit: int, rrf_k: int,
                          tests_unwanted: Callable[[str], bool] | None = None) -> tuple[dict[str, float], list]:
        """The learned association lists as fusion terms: ``({entity_id: term}, lists)``.

        ``lists`` is :meth:`association_lists` (for the signals); ``term`` is what an entity adds
        to its fused score, by ``rank.association_combine``. With ``s`` a source, ``r_s(e)`` the
        entity's rank in it (from 1), ``W_s`` its shrunk weight (:meth:`source_weight`) and ``k``
        = ``rrf_k``, its RRF term is ``t_s(e) = W_s / (k + r_s(e))`` (Cormack et al., SIGIR 2009):

        * ``sum`` — ``Σ_s t_s(e)``: each source a list of its own in the fusion;
        * ``max`` — ``max_s t_s(e)``: the stronger source's term alone;
        * ``pooled`` — one list: the union ordered by ``Σ_s t_s(e)`` (ties by id), fused once
          at the larger weight, ``max_s W_s / (k + rank)``;
        * ``single`` — ``pooled`` cut to ``limit`` entries: one list as long as one source's.

        The two sources are not independent evidence: a session whose work was committed is
        also a commit, its prompt and its commit message two wordings of one request, so
        history and the ledger hold the same (request, change) pair. ``sum`` counts it twice
        and spreads twice the learned weight over the union of two lists; ``max`` counts an
        entity's strongest source once; ``pooled`` keeps agreement as the order (an entity
        both sources name comes first) while the learned list weighs what one source weighs.
        An entity both sources name for one change read twice (:meth:`same_change`, with
        ``rank.same_change_days`` > 0) takes ``max_s t_s(e)`` under every mode: the agreement is
        one request counted by both, not two.
        ``limit``: each source's length; ``rrf_k`` > 0; ``tests_unwanted``: as
        :meth:`association_lists`.
        """
        lists = self.association_lists(text, limit, tests_unwanted)
        mode = self.config.association_combine
        once = self.counted_once = self.same_change(lists)
        per_source = []
        for source, items in lists:
            weight = self.source_weight(source)
            per_source.append((weight, {entity_id: weight / (rrf_k + rank)
                                        for rank, (entity_id, _e, _c) in enumerate(items, 1)}))
        terms: dict[str, float] = {}
        for _weight, source_terms in per_source:
            for entity_id, term in source_terms.items():
                if mode == "max" or entity_id in once:
                    terms[entity_id] = max(terms.get(entity_id, 0.0), term)
                else:
                    terms[entity_id] = terms.get(entity_id, 0.0) + term
        if mode in ("pooled", "single") and terms:
            top = max(weight for weight, _ in per_source)
            order = sorted(terms, key=lambda e: (-terms[e], e))
            if mode == "single":
                order = order[:limit]
            terms = {entity_id: top / (rrf_k + rank) for rank, entity_id in enumerate(order, 1)}
        return terms, lists

    def history_file_shares(self) -> dict[str, float]:
        """``{path: share}`` for the file-level ranking (:func:`cogd.retrieve.hybrid.file_ranking`'s
        ``named_files``): the files the commits matching this request changed, each with
        ``rank.history_file_weight × Z × s / s_max`` — ``s`` the sum of its entities' history
        association scores, ``Z`` history's credibility (:meth:`weight` of ``history_association``
        over its configured weight: the same shrinkage by reachable change requests). Empty before
        :meth:`association_lists` ran for the request, or when history or the weight is off."""
        base = self.config.history_association_weight
        top = max(self._history_files.values(), default=0.0)
        if not self._history_files or base <= 0 or top <= 0 or self.config.history_file_weight <= 0:
            return {}
        share = self.config.history_file_weight * self.weight("history_association") / base
        return {path: share * value / top for path, value in self._history_files.items()}

    def file_prior_shares(self) -> dict[str, float]:
        """``{path: share}`` for the file-level ranking's ``named_files``: the prior that a request's
        change goes to a file, from how many of history's change requests changed it (``n_f``,
        :attr:`file_changes`) — ``rank.history_file_prior × Z × n_f / max n``, ``Z`` history's
        credibility as in :meth:`history_file_shares` (the shrinkage by reachable change
        requests, so a young history moves nothing). Whatever the prompt says: P(f | q) ∝
        P(q | f) · P(f), and the retrieval lists estimate only the first factor. Empty when the
        weight, history or its association source is off."""
        base = self.config.history_association_weight
        if self.file_changes is None or self.config.history_file_prior <= 0 or base <= 0:
            return {}
        counts = self.file_changes()
        top = max(counts.values(), default=0)
        if top <= 0:
            return {}
        share = self.config.history_file_prior * self.weight("history_association") / base
        return {path: share * n / top for path, n in counts.items()}

    def co_change_edges(self, seeds: list[str]) -> list[tuple[str, str, float, int]]:
        """The co-change partners of ``seeds`` (``[]`` when the source or its weight is off)."""
        if self.co_changed is None or self.weight("co_change") <= 0:
            return []
        return self.co_changed(seeds)

    @property
    def enabled(self) -> bool:
        return self.weight("utility") > 0 or self.config.working_set_weight > 0 or self.config.recency_weight > 0

    def working_set_factor(self, hit: Hit) -> float:
        """``1 + w`` for touched lines, ``1 + w/2`` for a touched file, else 1."""
        weight = self.config.working_set_weight
        if weight <= 0 or hit.path not in self._files:
            return 1.0
        for start, end in self._ranges.get(hit.path, ()):
            if start <= hit.end_line and end >= hit.start_line:
                return 1.0 + weight
        return 1.0 + weight / 2

    def recency_factor(self, path: str) -> float:
        """``1 + w / (1 + position / 5)`` for a recently changed file, else 1."""
        position = self._recent.get(path)
        if position is None or self.config.recency_weight <= 0:
            return 1.0
        return 1.0 + self.config.recency_weight / (1 + position / RECENCY_HALF_POSITION)

    def utility_counted_by_history(self, entity_id: str, u_factor: float) -> bool:
        """Whether utility's factor ``u_factor`` for ``entity_id`` is left out because history already
        counts its evidence (``rank.utility_with_history = "once"``): a boost (> 1) comes from the
        entity's earlier edits, and once those are committed history's list for this request holds
        them; a penalty (< 1: deliveries left unused) is evidence history cannot hold and stays.
        False under ``"both"`` or before :meth:`association_lists` named the entity."""
        return (self.config.utility_with_history == "once" and u_factor > 1.0
                and entity_id in self._history_named)

    def apply(self, hits: list[Hit]) -> None:
        """Multiply each hit's score by its feedback factors, in place; record them in ``signals``."""
        if not self.enabled:
            return
        base = self.utility.base_rate() if self.utility is not None else 0.0
        utility_weight = self.weight("utility")
        for hit in hits:
            factor = 1.0
            if self.utility is not None and utility_weight > 0:
                u_factor, value = self.utility.factor(hit.id, hit.path, utility_weight, base)
                if self.utility_counted_by_history(hit.id, u_factor):
                    hit.signals["utility_in_history"] = round(u_factor, 3)
                    u_factor = 1.0
                if abs(u_factor - 1.0) > 1e-9:
                    hit.signals["utility"] = round(value, 4)
                    hit.signals["utility_x"] = round(u_factor, 3)
                factor *= u_factor
            ws = self.working_set_factor(hit)
            if ws != 1.0:
                hit.signals["working_set_x"] = round(ws, 3)
                factor *= ws
            recency = self.recency_factor(hit.path)
            if recency != 1.0:
                hit.signals["recency_x"] = round(recency, 3)
                factor *= recency
            if not math.isfinite(factor) or factor <= 0:
                factor = 1.0
            hit.score *= factor
