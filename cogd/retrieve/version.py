"""Version-bump requests: the files that hold the project's version string.

A request such as "start version 8.0" or "bump the version to 2.1" changes one line, the
version assignment, and names none of the code around it: its words ("start", "version", a
number) match every function that mentions a version (``version_option``, a shell's version
check) better than the module that assigns ``__version__``, whose one matching line is a
small part of a long file. History cannot help either: the miner skips such commits by the
same rule (:func:`cogd.history.miner.version_subject`), since they are no change request to
learn from. So retrieval looks the assignment up itself: among the indexed files whose text
mentions a version, the ones with a module-level ``__version__ = …`` (Python's convention,
PEP 396/8) or ``VERSION = …`` line, read from the work tree.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from cogd.history.miner import version_subject
from cogd.index.boundary import read_tree_file
from cogd.retrieve.lexical import bm25_search

VERSION_FILES_SCANNED = 40  # file entities matching "version" read from the tree, best BM25 first
VERSION_READ_BYTES = 1 << 20  # a version assignment sits in a module's first megabyte
VERSION_REQUEST_CHARS = 300  # a longer prompt is a task that may mention a version, not a bump
_NUMBER = re.compile(r"\bv?\d+\.\d+")
_BUMP = re.compile(r"\bbump", re.I)
_ASSIGNMENT = re.compile(rb"^(?:__version__|VERSION)\s*(?::[^=\n]{1,40})?=[^=]", re.M)


def version_request(prompt: str) -> bool:
    """True for a short prompt whose first line is a version bump or a release by the history
    miner's rule and that names a version number or says "bump" (so "update the version check
    in the parser" is none: the rule alone would take it)."""
    text = prompt.strip()
    if not text or len(text) > VERSION_REQUEST_CHARS:
        return False
    first = text.split("\n", 1)[0]
    return version_subject(first) and bool(_NUMBER.search(text) or _BUMP.search(text))


def version_files(conn: sqlite3.Connection, root: Path) -> list[str]:
    """Paths of the indexed files that assign a module-level ``__version__`` or ``VERSION``,
    in BM25 order of their file entities for the word "version" (at most
    ``VERSION_FILES_SCANNED`` read, ``VERSION_READ_BYTES`` each, through
    :func:`cogd.index.boundary.read_tree_file`; a file that cannot be read now is skipped).
    Raises sqlite3.Error on a broken index."""
    found = []
    for hit in bm25_search(conn, "version", limit=VERSION_FILES_SCANNED, kinds=("file",)):
        try:
            data = read_tree_file(root, hit.path, VERSION_READ_BYTES)
        except OSError:
            continue
        if _ASSIGNMENT.search(data):
            found.append(hit.id)
    return found
