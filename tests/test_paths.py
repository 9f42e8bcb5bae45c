"""Where cogd's files live, and which of them git is meant to see (``.cogd/.gitignore``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import make_repo, run_cogd, write

from cogd.paths import GITIGNORE_TEXT, OLD_GITIGNORE_TEXTS, Layout

FOR_GIT = [".cogd/.gitignore", ".cogd/config.toml", ".cogd/memory/rules/01ARZ3NDEKTSV4RRFFQ69G5FAV.md",
           ".cogd/queries/python/tags.scm"]
LOCAL_ONLY = [".cogd/state.db", ".cogd/index/index.db", ".cogd/run/daemon.pid", ".cogd/logs/daemon.log",
              ".cogd/memory.db", ".cogd/vectors/x.lance"]


def ignored(root: Path, paths: list[str]) -> set[str]:
    """The ``paths`` (relative to ``root``) that git itself says it ignores (``git check-ignore``)."""
    proc = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=root, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr  # 1: none ignored
    return set(proc.stdout.split())


def test_git_commits_the_records_the_config_and_query_overrides_and_ignores_the_rest(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})
    Layout(root).ensure()
    assert (root / ".cogd" / ".gitignore").read_text(encoding="utf-8") == GITIGNORE_TEXT
    for rel in FOR_GIT[1:] + LOCAL_ONLY:
        write(root, rel, "x\n")
    assert ignored(root, FOR_GIT + LOCAL_ONLY) == set(LOCAL_ONLY)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=root, capture_output=True,
                            text=True, check=True).stdout.split()
    assert sorted(staged) == sorted(FOR_GIT)


def test_a_gitignore_an_earlier_cogd_wrote_is_brought_up_to_date_and_a_users_is_left_alone(tmp_path):
    old = make_repo(tmp_path / "old")
    write(old, ".cogd/.gitignore", OLD_GITIGNORE_TEXTS[0])
    write(old, ".cogd/queries/python/tags.scm", "(x)\n")
    assert ignored(old, [".cogd/queries/python/tags.scm"]) == {".cogd/queries/python/tags.scm"}  # the bug
    Layout(old).ensure()
    assert (old / ".cogd" / ".gitignore").read_text(encoding="utf-8") == GITIGNORE_TEXT
    assert ignored(old, [".cogd/queries/python/tags.scm"]) == set()

    mine = make_repo(tmp_path / "mine")
    edited = OLD_GITIGNORE_TEXTS[0] + "!notes.txt\n"
    write(mine, ".cogd/.gitignore", edited)
    Layout(mine).ensure()
    assert (mine / ".cogd" / ".gitignore").read_text(encoding="utf-8") == edited


def test_stop_in_a_repository_that_never_ran_cogd_creates_nothing(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})
    proc = run_cogd(root, "stop", check=False)
    assert (proc.returncode, proc.stdout.strip()) == (0, "no daemon running")
    assert not (root / ".cogd").exists()
