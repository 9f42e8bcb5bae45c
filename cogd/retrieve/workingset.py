"""A session's working set: the entities it has been working on, strongest evidence first.

Used for the ``compact`` session-start pack and the PreCompact snapshot. The
order is: entities whose lines the session edited, then delivered items it hit
(by hit weight), then entities whose lines it read. A rangeless edit or read
(a whole file) counts for the file's entity.
"""

from __future__ import annotations

import sqlite3

from cogd.index import store
from cogd.usage.outcomes import ACTION_CLASS
from cogd.usage.touches import Touch

MAX_ENTITIES = 16
_DEFINITIONS = ("class", "function", "method", "constant")


def entities_at(conn: sqlite3.Connection, touch: Touch) -> list[str]:
    """The innermost definitions overlapping a ranged touch, or the file for a rangeless one."""
    if touch.start_line is None or touch.end_line is None:
        return [touch.path] if touch.path in store.file_summaries(conn, [touch.path]) else []
    rows = store.definitions_at(conn, touch.path, touch.start_line, touch.end_line, _DEFINITIONS)
    # Keep the innermost: drop a class when one of its methods is already in.
    chosen: list[tuple[str, int, int]] = []
    for entity_id, start, end in rows:
        if any(start <= s and e <= end for _, s, e in chosen):
            continue
        chosen.append((entity_id, start, end))
    return [c[0] for c in chosen]


def working_set(
    conn: sqlite3.Connection, hits: list[tuple[str, float]], touches: list[Touch], limit: int = MAX_ENTITIES,
) -> list[str]:
    """Entity ids, at most ``limit``: edited lines, then ``hits`` ((id, weight), strongest first), then read lines.

    ``touches`` come newest first (as the ledger returns them). Ids no longer
    in the index are dropped. Raises sqlite3.Error on a broken index.
    """
    found: dict[str, None] = {}
    edits = [t for t in touches if ACTION_CLASS.get(t.action) == "edit"]
    reads = [t for t in touches if ACTION_CLASS.get(t.action) == "read"]
    for touch in edits:
        for entity_id in entities_at(conn, touch):
            found.setdefault(entity_id, None)
    for entity_id, _weight in hits:
        found.setdefault(entity_id, None)
    for touch in reads:
        for entity_id in entities_at(conn, touch):
            found.setdefault(entity_id, None)
    present = store.existing_ids(conn, found)
    return [i for i in found if i in present][:limit]
