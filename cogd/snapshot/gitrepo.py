"""What a snapshot needs to know of the git repository: its id, HEAD, ancestors, a clean tree.

Every call is a bounded ``git`` subprocess with a timeout; none reads outside the work tree.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from cogd import gitsafe
from cogd.errors import CogdError

GIT_TIMEOUT_S = 30.0
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # SHA-1 or SHA-256 object names


def _git(root: Path, *args: str) -> str:
    """stdout of ``git -C root args``; raises CogdError(kind ``snapshot``) when git fails."""
    try:
        proc = subprocess.run(gitsafe.argv(root, *args), capture_output=True, text=True, env=gitsafe.safe_env(),
                              timeout=GIT_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CogdError("snapshot", f"git {args[0]} failed: {exc}") from exc
    if proc.returncode != 0:
        raise CogdError("snapshot", f"git {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}",
                        "snapshots need a git repository with at least one commit")
    return proc.stdout


def head(root: Path) -> str:
    """The commit HEAD points at (40 or 64 hex digits). Raises CogdError without one."""
    commit = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}").strip()
    if not COMMIT.match(commit):
        raise CogdError("snapshot", f"HEAD is not a commit ({commit[:80]!r})")
    return commit


def repo_id(root: Path) -> str:
    """The repository's id in a store: its root commit (the oldest one without parents, the
    smallest name when history has several), the same in every clone of it."""
    roots = sorted(c for c in _git(root, "rev-list", "--max-parents=0", "HEAD").split() if COMMIT.match(c))
    if not roots:
        raise CogdError("snapshot", "the repository has no root commit")
    return roots[0]


def ancestors(root: Path, limit: int) -> list[str]:
    """HEAD and up to ``limit`` commits before it, nearest first (``git rev-list``'s order)."""
    out = _git(root, "rev-list", f"--max-count={max(1, limit + 1)}", "HEAD")
    return [c for c in out.split() if COMMIT.match(c)]


def parents(root: Path, commit: str) -> list[str]:
    """The parent commits of ``commit``."""
    line = _git(root, "rev-list", "--parents", "-n", "1", commit).split()
    return [c for c in line[1:] if COMMIT.match(c)]


def distance(root: Path, older: str, newer: str = "HEAD") -> int | None:
    """How many commits ``newer`` has that ``older`` has not (None when git cannot tell, e.g. a
    commit this clone does not hold)."""
    try:
        return int(_git(root, "rev-list", "--count", f"{older}..{newer}").strip())
    except (CogdError, ValueError):
        return None


def dirty_paths(root: Path, limit: int = 10) -> list[str]:
    """Up to ``limit`` paths outside ``.cogd/`` that differ from HEAD or are untracked and not ignored:
    what would make an index differ from the commit's."""
    out = _git(root, "status", "--porcelain", "-z", "--untracked-files=all")
    paths = [entry[3:] for entry in out.split("\0") if len(entry) > 3]
    return [p for p in paths if not p.startswith(".cogd/")][:limit]
