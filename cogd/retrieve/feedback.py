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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from cogd.config import RankConfig
from cogd.retrieve.lexical import Hit
from cogd.usage.outcomes import ACTION_CLASS
from cogd.usage.touches import Touch
from cogd.usage.utility import UtilityModel

RECENCY_HALF_POSITION = 5  # the recency bonus halves at this position in the list


@dataclass
class Feedback:
    """What the ledger knows that ranking should use, for one request."""

    config: RankConfig
    utility: UtilityModel | None = None
    touches: list[Touch] = field(default_factory=list)  # this session's, any order
    recent_paths: list[str] = field(default_factory=list)  # newest first
    # text → [(entity_id, score)]: code earlier sessions edited after prompts like this one
    associations: Callable[[str], list[tuple[str, float]]] | None = None

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

    @property
    def learns_associations(self) -> bool:
        return self.associations is not None and self.config.association_weight > 0

    @property
    def enabled(self) -> bool:
        c = self.config
        return c.utility_weight > 0 or c.working_set_weight > 0 or c.recency_weight > 0

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

    def apply(self, hits: list[Hit]) -> None:
        """Multiply each hit's score by its feedback factors, in place; record them in ``signals``."""
        if not self.enabled:
            return
        base = self.utility.base_rate() if self.utility is not None else 0.0
        for hit in hits:
            factor = 1.0
            if self.utility is not None and self.config.utility_weight > 0:
                u_factor, value = self.utility.factor(hit.id, hit.path, self.config.utility_weight, base)
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
