"""Incremental re-parsing of recently saved files.

A save usually changes a few bytes of a file. tree-sitter can re-parse such a
file from its previous tree: the old tree is told which byte range changed
(``Tree.edit``) and ``Parser.parse(new, old_tree)`` reuses every subtree
outside it. The result is the tree a fresh parse gives (tree-sitter's
incremental parsing contract), at a fraction of the cost; what the indexer
extracts from it is therefore the same, row for row
(``tests/test_index_trees.py`` compares a chain of edited saves with fresh
parses).

:class:`TreeCache` keeps the last tree of a few recently parsed files, with
the bytes it was parsed from. The edit is the span between the longest common
prefix and the longest common suffix of the old and new bytes: one range,
which covers any change (several edits in one save make one wider range and
re-use less, never a wrong tree). One thread uses a cache (tree-sitter parsers
and trees are not shared between threads): an indexer without a parse pool
keeps one in its own thread; the daemon keeps one in its parse pool's save
lane, the one process every save goes to (:mod:`cogd.index.parsepool`,
:func:`cogd.index.indexer.save_rows_job`), while the pool's other workers,
which take a whole tree's files in turn, keep none.
"""

from __future__ import annotations

from collections import OrderedDict

import tree_sitter

TREE_CACHE_FILES = 8  # trees kept: a few files being edited in turn; each costs a few MB at most


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search on slice equality:
    about log2(n) comparisons done by memcmp, rather than a Python loop over bytes)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common suffix of ``a`` and ``b``, at most ``limit`` bytes."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def point_at(data: bytes, offset: int) -> tuple[int, int]:
    """tree-sitter's (row, column) of byte ``offset`` in ``data``: 0-based line, byte column."""
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)


class TreeCache:
    """The last parse tree of up to ``capacity`` files, for :meth:`parse` to re-parse incrementally.

    Keyed by repo-relative path; least recently parsed files are dropped
    first. A tree is reused only with the parser it came from (a language
    whose grammar or queries changed gets a new parser, so a fresh parse).
    """

    def __init__(self, capacity: int = TREE_CACHE_FILES):
        self.capacity = capacity
        self._trees: OrderedDict[str, tuple[tree_sitter.Parser, bytes, tree_sitter.Tree]] = OrderedDict()

    def parse(self, path: str, parser: tree_sitter.Parser, source: bytes) -> tree_sitter.Tree:
        """The tree of ``source`` (the bytes of ``path`` as the parser gets them), parsed with
        ``parser`` from the previous tree of ``path`` when there is one; remembers the new tree.

        The previous tree is edited in place and not kept: it belongs to the old bytes.
        """
        previous = self._trees.pop(path, None)
        tree = None
        if previous is not None and previous[0] is parser:
            _parser, old, old_tree = previous
            if old == source:
                tree = old_tree
            else:
                start = common_prefix(old, source)
                tail = common_suffix(old, source, min(len(old), len(source)) - start)
                old_end, new_end = len(old) - tail, len(source) - tail
                old_tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end,
                              start_point=point_at(old, start), old_end_point=point_at(old, old_end),
                              new_end_point=point_at(source, new_end))
                tree = parser.parse(source, old_tree=old_tree)
        if tree is None:
            tree = parser.parse(source)
        self._trees[path] = (parser, source, tree)
        while len(self._trees) > self.capacity:
            self._trees.popitem(last=False)
        return tree

    def __contains__(self, path: str) -> bool:
        """Whether the tree (and bytes) of ``path`` are kept."""
        return path in self._trees

    def forget(self, path: str) -> None:
        """Drop the tree of ``path`` (a file removed, or indexed without a parse)."""
        self._trees.pop(path, None)
