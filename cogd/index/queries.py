"""Running tree-sitter queries.

One wrapper so every query runs the same way. A time limit cannot be set here:
py-tree-sitter 0.26.1's ``progress_callback`` on ``QueryCursor.matches``
crashes the interpreter (segmentation fault) as soon as a query has matches,
and neither ``match_limit`` nor ``set_max_start_depth`` bounds the quadratic
cost of deeply nested input. Pathological files are therefore contained one
level up: the daemon parses in a child process it can kill
(:mod:`cogd.index.parsepool`).
"""

from __future__ import annotations

import tree_sitter


def run_query(query: tree_sitter.Query, node: tree_sitter.Node) -> list:
    """``QueryCursor(query).matches(node)``: a list of (pattern index, {capture: [nodes]})."""
    return tree_sitter.QueryCursor(query).matches(node)
