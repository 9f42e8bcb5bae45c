"""Where code lives, as a prior: vendored third-party trees and tests.

A vendored tree is a copy of another project inside this one (``vendor/``, ``_vendor/``,
``third_party/``, ``extern/``…, anything the root ``.gitattributes`` marks
``linguist-vendored``, or a package directory with its own licence or distribution metadata:
:func:`package_roots`). It shares the vocabulary of the code that uses it but is rarely
where a change belongs, so retrieval ranks it as the dependency it is: demoted, unless
the prompt names it (docs/architecture.md, "Prompt analysis"). Tests get the same
treatment in :mod:`cogd.retrieve.hybrid`, with the prompt's parts saying whether the
prompt is about a test.
"""

from __future__ import annotations

import configparser
import fnmatch
import hashlib
import json
import re
import tomllib
from pathlib import Path

from cogd.index.boundary import read_tree_file
from cogd.index.sources import list_tree_names

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


_LICENCE = re.compile(r"(?:licen[cs]e|copying|unlicense)(?:[-._][\w.-]*)?", re.I)
# A documentation page about the licence (docs/license.rst, docs/license.md), not a licence file.
_LICENCE_PAGE = re.compile(r"(?:license|licence|copying)\.(?:rst|md|markdown|html?|adoc|txt\.rst)")
_MANIFESTS = ("pyproject.toml", "setup.cfg", "setup.py", "package.json", "Cargo.toml")
_DIST_DIR = re.compile(r"[^/]+\.(?:dist-info|egg-info)$")
MARKER_MAX_BYTES = 64 << 10
_SETUP_NAME = re.compile(r"""\bname\s*=\s*['"]([^'"\n]{1,100})['"]""")


def _manifest_name(root: Path, rel: str) -> str | None:
    """The package name a manifest declares (``package.json`` "name"; ``pyproject.toml``
    ``[project]``/``[tool.poetry]`` name; ``setup.cfg`` ``[metadata]`` name; ``setup.py``'s
    ``name=`` literal; ``Cargo.toml`` ``[package]`` name), lower-cased; None when unreadable or absent."""
    try:
        text = read_tree_file(root, rel, MARKER_MAX_BYTES).decode("utf-8", errors="replace")
        base = rel.rsplit("/", 1)[-1]
        if base == "package.json":
            name = json.loads(text).get("name")
        elif base in ("pyproject.toml", "Cargo.toml"):
            data = tomllib.loads(text)
            name = (data.get("project") or data.get("package") or data.get("tool", {}).get("poetry") or {}).get("name")
        elif base == "setup.cfg":
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            name = parser.get("metadata", "name", fallback=None)
        else:
            match = _SETUP_NAME.search(text)
            name = match.group(1) if match else None
    except (OSError, ValueError, AttributeError, configparser.Error, tomllib.TOMLDecodeError):
        return None
    return name.strip().lower() if isinstance(name, str) and name.strip() else None


def _related(name: str, root_name: str | None) -> bool:
    """Whether two package names belong to one project: the same npm scope (``@acme/x``,
    ``@acme/y``), or one is the other's prefix up to a separator (``acme``, ``acme-core``)."""
    if root_name is None:
        return False
    if name.startswith("@") and root_name.startswith("@"):
        return name.split("/", 1)[0] == root_name.split("/", 1)[0]
    a, b = sorted((re.sub(r"[-_.]+", "-", name.lstrip("@")), re.sub(r"[-_.]+", "-", root_name.lstrip("@"))), key=len)
    return b == a or b.startswith(a + "-") or b.startswith(a + "/") or b.endswith("-" + a)


def _digest(root: Path, rel: str) -> str | None:
    try:
        return hashlib.sha256(read_tree_file(root, rel, MARKER_MAX_BYTES)).hexdigest()
    except OSError:
        return None


