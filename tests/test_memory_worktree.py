"""A git worktree has its own memory: cogd says how many of its memory files git does not hold yet.

Real ``git worktree add``, a memory recorded in the worktree through the real CLI and a real
daemon; ``cogd status``, ``cogd doctor`` and the session-start pack (through the real hook) name
the exact count and the command to commit, and say nothing once the memory is committed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import HOOK_DEADLINE_MS, git, lexical_only, make_repo, payload, run_cogd, run_hook, wait_for
from cogd.memory.gitstate import COMMIT_HINT, count_uncommitted

SMALL = {"pkg/mod.py": "def alpha():\n    return 1\n\n\ndef beta():\n    return alpha()\n"}


def _uncommitted(root: Path) -> dict:
    return json.loads(run_cogd(root, "status", "--json").stdout)["memory"]["uncommitted"]


def _wait_count(root: Path, want: int, timeout: float = 60) -> dict:
    """Poll ``cogd status`` until the daemon's cached count is ``want`` (refreshed by its housekeeping)."""
    return wait_for(lambda: (got := _uncommitted(root)).get("count") == want and got, timeout,
                    f"{want} uncommitted memory files in the status")


def _session_start(root: Path, session: str) -> str:
    # the content is the point here, so a busy machine must not turn the pack into an empty answer
    proc, _ = run_hook("session-start", payload("session_start.startup.json", root, session_id=session),
                       deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


def _doctor(root: Path) -> dict:
    report = json.loads(run_cogd(root, "doctor", "--json", "--no-model-load", check=False).stdout)
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture
def worktree(tmp_path):
    main = lexical_only(make_repo(tmp_path / "repo", SMALL, commit=False))
    git(main, "add", "-A")
    git(main, "commit", "-q", "-m", "initial")
    feat = tmp_path / "repo-feat"
    git(main, "worktree", "add", "-q", "-b", "feat", str(feat))
    yield main, feat
    run_cogd(feat, "stop", check=False)
    run_cogd(main, "stop", check=False)


def test_worktree_memory_not_in_git_is_counted_until_committed(worktree):
    main, feat = worktree
    assert (feat / ".cogd" / "config.toml").is_file()  # the config came with the checkout
    run_cogd(feat, "start")
    run_cogd(feat, "memory", "add", "observation", "alpha returns 1 and beta returns alpha()")
    run_cogd(feat, "memory", "add", "rule", "keep alpha pure: no I/O in pkg/mod.py")

    got = _wait_count(feat, 2)
    assert got["count"] == 2 and got["error"] is None
    assert all(p.startswith(".cogd/memory/") and p.endswith(".md") for p in got["paths"])
    status_text = run_cogd(feat, "status").stdout
    assert "2 memory files not committed to git" in " ".join(status_text.split())
    assert COMMIT_HINT in " ".join(status_text.split())

    pack = _session_start(feat, "wt-1")
    note = f"2 memory files in this checkout are not committed to git (lost if this worktree is removed): {COMMIT_HINT}"
    assert [line for line in pack.splitlines() if "not committed to git" in line] == [f"**cogd:** {note}"]

    checks = _doctor(feat)
    assert checks["memory in git"]["status"] == "warn"
    assert checks["memory in git"]["details"]["count"] == 2
    assert checks["memory in git"]["fix"] == COMMIT_HINT
    assert checks["memory files"]["status"] == "ok"

    # the main checkout has its own memory: nothing of the worktree's, nothing uncommitted
    assert count_uncommitted(main)["count"] == 0
    assert not list((main / ".cogd" / "memory").glob("*/*.md"))

    git(feat, "add", ".cogd/memory")
    git(feat, "commit", "-q", "-m", "cogd memory")
    got = _wait_count(feat, 0)
    assert got["count"] == 0
    assert "not committed to git" not in _session_start(feat, "wt-2")
    checks = _doctor(feat)
    assert checks["memory in git"]["status"] == "ok" and checks["memory in git"]["details"]["count"] == 0

    # a hand-modified committed memory file counts again (modified, not only untracked)
    record = next((feat / ".cogd" / "memory" / "rules").glob("*.md"))
    record.write_text(record.read_text(encoding="utf-8") + "\nalso: no globals\n", encoding="utf-8")
    assert _wait_count(feat, 1)["count"] == 1
