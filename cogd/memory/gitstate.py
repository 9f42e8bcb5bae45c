"""How many memory files of this checkout git does not hold yet: untracked, ignored, added or modified.

Memory is shared only through git: each working tree (a clone, or a ``git worktree``) has its
own ``.cogd/memory/``, and a memory recorded in a worktree that is then removed
(``git worktree remove --force``) is gone unless it was committed. So ``cogd status``,
``cogd doctor`` and the session-start pack say how many memory files are not committed, and how
to commit them (:data:`COMMIT_HINT`).

The count comes from ``git status --porcelain -z --untracked-files=all --ignored=matching --
.cogd/memory`` with a bounded timeout. :class:`UncommittedMemory` caches it: a pack only reads
the cached value (:meth:`~UncommittedMemory.peek`, never a process); the daemon's housekeeping
refreshes it when a memory file changed, when git's index file changed (a commit, an ``add``),
or after :data:`MAX_AGE_S` (:meth:`~UncommittedMemory.maybe_refresh`).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from cogd import gitsafe
GIT_TIMEOUT_S = 2.0  # a slow git (a huge index, a network file system) must not hold the housekeeping long
MAX_AGE_S = 60.0  # refreshed at least this often while the daemon runs (git state changes outside cogd)
COMMIT_HINT = "git add .cogd/memory && git commit -m 'cogd memory'"
SAMPLE = 5  # paths kept for messages


def _git_env() -> dict:
    # Never take index.lock for the stat refresh (the user's own git commands must not collide
    # with a background status), never prompt.
    return gitsafe.safe_env()


def count_uncommitted(root: Path, timeout_s: float = GIT_TIMEOUT_S) -> dict:
    """Run git once: ``{"count": int | None, "paths": [up to SAMPLE relpaths], "error": str | None,
    "checked_at": unix s}``. ``count`` is None when git cannot tell (not a repository, no git, a
    timeout). Counted: record files (``*.md``, not dot files) under ``.cogd/memory`` that are
    untracked, ignored, added, renamed or modified; a deleted file is not (git still holds it).
    Never raises."""
    now = time.time()
    cmd = gitsafe.argv(root, "status", "--porcelain=v1", "-z",
                       "--untracked-files=all", "--ignored=matching", "--", ".cogd/memory")
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, timeout=timeout_s, env=_git_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"count": None, "paths": [], "error": f"git status took over {timeout_s:g} s", "checked_at": now}
    except OSError as exc:
        return {"count": None, "paths": [], "error": f"cannot run git: {exc}", "checked_at": now}
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return {"count": None, "paths": [], "error": message[0] if message else f"git status exited {proc.returncode}",
                "checked_at": now}
    paths: list[str] = []
    entries = proc.stdout.split(b"\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2].decode("ascii", "replace"), entry[3:].decode("utf-8", "replace")
        if xy[0] in "RC":
            i += 1  # a rename or copy is followed by its source path
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".md") or name.startswith("."):
            continue
        if xy in (" D", "D ", "DD"):
            continue
        paths.append(path)
    return {"count": len(paths), "paths": sorted(paths)[:SAMPLE], "error": None, "checked_at": now}


class UncommittedMemory:
    """The cached count for one checkout (thread-safe). ``root``: the working tree's root."""

    def __init__(self, root: Path, timeout_s: float = GIT_TIMEOUT_S, max_age_s: float = MAX_AGE_S):
        self.root = Path(root)
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._value: dict | None = None
        self._index_path: Path | None = None
        self._index_mark: tuple | None = None
        self._refreshed_at = 0.0  # monotonic

    def peek(self) -> dict | None:
        """The last count (see :func:`count_uncommitted`), or None before the first refresh. Never runs git."""
        return self._value

    def refresh(self) -> dict:
        """Count now (runs git, at most ``timeout_s``) and cache it."""
        with self._lock:
            mark = self._index_stat()
            value = count_uncommitted(self.root, self.timeout_s)
            self._value = value
            self._index_mark = mark
            self._refreshed_at = time.monotonic()
            return value

    def maybe_refresh(self, memory_changed: bool) -> bool:
        """Refresh when a memory file changed, git's index changed, or the count is older than
        ``max_age_s``. Returns whether it ran git."""
        due = memory_changed or self._value is None or time.monotonic() - self._refreshed_at > self.max_age_s
        if not due and self._index_stat() == self._index_mark:
            return False
        self.refresh()
        return True

    def _index_stat(self) -> tuple | None:
        """``(mtime_ns, size, inode)`` of git's index file for this checkout (a worktree has its own)."""
        if self._index_path is None:
            try:
                proc = subprocess.run(gitsafe.argv(self.root, "rev-parse", "--git-path", "index"), cwd=self.root, capture_output=True,
                                      timeout=self.timeout_s, env=_git_env(), stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired):
                return None
            if proc.returncode != 0:
                return None
            self._index_path = self.root / proc.stdout.decode("utf-8", "replace").strip()
        try:
            st = self._index_path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


def note(value: dict | None) -> str:
    """One line for a pack, status or doctor: ``""`` when nothing is uncommitted (or unknown)."""
    if not value or not value.get("count"):
        return ""
    n = value["count"]
    return (f"{n} memory file{'s' if n != 1 else ''} in this checkout {'are' if n != 1 else 'is'} not committed to git "
            f"(lost if this worktree is removed): {COMMIT_HINT}")