def package_roots(root: Path, names: list[str]) -> dict[str, str]:
    """Directories below the root that hold a copy of another project, each with the marker
    that says so (``{"libs/six": "has its own LICENSE"}``), from the work tree's file list
    ``names`` (:func:`cogd.index.sources.list_tree_names`; marker files need not be indexed).

    The rule (docs/architecture.md, "Vendored code"), for a directory ``D`` other than the root:

    * ``D`` holds distribution metadata (``PKG-INFO``, or a ``*.dist-info``/``*.egg-info``
      directory): an installed or unpacked distribution, vendored;
    * ``D`` holds a licence file (``LICENSE``, ``LICENCE``, ``COPYING``, ``UNLICENSE``, any
      suffix; not a lower-case documentation page such as ``docs/license.rst``) and a manifest (``pyproject.toml``, ``setup.cfg``, ``setup.py``, ``package.json``,
      ``Cargo.toml``): vendored unless the manifest's package name is related to the root
      manifest's (same npm scope, or one name the other's prefix: ``acme`` / ``acme-core``) —
      a monorepo's own packages often carry their own licence and manifest;
    * ``D`` holds a licence file and no manifest: vendored unless the file is byte-identical
      to a licence file of the root (a monorepo copying its licence into each package);
    * a manifest without a licence (a monorepo's package, a test fixture) is first-party.

    Reads only marker files, through the tree boundary, at most ``MARKER_MAX_BYTES`` each.
    """
    by_dir: dict[str, dict[str, str]] = {}
    dist: dict[str, str] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        if base == "PKG-INFO":
            dist.setdefault(folder, "has its own PKG-INFO")
        elif _LICENCE.fullmatch(base) and not _LICENCE_PAGE.fullmatch(base):
            by_dir.setdefault(folder, {}).setdefault("licence", name)
        elif base in _MANIFESTS:
            by_dir.setdefault(folder, {}).setdefault("manifest", name)
        parts = folder.split("/")
        for i, piece in enumerate(parts):
            if _DIST_DIR.fullmatch(piece):
                dist.setdefault("/".join(parts[:i]), f"has its own {piece}")
                break
    root_markers = by_dir.get("", {})
    root_manifests = [n for n in names if "/" not in n and n in _MANIFESTS]
    root_name = next(filter(None, (_manifest_name(root, n) for n in root_manifests)), None)
    root_licences = {_digest(root, n) for n in names if "/" not in n and _LICENCE.fullmatch(n)} - {None}
    out: dict[str, str] = {folder: why for folder, why in dist.items() if folder}
    for folder, markers in sorted(by_dir.items()):
        if not folder or folder in out or "licence" not in markers or markers is root_markers:
            continue
        licence = markers["licence"].rsplit("/", 1)[-1]
        if "manifest" in markers:
            name = _manifest_name(root, markers["manifest"])
            if name is not None and _related(name, root_name):
                continue
        elif _digest(root, markers["licence"]) in root_licences:
            continue
        out[folder] = f"has its own {licence}"
    return out


_roots_cache: dict[str, tuple[object, dict[str, str]]] = {}


def cached_package_roots(root: Path, freshness: object, names=None) -> dict[str, str]:
    """:func:`package_roots` of the work tree at ``root``, listed again only when ``freshness``
    (anything comparable: the index's file count and newest indexing time, say) changes."""
    key = str(root)
    cached = _roots_cache.get(key)
    if cached is not None and cached[0] == freshness:
        return cached[1]
    if names is None:
        names = list_tree_names(Path(root))
    roots = package_roots(Path(root), names)
    _roots_cache[key] = (freshness, roots)
    return roots


def vendored_root(path: str, roots: dict[str, str]) -> tuple[str, str] | None:
    """``(directory, marker)`` of the deepest of ``roots`` (:func:`package_roots`) holding ``path``."""
    folder = path.rpartition("/")[0]
    while folder:
        if folder in roots:
            return folder, roots[folder]
        folder = folder.rpartition("/")[0]
    return None


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
