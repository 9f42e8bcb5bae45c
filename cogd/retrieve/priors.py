"""Where code lives, as a prior: vendored third-party trees and tests.

A vendored tree is a copy of another project inside this one (``vendor/``, ``_vendor/``,
``third_party/``, ``extern/``…, or anything the root ``.gitattributes`` marks
``linguist-vendored``). It shares the vocabulary of the code that uses it but is rarely
where a change belongs, so retrieval ranks it as the dependency it is: demoted, unless
the prompt names it (docs/architecture.md, "Prompt analysis"). Tests get the same
treatment in :mod:`cogd.retrieve.hybrid`, with the prompt's parts saying whether the
prompt is about a test.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from cogd.index.boundary import read_tree_file

_VENDOR_DIR = re.compile(
    r"(^|/)(vendor|vendors|vendored|_vendor|_vendored|third_party|third-party|thirdparty|3rdparty|extern|"
    r"externals|cextern|node_modules|bower_components)/([^/]+)")
# A copied web asset: a version in its name (jquery-3.5.1.js) or minified (underscore.min.js).
_VENDORED_ASSET = re.compile(r"(^|/)([A-Za-z][\w.]*?)(?:[-.]v?\d+(?:\.\d+)+)?(?:[-.]min)\.(?:js|css)$"
                             r"|(^|/)([A-Za-z][\w]*?)[-.]v?\d+(?:\.\d+)+\.(?:js|css)$")
GITATTRIBUTES_MAX_BYTES = 256 << 10
_cache: dict[str, tuple[int, list[str]]] = {}


def vendored_patterns(root: Path) -> list[str]:
    """The patterns of the root ``.gitattributes`` lines that set ``linguist-vendored``
    (not ``-linguist-vendored`` nor ``linguist-vendored=false``). Read through the tree
    boundary (:func:`cogd.index.boundary.read_tree_file`); cached by modification time;
    [] when absent or unreadable."""
    path = Path(root) / ".gitattributes"
    try:
        mtime = path.lstat().st_mtime_ns
    except OSError:
        return []
    cached = _cache.get(str(root))
    if cached and cached[0] == mtime:
        return cached[1]
    try:
        data = read_tree_file(Path(root), ".gitattributes", GITATTRIBUTES_MAX_BYTES)
    except OSError:
        return []
    patterns = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0].startswith("#"):
            continue
        if any(a in ("linguist-vendored", "linguist-vendored=true") for a in fields[1:]):
            patterns.append(fields[0])
    _cache[str(root)] = (mtime, patterns)
    return patterns


def _matches(pattern: str, path: str) -> bool:
    """gitattributes matching, the common cases: no slash = any file or directory name;
    otherwise relative to the root, ``**`` any depth, a trailing ``/**`` everything below."""
    pattern = pattern.lstrip("/")
    if "/" not in pattern.rstrip("/"):
        name = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(part, name) for part in path.split("/"))
    if pattern.endswith("/**"):
        return path.startswith(pattern[:-2]) or fnmatch.fnmatchcase(path, pattern[:-3] + "/*")
    return fnmatch.fnmatchcase(path, pattern.replace("**/", "*").replace("/**", "/*")) or \
        path.startswith(pattern.rstrip("/") + "/")


def vendored_name(path: str, patterns: list[str] = ()) -> str | None:
    """The vendored project ``path`` belongs to (``ply`` for ``astropy/extern/ply/lex.py``;
    ``jquery`` for ``static/jquery-3.5.1.js`` or ``jquery.min.js``; the matching pattern for a
    ``.gitattributes`` match), or None for the project's own code."""
    match = _VENDOR_DIR.search(path)
    if match:
        return match.group(3).rsplit(".", 1)[0]
    asset = _VENDORED_ASSET.search(path)
    if asset:
        return asset.group(2) or asset.group(4)
    for pattern in patterns:
        if _matches(pattern, path):
            return pattern
    return None


def names_vendored(prompt_lower: str, name: str, clue_files: list[str], path: str) -> bool:
    """True when the prompt names the vendored project (its name as a word, or a path in it)."""
    if any(f == path or f.startswith(path.rsplit("/", 1)[0] + "/") for f in clue_files):
        return True
    word = name.lower().strip("*/")
    return len(word) > 2 and re.search(r"\b" + re.escape(word) + r"\b", prompt_lower) is not None
