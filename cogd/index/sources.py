"""Which files of the work tree are indexed.

Inside a git repository the list comes from git itself — tracked files plus
untracked files that no ``.gitignore`` excludes — so every ignore rule git
honours (nested ``.gitignore``, ``.git/info/exclude``, the global excludes file)
holds without cogd re-implementing any of it.

Outside git, :func:`_walk_files` walks the tree with ``os.walk`` and honours
nested ``.gitignore`` files with pathspec's gitignore matcher: each file's
patterns are relative to its own directory, a deeper file's verdict overrides a
shallower one's, and an ignored directory is pruned (never entered), which is
also why nothing below it can be re-included — git's rule. A built-in layer of
the lowest precedence always ignores hidden directories, ``node_modules/``,
``__pycache__/`` and ``site-packages/``; in a tree without a ``.gitignore`` at
its root it also guesses at output and environment directories (``build/``,
``dist/``, ``target/``, ``venv/``, ``env/``, anywhere). A tree that has a root
``.gitignore`` says itself what it ignores, so ``/build`` there ignores the
top-level ``build/`` only and ``src/build/`` is indexed. A ``.gitignore`` can
re-include a built-in one (``!node_modules/``).

``.cogdignore`` files (same syntax, same nesting) are honoured in both modes,
on tracked files too; in a directory holding both files, ``.cogdignore`` lines
come after the ``.gitignore`` ones and so win. In git mode a ``.cogdignore``
counts even when git ignores it (a personal one, say).

Symbolic links never lead out of the work tree (:mod:`cogd.index.boundary`
has the rule and the reader every caller uses):

* a directory symlink is never entered (so a link to a parent cannot loop),
  and a name git lists below one (a crafted index) is left out, or counted
  with the links out (below) when it resolves out of the tree;
* a file symlink whose target lies outside the root, or in ``.git/`` or
  ``.cogd/``, is listed in :attr:`SourceListing.outside`; the indexer records
  it by path only, with the skip reason ``symlink_outside``, and never reads it;
* a file symlink whose target is a regular file inside the root is indexed
  once: under the target's own path when that is listed as a source file
  itself (the link is then left out), otherwise under the link's path (the
  first such link by name when several share a target), read at the target;
* ``.gitignore`` and ``.cogdignore`` files that are symlinks are not read,
  as git does not read a symlinked ``.gitignore``.

``.git/`` and ``.cogd/`` are never listed.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from cogd import gitsafe
from cogd.index.boundary import PRIVATE_DIRS, OutsideTree, inside, read_tree_file, real_root, resolve_tree_path
from cogd.index.languages import language_for_path
from cogd.paths import COGD_DIR

BULK_COMMIT_FILES = 50  # commits touching more files are skipped by recently_changed_files
COGD_IGNORE = ".cogdignore"
MAX_RULE_FILE_BYTES = 4 << 20  # a longer ignore file is read up to here (git refuses one of 100 MB)

# The non-git walk's lowest-precedence layer (gitignore syntax): never code anyone edits ...
DEFAULT_WALK_IGNORES = (".*/", "node_modules/", "__pycache__/", "site-packages/")
# ... and, only in a tree with no root .gitignore, likely output and environment directories.
GUESSED_WALK_IGNORES = ("build/", "dist/", "target/", "venv/", "env/")
_NEVER_DIRS = {".git", COGD_DIR}

def git_head(root: Path) -> str | None:
    """The commit ``HEAD`` points at, or None (no git, or no commit yet)."""
    try:
        out = subprocess.run(
            gitsafe.argv(root, "rev-parse", "--verify", "-q", "HEAD"),
            capture_output=True, text=True, timeout=10, check=False, env=gitsafe.safe_env(), stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _git_files(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(
            gitsafe.argv(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"),
            capture_output=True, timeout=60, check=False, env=gitsafe.safe_env(), stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    names = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return sorted({name for name in names if name})


def compile_ignores(lines: list[str]) -> pathspec.GitIgnoreSpec | None:
    """A gitignore matcher for ``lines`` (gitignore-syntax patterns, one per item).

    Returns None when no line holds a pattern. Never raises on a bad pattern: a
    malformed line (e.g. an unclosed ``[``) is dropped and the others are kept.
    """
    if not any(line.strip() for line in lines):
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:  # one bad pattern (e.g. an unclosed "[") must not cost the others
        good = []
        for line in lines:
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
            except Exception:
                continue
            good.append(line)
        return pathspec.GitIgnoreSpec.from_lines(good) if good else None


def _read_lines(root: Path, rel: str) -> list[str]:
    """The lines of rule file ``rel`` (root-relative); [] when missing, unreadable or a symlink."""
    try:
        data = read_tree_file(root, rel, MAX_RULE_FILE_BYTES, follow_inside=False)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


class IgnoreRules:
    """Nested gitignore-style rule files, keyed by the directory holding them.

    Directories are root-relative POSIX paths, ``""`` for the root. A path is
    judged by the rules of its directory and of every ancestor, the deepest
    one with a matching pattern deciding (as git does); ``base`` decides last.
    """

    def __init__(self, base: pathspec.GitIgnoreSpec | None = None):
        self.specs: dict[str, pathspec.GitIgnoreSpec] = {}
        self.base = base
        self._dir_cache: dict[str, bool] = {}

    def add_dir(self, root: Path, rel_dir: str, names: tuple[str, ...]) -> None:
        """Read the rule files called ``names`` in ``rel_dir`` (missing ones count as empty)."""
        lines: list[str] = []
        for name in names:
            lines += _read_lines(root, f"{rel_dir}/{name}" if rel_dir else name)
        spec = compile_ignores(lines)
        if spec is not None:
            self.specs[rel_dir] = spec
            self._dir_cache.clear()

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` itself is ignored by a pattern (its directories not considered)."""
        probe = rel + "/" if is_dir else rel
        parts = rel.split("/")
        for depth in range(len(parts) - 1, -1, -1):
            spec = self.specs.get("/".join(parts[:depth]))
            if spec is None:
                continue
            result = spec.check_file(probe.split("/", depth)[-1] if depth else probe)
            if result.include is not None:
                return bool(result.include)
        if self.base is not None:
            result = self.base.check_file(probe)
            if result.include is not None:
                return bool(result.include)
        return False

    def dir_ignored(self, rel_dir: str) -> bool:
        """Whether directory ``rel_dir`` or any of its ancestors is ignored."""
        if not rel_dir:
            return False
        cached = self._dir_cache.get(rel_dir)
        if cached is None:
            parent = rel_dir.rpartition("/")[0]
            cached = self.dir_ignored(parent) or self.matches(rel_dir, True)
            self._dir_cache[rel_dir] = cached
        return cached

    def ignored(self, rel: str) -> bool:
        """Whether file ``rel`` is ignored, by its own name or through an ignored directory."""
        return self.dir_ignored(rel.rpartition("/")[0]) or self.matches(rel, False)


def _apply_cogdignore(root: Path, names: list[str]) -> list[str]:
    """``names`` (from git) without those a ``.cogdignore`` excludes.

    The rule files are looked for on disk in every directory that holds a
    listed name, and its ancestors, so one git ignores still counts.
    """
    dirs = {""}
    for name in names:
        parent = name.rpartition("/")[0]
        while parent not in dirs:
            dirs.add(parent)
            parent = parent.rpartition("/")[0]
    rule_dirs = [d for d in dirs if _regular(os.path.join(root, d, COGD_IGNORE))]  # a symlink is not read
    if not rule_dirs:
        return names
    rules = IgnoreRules()
    for rel_dir in rule_dirs:
        rules.add_dir(root, rel_dir, (COGD_IGNORE,))
    if not rules.specs:
        return names
    return [name for name in names if not rules.ignored(name)]


def _walk_files(root: Path) -> list[str]:
    """Every file under ``root`` that the ignore files and the defaults leave in."""
    guessed = () if _regular(os.path.join(root, ".gitignore")) else GUESSED_WALK_IGNORES
    rules = IgnoreRules(compile_ignores([*DEFAULT_WALK_IGNORES, *guessed]))
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        prefix = rel_dir + "/" if rel_dir else ""
        if ".gitignore" in filenames or COGD_IGNORE in filenames:
            rules.add_dir(root, rel_dir, (".gitignore", COGD_IGNORE))
        kept = []
        for name in dirnames:
            if name in _NEVER_DIRS or os.path.islink(os.path.join(dirpath, name)):
                continue  # symlinked directories are not followed (os.walk would not either)
            if not rules.dir_ignored(prefix + name):
                kept.append(name)
        dirnames[:] = kept  # pruned in place: ignored directories are never entered
        for name in filenames:
            if not rules.matches(prefix + name, False):  # its directories passed already
                found.append(prefix + name)
    return sorted(found)


def _regular(path: str) -> bool:
    """Whether ``path`` itself (not a symlink's target) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class SourceListing:
    """The work tree's source files, as :func:`scan_source_files` finds them.

    ``files``: listed repo-relative POSIX name → the real repo-relative path
    its content is read from (the name itself, or an in-tree symlink's
    target), sorted by name. ``outside``: sorted names of symlinks that lead
    out of the work tree (skip reason ``symlink_outside``; never read).
    """

    files: dict[str, str] = field(default_factory=dict)
    outside: list[str] = field(default_factory=list)


class _Classifier:
    """Sorts listed names into regular files, in-tree links and links out (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.real = real_root(root)
        self._plain_dirs: dict[str, bool] = {"": True}

    def plain_dir(self, rel_dir: str) -> bool:
        """Whether ``rel_dir`` and each of its ancestors is a directory, not a symlink to one."""
        known = self._plain_dirs.get(rel_dir)
        if known is None:
            parent = rel_dir.rpartition("/")[0]
            try:
                known = self.plain_dir(parent) and stat.S_ISDIR(os.lstat(os.path.join(self.real, rel_dir)).st_mode)
            except OSError:
                known = False
            self._plain_dirs[rel_dir] = known
        return known

    def classify(self, name: str) -> tuple[str | None, str]:
        """(``"file"``, ``"link"``, ``"outside"`` or None to leave out, the real path to read)."""
        path = os.path.join(self.real, name)  # not pathlib: this runs for every file on every refresh
        if not self.plain_dir(name.rpartition("/")[0]):
            # Below a directory symlink (or a vanished directory): never followed. Counted when it
            # leads out; inside, the file is listed under its real path if at all.
            rel = inside(self.real, os.path.realpath(path))
            return ("outside" if rel is None or rel.split("/", 1)[0] in PRIVATE_DIRS else None), name
        try:
            st = os.lstat(path)
        except OSError:
            return None, name
        if stat.S_ISREG(st.st_mode):
            return "file", name
        if not stat.S_ISLNK(st.st_mode):
            return None, name  # a FIFO, socket or device: nothing to read
        try:
            real = resolve_tree_path(self.root, name, root_real=self.real)
        except OutsideTree:
            return "outside", name
        return ("link" if _regular(os.path.join(self.real, real)) else None), real


# Every refresh, even one for a single saved file, lists the whole tree: remember
# each name's language rather than work it out again (bounded; names only).
_language = functools.lru_cache(maxsize=1 << 17)(language_for_path)


def _candidates(root: Path) -> list[str]:
    """Names git (or the walk) lists that are in a language cogd parses, sorted."""
    names = _git_files(root)
    if names is None:
        names = _walk_files(root)
    else:
        names = _apply_cogdignore(root, names)
    result = []
    for name in names:
        if name.startswith(COGD_DIR + "/") or _language(name) is None:
            continue
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a non-UTF-8 name cannot be stored or reported
            continue
        result.append(name)
    return result


def classify_paths(root: Path, names: list[str]) -> SourceListing | None:
    """:func:`scan_source_files` for ``names`` alone (already known to pass the ignore rules).

    Returns None when one of them is an in-tree symlink, since whether a link
    is indexed depends on whether its target is listed: list the whole tree then.
    """
    classifier = _Classifier(root)
    listing = SourceListing()
    for name in sorted(names):
        kind, real = classifier.classify(name)
        if kind == "link":
            return None
        if kind == "file":
            listing.files[name] = real
        elif kind == "outside":
            listing.outside.append(name)
    return listing


def scan_source_files(root: Path) -> SourceListing:
    """The work tree's source files and the symlinks among them that lead outside.

    Excludes ``.cogd/``, paths a ``.cogdignore`` excludes, paths git lists
    that are gone from the work tree (deleted but not yet staged), anything
    that is not a regular file or a symlink to one, names below a directory
    symlink, and names that are not valid UTF-8. Symlinks follow the rules of
    the module docstring.
    """
    classifier = _Classifier(root)
    listing = SourceListing()
    links: list[tuple[str, str]] = []
    for name in _candidates(root):
        kind, real = classifier.classify(name)
        if kind == "file":
            listing.files[name] = real
        elif kind == "link":
            links.append((name, real))
        elif kind == "outside":
            listing.outside.append(name)
    taken = set(listing.files)
    for name, real in links:  # in name order: the first link to a target that is not listed wins
        if real not in taken:
            taken.add(real)
            listing.files[name] = real
    listing.files = dict(sorted(listing.files.items()))
    return listing


def list_tree_names(root: Path) -> list[str]:
    """Every file name of the work tree the ignore rules leave in, in any language or none
    (licence and metadata files included), sorted; ``.cogd/`` left out. From git when the tree
    is a repository, else from the walk (see the module docstring)."""
    names = _git_files(root)
    names = _walk_files(root) if names is None else _apply_cogdignore(root, names)
    return [n for n in names if not n.startswith(COGD_DIR + "/")]


def list_source_files(root: Path) -> list[str]:
    """Repo-relative POSIX paths of the files :func:`scan_source_files` would index (sorted).

    Symlinks that lead out of the tree are not among them.
    """
    return list(scan_source_files(root).files)


def recently_changed_files(root: Path, limit: int = 50) -> list[str]:
    """Up to ``limit`` paths most recently changed: uncommitted first, then git log order.

    Returns [] outside git. Paths are repo-relative and may include files cogd
    does not parse; callers filter.
    """
    seen: dict[str, None] = {}
    try:
        status = subprocess.run(
            gitsafe.argv(root, "status", "--porcelain", "-z", "--untracked-files=normal"),
            capture_output=True, timeout=10, check=False, env=gitsafe.safe_env(), stdin=subprocess.DEVNULL,
        )
        for record in status.stdout.decode("utf-8", "replace").split("\0"):
            if len(record) > 3:
                seen.setdefault(record[3:], None)
        log = subprocess.run(
            gitsafe.argv(root, "log", "-n", "50", "--name-only", "--format=%x00"),
            capture_output=True, timeout=10, check=False, env=gitsafe.safe_env(), stdin=subprocess.DEVNULL,
        )
        for commit in log.stdout.decode("utf-8", "replace").split("\0"):
            names = [line.strip() for line in commit.splitlines() if line.strip()]
            if len(names) > BULK_COMMIT_FILES:
                continue  # an import, a mass rename or a reformat says nothing about focus
            for name in names:
                seen.setdefault(name, None)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [path for path in seen if not path.startswith(COGD_DIR + "/")][:limit]
