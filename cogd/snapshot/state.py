"""Which snapshot the local projection came from: ``.cogd/index/snapshot.json``.

Written last by a pull (:mod:`cogd.snapshot.pull`), read by ``cogd status`` and ``cogd
doctor``. It records the ``index.db`` it installed by device and inode: an index rebuilt
locally since (moved aside as damaged, reset) is another file, and then the record no longer
describes it (:func:`installed` says so). Standard library only: the CLI reads it without
loading the index or the model.
"""

from __future__ import annotations

import json
import os
import time

from cogd import safepath
from cogd.paths import Layout

STATE_FILE = "snapshot.json"
ATTEMPT_FILE = "last-pull.json"  # in .cogd/snapshot/: the last pull's outcome, for the daemon's start


def record(layout: Layout, info: dict) -> None:
    """Write the record of a snapshot just installed (``info``: commit, repo_id, uri, created_at,
    model, vectors, counts) with the identity of the ``index.db`` now in place."""
    st = os.stat(layout.index_db)
    data = {**info, "installed_at": time.time(), "index_dev": st.st_dev, "index_ino": st.st_ino}
    safepath.write_atomic(layout.index_dir / STATE_FILE, json.dumps(data, sort_keys=True).encode("utf-8"))


def installed(layout: Layout) -> dict | None:
    """The record of the snapshot the current ``index.db`` came from, with ``behind`` (commits from
    it to HEAD, None when git cannot tell); None when the index did not come from one (or was
    rebuilt locally since). Never raises for a missing or unreadable record."""
    try:
        raw = safepath.read_bytes(layout.index_dir / STATE_FILE, 1 << 16)
        data = json.loads(raw) if raw else None
        st = os.stat(layout.index_db)
    except (OSError, ValueError, safepath.UnsafePath):
        return None
    if not isinstance(data, dict) or (data.get("index_dev"), data.get("index_ino")) != (st.st_dev, st.st_ino):
        return None
    commit = data.get("commit")
    data["behind"] = None
    if isinstance(commit, str) and commit.isalnum():  # a commit name, never an option for git
        import subprocess

        try:
            from cogd import gitsafe

            out = subprocess.run(gitsafe.argv(layout.root, "rev-list", "--count", f"{commit}..HEAD"),
                                 env=gitsafe.safe_env(), capture_output=True, text=True, timeout=10, check=False)
            data["behind"] = int(out.stdout.strip()) if out.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    return data


def record_attempt(layout: Layout, head: str, outcome: dict) -> None:
    """Remember how the last pull for ``head`` ended (``outcome``: its state and reason), so a daemon
    started right after a failed ``cogd up`` pull does not wait for the same failure again."""
    folder = layout.cogd_dir / "snapshot"
    safepath.check_chain(folder, create=True)
    data = {"head": head, "at": time.time(), **outcome}
    safepath.write_atomic(folder / ATTEMPT_FILE, json.dumps(data, sort_keys=True).encode("utf-8"))


def recent_failure(layout: Layout, head: str, within_s: float) -> dict | None:
    """The last pull's record when it was for ``head``, did not install, and ended less than
    ``within_s`` seconds ago; None otherwise (or when there is no readable record)."""
    try:
        raw = safepath.read_bytes(layout.cogd_dir / "snapshot" / ATTEMPT_FILE, 1 << 16)
        data = json.loads(raw) if raw else None
    except (OSError, ValueError, safepath.UnsafePath):
        return None
    if not isinstance(data, dict) or data.get("head") != head or data.get("state") == "installed":
        return None
    at = data.get("at")
    return data if isinstance(at, (int, float)) and 0 <= time.time() - at < within_s else None
