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

Symbolic links are not followed: a directory symlink is never entered (so a
link to a parent cannot loop), and a file symlink whose target lies inside the
root is left out, since the target is listed under its own path. ``.git/``
and ``.cogd/`` are never listed.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
from pathlib import Path

import pathspec

from cogd.index.languages import language_for_path
from cogd.paths import COGD_DIR

BULK_COMMIT_FILES = 50  # commits touching more files are skipped by recently_changed_files
COGD_IGNORE = ".cogdignore"

# The non-git walk's lowest-precedence layer (gitignore syntax): never code anyone edits ...
DEFAULT_WALK_IGNORES = (".*/", "node_modules/", "__pycache__/", "site-packages/")
# ... and, only in a tree with no root .gitignore, likely output and environment directories.
GUESSED_WALK_IGNORES = ("build/", "dist/", "target/", "venv/", "env/")
_NEVER_DIRS = {".git", COGD_DIR}

def git_head(root: Path) -> str | None:
    """The commit ``HEAD`` points at, or None (no git, or no commit yet)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _git_files(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    names = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return sorted({name for name in names if name})


def _compile(lines: list[str]) -> pathspec.GitIgnoreSpec | None:
    """A gitignore matcher for ``lines`` (None when there is no pattern); a malformed line is dropped."""
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


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


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
        directory = root / rel_dir if rel_dir else root
        lines: list[str] = []
        for name in names:
            lines += _read_lines(directory / name)
        spec = _compile(lines)
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
    rule_dirs = [d for d in dirs if os.path.isfile(os.path.join(root, d, COGD_IGNORE))]
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
    guessed = () if (root / ".gitignore").is_file() else GUESSED_WALK_IGNORES
    rules = IgnoreRules(_compile([*DEFAULT_WALK_IGNORES, *guessed]))
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


def _is_listable(root: str, name: str) -> bool:
    """A regular file, or a symlink to a regular file outside ``root``."""
    path = os.path.join(root, name)  # not pathlib: this runs for every file on every refresh
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISREG(st.st_mode):
        return True
    if not stat.S_ISLNK(st.st_mode) or not os.path.isfile(path):
        return False
    return not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


# Every refresh, even one for a single saved file, lists the whole tree: remember
# each name's language rather than work it out again (bounded; names only).
_language = functools.lru_cache(maxsize=1 << 17)(language_for_path)


def list_source_files(root: Path) -> list[str]:
    """Repo-relative POSIX paths of existing files in a language cogd parses.

    Sorted, de-duplicated; excludes ``.cogd/``, paths a ``.cogdignore``
    excludes, paths git lists that are gone from the work tree (deleted but not
    yet staged), symlinks into the tree itself, and names that are not valid
    UTF-8.
    """
    names = _git_files(root)
    if names is None:
        names = _walk_files(root)
    else:
        names = _apply_cogdignore(root, names)
    result = []
    root_str = str(root)
    for name in names:
        if name.startswith(COGD_DIR + "/") or _language(name) is None:
            continue
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a non-UTF-8 name cannot be stored or reported
            continue
        if _is_listable(root_str, name):
            result.append(name)
    return result


def recently_changed_files(root: Path, limit: int = 50) -> list[str]:
    """Up to ``limit`` paths most recently changed: uncommitted first, then git log order.

    Returns [] outside git. Paths are repo-relative and may include files cogd
    does not parse; callers filter.
    """
    seen: dict[str, None] = {}
    try:
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-z", "--untracked-files=normal"],
            capture_output=True, timeout=10, check=False,
        )
        for record in status.stdout.decode("utf-8", "replace").split("\0"):
            if len(record) > 3:
                seen.setdefault(record[3:], None)
        log = subprocess.run(
            ["git", "-C", str(root), "log", "-n", "50", "--name-only", "--format=%x00"],
            capture_output=True, timeout=10, check=False,
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
