"""IN-lists for SQLite: the placeholders and the one place a long list is cut into statements.

Standard library only and at the bottom of the import graph, because every owner of a
database (the index's :mod:`cogd.index.store`, the ledger's :mod:`cogd.usage.ledger`, the
embedding cache, the memory projection) binds lists of ids or paths, and none of them should
have to import another owner to do it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

#: Host parameters per statement: well under SQLite's compile-time limit
#: (SQLITE_MAX_VARIABLE_NUMBER, 999 before 3.32.0 and 32766 since, https://www.sqlite.org/limits.html#max_variable_number),
#: and small enough that LanceDB's filter strings, which grow with the list, stay short.
MAX_PARAMS = 500

_T = TypeVar("_T")


def chunked(items: Iterable[_T], size: int = MAX_PARAMS) -> Iterator[list[_T]]:
    """``items`` in consecutive lists of at most ``size`` (the last may be shorter; none when empty).

    Args:
        items: any iterable (ids, paths); consumed once, order kept, duplicates kept.
        size: the longest list yielded, >= 1.

    Raises:
        ValueError: ``size`` < 1.
    """
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    batch: list[_T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def marks(n: int) -> str:
    """``n`` comma-separated ``?`` placeholders for an ``IN (…)`` list (``n`` >= 1; '' for 0)."""
    return ",".join("?" * n)
