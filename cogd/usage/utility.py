"""Utility: how often delivering an entity paid off, as a Beta posterior, and its ranking factor.

Every resolved delivery item is evidence: a hit of weight ``w`` adds ``w``
successes (an edit 1; a read or a search 0 by default — the agent looked,
which proves nothing either way), a miss adds one failure weighted by how
likely the item was looked at (:func:`cogd.usage.outcomes.miss_weight`). The
conjugate Beta–Bernoulli update (e.g. Gelman et al., *Bayesian Data
Analysis*, 3rd ed., section 2.4) gives the posterior mean

    utility = (k·m + successes) / (k + successes + failures)

for a Beta prior of mean ``m`` and strength ``k = α + β``. The prior is
hierarchical (empirical Bayes):

* the repository's **base rate** ``b = (α + S) / (α + β + S + F)`` over all
  evidence ``S``, ``F`` — how often a delivered item is used at all here;
* a **file**'s mean shrinks towards ``b``: ``(k·b + s_file) / (k + n_file)``,
  counting the other entities of the file;
* an **entity**'s mean shrinks towards its file's, so a new function in a file
  the agent keeps using starts ahead of one in a file it keeps ignoring.

Ranking multiplies a candidate's score by ``exp(w · (utility − b))``: exactly
1 for an entity never delivered in a file never delivered (new code is not
starved), above 1 for what is used more often than items usually are, below
1 for what is delivered and ignored more than usual. Centring on the base
rate rather than the prior's own mean matters: most delivered items are not
used, so against a fixed 0.25 everything ever delivered — the busiest files
first — would sink below code nobody has seen.
"""

from __future__ import annotations

import math
import threading
from typing import Iterable


class UtilityModel:
    """In-memory success/failure sums per entity, per file and overall, kept in step with the ledger.

    Thread-safe. ``alpha``/``beta`` are the Beta prior's pseudo-counts (> 0):
    they set the base rate before any evidence (α/(α+β)) and every level's
    prior strength (α+β).
    """

    def __init__(self, alpha: float = 1.0, beta: float = 3.0):
        if alpha <= 0 or beta <= 0:
            raise ValueError("a Beta prior needs alpha > 0 and beta > 0")
        self.alpha = alpha
        self.beta = beta
        self._entity: dict[str, list[float]] = {}  # id → [successes, failures]
        self._file: dict[str, list[float]] = {}  # path → [successes, failures]
        self._path: dict[str, str] = {}  # entity id → its file
        self._total = [0.0, 0.0]
        self._lock = threading.Lock()

    @property
    def prior_mean(self) -> float:
        """α/(α+β): the base rate before any evidence."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def strength(self) -> float:
        return self.alpha + self.beta

    def load(self, rows: Iterable[tuple[str, str, float, float]]) -> None:
        """Replace the sums with ``(entity_id, path, successes, failures)`` rows."""
        entity: dict[str, list[float]] = {}
        files: dict[str, list[float]] = {}
        paths: dict[str, str] = {}
        total = [0.0, 0.0]
        for entity_id, path, successes, failures in rows:
            entity[entity_id] = [successes, failures]
            paths[entity_id] = path
            sums = files.setdefault(path, [0.0, 0.0])
            sums[0] += successes
            sums[1] += failures
            total[0] += successes
            total[1] += failures
        with self._lock:
            self._entity, self._file, self._path, self._total = entity, files, paths, total

    def add(self, entity_id: str, path: str, successes: float, failures: float) -> None:
        """Record evidence for one entity (and its file, and the total)."""
        with self._lock:
            self._path[entity_id] = path
            for table, key in ((self._entity, entity_id), (self._file, path)):
                sums = table.setdefault(key, [0.0, 0.0])
                sums[0] += successes
                sums[1] += failures
            self._total[0] += successes
            self._total[1] += failures

    def entities(self) -> list[str]:
        """Ids of every entity with evidence."""
        with self._lock:
            return list(self._entity)

    def base_rate(self) -> float:
        """``(α + S) / (α + β + S + F)`` over all evidence: the centre of the ranking factor."""
        with self._lock:
            s, f = self._total
        return (self.alpha + s) / (self.strength + s + f)

    def _file_mean(self, path: str, entity_id: str | None, base: float) -> float:
        """The file's posterior mean, shrunk towards ``base``, leaving out ``entity_id``'s own evidence."""
        with self._lock:
            s, f = self._file.get(path, (0.0, 0.0))
            if entity_id is not None:
                own = self._entity.get(entity_id)
                if own is not None and self._path.get(entity_id) == path:
                    s, f = s - own[0], f - own[1]
        s, f = max(s, 0.0), max(f, 0.0)
        return (self.strength * base + s) / (self.strength + s + f)

    def file_utility(self, path: str) -> float:
        """The file's posterior mean (the base rate for a file never delivered)."""
        return self._file_mean(path, None, self.base_rate())

    def utility(self, entity_id: str, path: str | None = None, base: float | None = None) -> float:
        """The entity's posterior mean in [0, 1], shrunk towards its file's (``path``) or the base rate."""
        base = self.base_rate() if base is None else base
        prior = self._file_mean(path, entity_id, base) if path is not None else base
        with self._lock:
            s, f = self._entity.get(entity_id, (0.0, 0.0))
        return (self.strength * prior + s) / (self.strength + s + f)

    def evidence(self, entity_id: str) -> tuple[float, float]:
        """``(successes, failures)`` recorded for the entity."""
        with self._lock:
            s, f = self._entity.get(entity_id, (0.0, 0.0))
        return s, f

    def factor(self, entity_id: str, path: str, weight: float, base: float | None = None) -> tuple[float, float]:
        """``(multiplier, utility)`` for ranking: ``exp(weight · (utility − base rate))``."""
        base = self.base_rate() if base is None else base
        value = self.utility(entity_id, path, base)
        return math.exp(weight * (value - base)), value


def posterior_mean(successes: float, failures: float, alpha: float, beta: float) -> float:
    """``(α + successes) / (α + β + successes + failures)`` — the Beta posterior mean."""
    return (alpha + successes) / (alpha + beta + successes + failures)
