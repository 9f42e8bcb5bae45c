"""``scripts/history_reach.py`` on a small real git repository: each gold function's class, and a
variant's reach, from a mined history with the live set of the task's parent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_history import SHAPES_V1, commit, git_out, init_repo, write

PROJECT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT / "scripts" / "history_reach.py"


def test_gold_functions_are_classed_by_what_keeps_them_out_of_historys_list(tmp_path):
    root = init_repo(tmp_path / "repo")
    # Earlier changes: one whose message shares the task's words (Circle.scale), one sweep whose
    # message shares none (perimeter), one that touched area after the task's parent (no leakage).
    write(root, "shapes.py", SHAPES_V1.replace("self.radius * factor", "self.radius * float(factor)"))
    commit(root, "scale circles by a float factor")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("2 * (width + height)", "2 * (height + width)"))
    commit(root, "use consistent operand order")
    parent = git_out(root, "rev-parse", "HEAD")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("self.radius * float(factor)",
                                                                        "abs(self.radius) * float(factor)"))
    task_commit = commit(root, "negative circle radius breaks scale")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("return width * height", "return height * width"))
    commit(root, "area of a circle scale")  # after the task: must not be seen
    gold = ["shapes.py::Circle.scale", "shapes.py::perimeter", "shapes.py::area"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"query": "circle scale fails for a negative radius", "parent": parent,
                                 "commit": task_commit, "gold_functions": gold, "fold": 0}) + "\n")
    # a replay's record for the task: its pack delivered Circle.scale only
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"arms": [{"arm": "full", "records": [{
        "commit": task_commit, "gold_functions": gold,
        "pack": {"items": [{"id": "shapes.py::Circle.scale", "kind": "function", "path": "shapes.py"}]}}]}]}))
    out = tmp_path / "reach.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--git-dir", str(root / ".git"), "--tasks", str(tasks),
                           "--last", "1", "--first", "1", "--replay", str(replay), "--arm", "full",
                           "--variant", "nw1:name_weight=1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    classes = {r["gold"]: (r["class"], r["missed"]) for r in json.loads(out.read_text())}
    assert classes == {"shapes.py::Circle.scale": ("in_list", False),
                       # changed before the task, but by a message sharing no word with the prompt
                       "shapes.py::perimeter": ("no_match", True),
                       # changed only after the task's parent (and added as a file before): not held
                       "shapes.py::area": ("never_changed", True)}
    assert "| no_match | 1 | 1 |" in proc.stdout and "| never_changed | 1 | 1 |" in proc.stdout
    # document expansion does not reach perimeter either: the prompt does not name it
    assert "| base | 1 of 3 | 0 of 2 |" in proc.stdout and "| nw1 | 1 of 3 | 0 of 2 |" in proc.stdout
    assert git_out(root, "status", "--porcelain") == ""  # the repository was only read


def test_a_variant_names_history_keys_typed_as_their_defaults():
    sys.path.insert(0, str(SCRIPT.parent))
    import history_reach

    assert history_reach.parse_variant("v:name_weight=1,per_commit=8,request_order=named") == (
        "v", {"name_weight": 1.0, "per_commit": 8, "request_order": "named"})
    for bad in ("novariant", "v:name_weight", "v:no_such_key=1"):
        with pytest.raises(ValueError):
            history_reach.parse_variant(bad)
