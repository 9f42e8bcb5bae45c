"""The status lattice of a memory, and the one function that decides every status change.

```
candidate → active | rejected
active    → stale | rejected | superseded
stale     → active | rejected
rejected  → pruned
superseded → pruned
pruned    (terminal)
```

:func:`transition` is the only place that says yes or no. Every write path —
``MemoryStore`` operations from the CLI and the daemon, hand edits found by
the sync, the anchor check, consolidation, imports — calls it before anything
is written. Staying in the same status is an *edit*: allowed for every status
but ``pruned`` (a pruned record keeps its tombstone and nothing else).

One move exists only as a **merge** (``merge=True``): ``candidate → superseded``,
when consolidation finds that a candidate states the same claim as another
memory and folds it into that survivor (``superseded_by`` names it). It is not
in the table, so a hand edit or ``memory.transition`` cannot make it: a
supersession without its successor would mean nothing.
"""

from __future__ import annotations

from cogd.memory.errors import MemoryRefused

STATUSES = ("candidate", "active", "stale", "rejected", "superseded", "pruned")

TRANSITIONS: dict[str, frozenset[str]] = {
    "candidate": frozenset({"active", "rejected"}),
    "active": frozenset({"stale", "rejected", "superseded"}),
    "stale": frozenset({"active", "rejected"}),
    "rejected": frozenset({"pruned"}),
    "superseded": frozenset({"pruned"}),
    "pruned": frozenset(),
}

# What a record may be created as. Through the API: candidate or active. A file that
# arrives on its own (a git pull, a rebuilt projection) carries whatever history it had
# elsewhere, so any status is a legal first sight of it.
CREATE_STATUSES = frozenset({"candidate", "active"})

LIVE = frozenset({"candidate", "active", "stale"})  # statuses whose body is a claim still in play

# Moves legal only as a merge of duplicates by consolidation (see the module docstring).
MERGE_TRANSITIONS: frozenset[tuple[str, str]] = frozenset({("candidate", "superseded")})


def allowed(old: str | None, new: str, *, arrival: bool = False, merge: bool = False) -> bool:
    """Whether ``old → new`` is legal. ``old`` None is a creation (``arrival``: a file seen first);
    ``merge``: consolidation folding a duplicate into its survivor (adds :data:`MERGE_TRANSITIONS`)."""
    if new not in TRANSITIONS:
        return False
    if merge and (old, new) in MERGE_TRANSITIONS:
        return True
    if old is None:
        return arrival or new in CREATE_STATUSES
    if old == new:
        return old != "pruned"
    return new in TRANSITIONS.get(old, frozenset())


def transition(old: str | None, new: str, *, entity_id: str = "", arrival: bool = False, merge: bool = False) -> str:
    """Decide one status change; returns its name for the event log.

    Names: ``create``, ``edit`` (same status), ``activate``, ``stale``,
    ``reject``, ``supersede``, ``prune``, ``reactivate`` (stale → active).
    ``merge``: see :func:`allowed`.
    Raises :class:`MemoryRefused` ``illegal_transition`` (data: ``id``,
    ``from``, ``to``, ``allowed`` — the legal targets) when the table forbids it.
    """
    if not allowed(old, new, arrival=arrival, merge=merge):
        targets = sorted(CREATE_STATUSES) if old is None else sorted(TRANSITIONS.get(old, ()))
        if old is None:
            message = f"a memory cannot be created as {new!r} (only {' or '.join(targets)})"
        elif old == new:
            message = f"{entity_id or 'this memory'} is {old}: a pruned memory cannot change"
        else:
            reach = ", ".join(targets) if targets else "nothing (terminal)"
            message = f"{entity_id or 'this memory'} cannot go from {old} to {new}; from {old} it can go to {reach}"
        raise MemoryRefused("illegal_transition", message, id=entity_id, **{"from": old, "to": new, "allowed": targets})
    if old is None:
        return "create"
    if old == new:
        return "edit"
    if old == "stale" and new == "active":
        return "reactivate"
    return {"active": "activate", "stale": "stale", "rejected": "reject", "superseded": "supersede",
            "pruned": "prune"}[new]
