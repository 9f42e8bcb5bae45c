"""The order the embedding worker works in: what packs need first, the rest after.

Packs start from files (the file entity is the unit of file recall and of the
repository map) and from the definitions of the files the user works on or the
rest of the tree leans on. So a pass embeds, in this order:

1. every **file entity** (front files first);
2. the **definitions of the front files**: the files changed most recently
   (uncommitted first, then git log order, as the SessionStart pack lists them;
   outside git, or when git names none of the indexed files, the newest stored
   mtimes) and the files most referenced from other files (``calls``,
   ``imports`` and ``inherits`` edges into their entities), interleaved so that
   both kinds of focus arrive early;
3. everything else, in index order.

Tiers 1 and 2 together are the **front**; ``cogd status`` shows its coverage,
so a user can tell when hybrid retrieval is in place where it matters most,
long before the whole tree is embedded. The order only changes *when* a vector
arrives, never *which* vectors exist.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cogd.index import store
from cogd.index.sources import recently_changed_files

# How many files of each kind the front holds besides every file entity. Small on purpose: the
# front is what a pack is most likely to need in the first minutes (the SessionStart pack lists
# about 8 recently changed files and a map of about 8 central ones), not a second index.
FRONT_RECENT_FILES = 20
FRONT_CONNECTED_FILES = 20
FRONT_TTL_S = 30.0  # the front's files are chosen again after this long (git and one edge scan: ~10–300 ms)


@dataclass(frozen=True)
class Front:
    """The front's files: ``paths`` maps each to its rank (0 first); ``recent`` and
    ``connected`` say how many of them each list contributed; ``chosen_at`` is
    ``time.monotonic()`` when they were chosen."""

    paths: dict[str, int] = field(default_factory=dict)
    recent: int = 0
    connected: int = 0
    chosen_at: float = 0.0

    def is_front(self, kind: str, path: str) -> bool:
        """Whether an entity of ``kind`` in ``path`` belongs to the front (every file entity does)."""
        return kind == "file" or path in self.paths


def choose_front(root: Path, conn, indexed: set[str], recent_limit: int | None = None,
                 connected_limit: int | None = None) -> Front:
    """The front's files for the tree at ``root`` whose index ``conn`` holds.

    ``indexed``: the paths that hold entities (git may name deleted or unparsed files; they are
    skipped). Recent files come from git (:func:`cogd.index.sources.recently_changed_files`),
    or from the stored mtimes when git names none of ``indexed``; connected files from
    :func:`cogd.index.store.most_referenced_files`. The two lists are interleaved (recent
    first) without repeats. ``recent_limit`` / ``connected_limit``: how many files of each
    kind (None: FRONT_RECENT_FILES / FRONT_CONNECTED_FILES). Raises sqlite3.Error on a
    broken index.
    """
    recent_limit = FRONT_RECENT_FILES if recent_limit is None else recent_limit
    connected_limit = FRONT_CONNECTED_FILES if connected_limit is None else connected_limit
    recent = [p for p in recently_changed_files(root, limit=recent_limit * 4) if p in indexed]
    if not recent:
        recent = [p for p in store.newest_files(conn, recent_limit) if p in indexed]
    recent = recent[:recent_limit]
    connected = [p for p, _n in store.most_referenced_files(conn, connected_limit) if p in indexed]
    paths = {path: rank for rank, path in enumerate(interleave(recent, connected))}
    return Front(paths, len(recent), len(connected), time.monotonic())


def interleave(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """``first[0], second[0], first[1], second[1], …`` without repeats (the longer list's tail at the end)."""
    out: dict[str, None] = {}
    for n in range(max(len(first), len(second))):
        for items in (first, second):
            if n < len(items):
                out.setdefault(items[n], None)
    return list(out)


def order(pending: Sequence[str], entities: Mapping[str, tuple[str, str, str]], front: Front) -> list[str]:
    """``pending`` (entity ids) in the order to embed them (module doc): file entities, then
    the front files' definitions, then the rest; within a tier by the file's front rank, ties
    in the given order. ``entities``: ``{id: (hash, kind, path)}`` as
    :func:`cogd.index.store.entity_states` gives it."""
    last = len(front.paths)

    def key(entity_id: str) -> tuple[int, int]:
        _hash, kind, path = entities[entity_id]
        rank = front.paths.get(path, last)
        if kind == "file":
            return 0, rank
        return (1, rank) if rank < last else (2, 0)

    return sorted(pending, key=key)  # stable: index order within a key


def front_ids(entities: Mapping[str, tuple[str, str, str]], front: Front) -> set[str]:
    """The ids of the front's entities among ``entities`` (``{id: (hash, kind, path)}``)."""
    return {i for i, (_h, kind, path) in entities.items() if front.is_front(kind, path)}
