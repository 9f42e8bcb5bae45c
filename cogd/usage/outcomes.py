"""Hit matching: which pending delivery items a tool use's touches prove were used.

The rule (README "Learning from use"):

* a touch **with a line range** (a partial Read, an Edit hunk, a Grep line)
  hits every pending item of that file whose span overlaps the range, and the
  file item itself;
* a touch **without a range** by an edit, write or read is a file-level hit:
  the agent changed or saw the whole file, so every pending item of the file
  is hit (the fallback when no line range is known);
* a rangeless search or mention (a Grep file listing, a path in a Bash
  command) hits only the file item: a listing of forty files says nothing
  about the functions inside them.

Each hit carries an evidence weight from its action — an edit proves use, a
read is half-way, a search line is weak — so a distractor the agent reads once
and never edits earns less than an edit. When several touches hit one item,
the strongest counts.

A miss is weaker evidence the lower the item sat: an agent reads a pack from
the top, and an item it never looked at says nothing about its worth. The
failure a miss records is the item's examination probability under the
position-bias model of click models (Craswell et al., "An experimental
comparison of click position-bias models", WSDM 2008): ``1 / (1 + (rank − 1)
/ h)`` for a half-life of ``h`` ranks, halved again for a one-line pointer.

Pure functions over plain tuples: no database, no daemon.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from cogd.usage.touches import Touch

_STRENGTH = {"edit": 3, "read": 2, "search": 1}
ACTION_CLASS = {"edit": "edit", "write": "edit", "read": "read", "search": "search", "mention": "search"}


class PendingItem(NamedTuple):
    """A delivery item still waiting for its outcome (``key`` = (delivery_id, rank))."""

    key: tuple[int, int]
    entity_id: str
    kind: str
    path: str
    start_line: int
    end_line: int


class Hit(NamedTuple):
    """One item proven used: evidence ``weight`` in (0, 1], the ``action`` and the ``level`` (entity | file)."""

    key: tuple[int, int]
    entity_id: str
    weight: float
    action: str
    level: str


def strength(action: str, weight: float) -> tuple[float, int]:
    """How strong a touch is as evidence of use: its weight, then edit > read > search."""
    return (weight, _STRENGTH.get(ACTION_CLASS.get(action, "search"), 0))


def action_weight(action: str, weights: dict[str, float]) -> float:
    """The evidence weight of a touch action (``edit``/``write`` → weights['edit'], ``read``, else 'search')."""
    return weights.get(ACTION_CLASS.get(action, "search"), 0.0)


def miss_weight(rank: int, pointer: bool, halflife: float, pointer_weight: float = 0.5) -> float:
    """The failure a miss at ``rank`` (1-based) records, in (0, 1]; ``halflife`` 0 = always 1.

    ``1 / (1 + (rank − 1) / halflife)``, times ``pointer_weight`` for a
    one-line pointer.
    """
    weight = 1.0 if halflife <= 0 else 1.0 / (1.0 + max(rank - 1, 0) / halflife)
    return weight * (pointer_weight if pointer else 1.0)


def match_hits(pending: Iterable[PendingItem], touches: Iterable[Touch], weights: dict[str, float]) -> list[Hit]:
    """The hits ``touches`` make among ``pending`` items, strongest evidence per item.

    ``weights``: ``{"edit": w, "read": w, "search": w}`` in [0, 1] (from
    ``[usage]``). Items with zero weight are not hits. Returns hits in the
    order of ``pending``.
    """
    by_path: dict[str, list[Touch]] = {}
    for touch in touches:
        by_path.setdefault(touch.path, []).append(touch)
    found: list[Hit] = []
    for item in pending:
        best: Hit | None = None
        for touch in by_path.get(item.path, ()):
            weight = action_weight(touch.action, weights)
            ranged = touch.start_line is not None and touch.end_line is not None
            if item.kind == "file":
                level = "file"
            elif ranged:
                if touch.end_line < item.start_line or touch.start_line > item.end_line:
                    continue
                level = "entity"
            elif ACTION_CLASS.get(touch.action) in ("edit", "read"):
                level = "file"
            else:
                continue
            if best is None or strength(touch.action, weight) > strength(best.action, best.weight):
                best = Hit(item.key, item.entity_id, weight, touch.action, level)
        if best is not None:
            found.append(best)
    return found
