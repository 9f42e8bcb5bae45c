"""What the CLI prints in the small cases: nothing but the message when there is nothing to list."""

from __future__ import annotations

import json

from conftest import lexical_only, make_repo, run_cogd


def test_memory_list_without_matches_prints_only_the_message(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    assert run_cogd(root, "memory", "list").stdout == "no memories yet\n"
    assert run_cogd(root, "memory", "list", "--status", "active").stdout == "no memories with these filters\n"
    run_cogd(root, "memory", "add", "observation", "f returns one, always")
    assert [m["type"] for m in json.loads(run_cogd(root, "memory", "list", "--json").stdout)] == ["observation"]
    assert "no memories" not in run_cogd(root, "memory", "list").stdout  # the table, without the message
    assert run_cogd(root, "memory", "list", "--type", "rule").stdout == "no memories with these filters\n"
