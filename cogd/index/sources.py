"""Which files of the work tree are indexed.

Inside a git repository the list comes from git itself — tracked files plus
untracked files that no ``.gitignore`` excludes — so every ignore rule git
honours (nested ``.gitignore``, ``.git/info/exclude``, the global excludes file)
holds without cogd re-implementing any of it. Outside git, a plain walk that
skips hidden and well-known dependency/build directories is the fallback.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cogd.index.languages import language_for_path
from cogd.paths import COGD_DIR

BULK_COMMIT_FILES = 50  # commits touching more files are skipped by recently_changed_files

# Only used by the non-git fallback walk.
_SKIP_DIRS = {"node_modules", "__pycache__", "venv", "env", "build", "dist", "target", "site-packages"}


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


def _walk_files(root: Path) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
        rel = os.path.relpath(dirpath, root)
        for name in filenames:
            found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(found)


def list_source_files(root: Path) -> list[str]:
    """Repo-relative POSIX paths of existing files in a language cogd parses.

    Sorted, de-duplicated; excludes ``.cogd/``, paths git lists that are
    gone from the work tree (deleted but not yet staged), and names that are
    not valid UTF-8.
    """
    names = _git_files(root)
    if names is None:
        names = _walk_files(root)
    result = []
    for name in names:
        if name.startswith(COGD_DIR + "/") or language_for_path(name) is None:
            continue
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a non-UTF-8 name cannot be stored or reported
            continue
        if (root / name).is_file():
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
