"""Utility: how often delivering an entity paid off, as a Beta posterior, and its ranking factor.

Every resolved delivery item is a Bernoulli trial with fractional evidence: a
hit of weight ``w`` adds ``w`` to the successes and ``1 − w`` to the failures
(a read-only hit is half a success), a miss adds one failure. With a
Beta(α, β) prior the posterior mean is

    utility = (α + successes) / (α + β + successes + failures)

(the conjugate Beta–Bernoulli update; e.g. Gelman et al., *Bayesian Data
Analysis*, 3rd ed., §2.4). An entity with little evidence of its own borrows
its file's: its prior mean is the file's posterior mean rather than α/(α+β),
with the same prior strength α+β (empirical-Bayes shrinkage towards the
group), so a new function in a file the agent keeps using starts ahead of one
in a file it keeps ignoring.

Ranking multiplies a candidate's score by ``exp(w · (utility − α/(α+β)))``:
exactly 1 for never-delivered entities (they are not starved), above 1 for
entities that were used, below 1 for ones delivered and ignored.
"""

from __future__ import annotations

import math
import threading
from typing import Iterable


class UtilityModel:
    """In-memory success/failure sums per entity and per file, kept in step with the ledger.

    Thread-safe. ``alpha``/``beta`` are the Beta prior's pseudo-counts (> 0).
    """

    def __init__(self, alpha: float = 1.0, beta: float = 3.0):
        if alpha <= 0 or beta <= 0:
            raise ValueError("a Beta prior needs alpha > 0 and beta > 0")
        self.alpha = alpha
        self.beta = beta
        self._entity: dict[str, list[float]] = {}  # id → [successes, failures]
        self._file: dict[str, list[float]] = {}  # path → [successes, failures]
        self._path: dict[str, str] = {}  # entity id → its file
        self._lock = threading.Lock()

    @property
    def prior_mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)

    def load(self, rows: Iterable[tuple[str, str, float, float]]) -> None:
        """Replace the sums with ``(entity_id, path, successes, failures)`` rows."""
        entity: dict[str, list[float]] = {}
        files: dict[str, list[float]] = {}
        paths: dict[str, str] = {}
        for entity_id, path, successes, failures in rows:
            entity[entity_id] = [successes, failures]
            paths[entity_id] = path
            sums = files.setdefault(path, [0.0, 0.0])
            sums[0] += successes
            sums[1] += failures
        with self._lock:
            self._entity, self._file, self._path = entity, files, paths

    def add(self, entity_id: str, path: str, successes: float, failures: float) -> None:
        """Record evidence for one entity (and its file)."""
        with self._lock:
            self._path[entity_id] = path
            for table, key in ((self._entity, entity_id), (self._file, path)):
                sums = table.setdefault(key, [0.0, 0.0])
                sums[0] += successes
                sums[1] += failures

    def entities(self) -> list[str]:
        """Ids of every entity with evidence."""
        with self._lock:
            return list(self._entity)

    def file_utility(self, path: str) -> float:
        """The file's posterior mean (the prior mean for a file never delivered)."""
        with self._lock:
            s, f = self._file.get(path, (0.0, 0.0))
        return (self.alpha + s) / (self.alpha + self.beta + s + f)

    def utility(self, entity_id: str, path: str | None = None) -> float:
        """The entity's posterior mean in [0, 1], shrunk towards its file's when ``path`` is given."""
        strength = self.alpha + self.beta
        prior = self.file_utility(path) if path is not None else self.prior_mean
        with self._lock:
            s, f = self._entity.get(entity_id, (0.0, 0.0))
        return (strength * prior + s) / (strength + s + f)

    def proven(self, paths: set[str], limit: int = 20) -> list[tuple[str, float]]:
        """Entities in ``paths`` whose own utility is above the prior mean, best first.

        ``(entity_id, utility)`` pairs, at most ``limit``: the ledger's own
        candidate list (code that paid off before, near what the query found).
        """
        strength = self.alpha + self.beta
        prior = self.prior_mean
        with self._lock:
            found = [
                (entity_id, (strength * prior + s) / (strength + s + f))
                for entity_id, (s, f) in self._entity.items()
                if self._path.get(entity_id) in paths and s > prior * (s + f)
            ]
        found.sort(key=lambda pair: (-pair[1], pair[0]))
        return found[:limit]

    def evidence(self, entity_id: str) -> tuple[float, float]:
        """``(successes, failures)`` recorded for the entity."""
        with self._lock:
            s, f = self._entity.get(entity_id, (0.0, 0.0))
        return s, f

    def factor(self, entity_id: str, path: str, weight: float) -> tuple[float, float]:
        """``(multiplier, utility)`` for ranking: ``exp(weight · (utility − prior mean))``."""
        value = self.utility(entity_id, path)
        return math.exp(weight * (value - self.prior_mean)), value


def posterior_mean(successes: float, failures: float, alpha: float, beta: float) -> float:
    """``(α + successes) / (α + β + successes + failures)`` — the Beta posterior mean."""
    return (alpha + successes) / (alpha + beta + successes + failures)
