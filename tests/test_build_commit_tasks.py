"""``scripts/build_commit_tasks.py`` on a small real git repository: a replay task per mainline
change, its gold what the history miner maps the diff onto, and the commits that make no task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_history import SHAPES_V1, commit, git_out, init_repo, write

PROJECT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT / "scripts" / "build_commit_tasks.py"
sys.path.insert(0, str(PROJECT / "scripts"))

import build_commit_tasks  # noqa: E402


def test_trailers_leave_the_query():
    message = "Scale circles exactly\n\nThe ratio was rounded.\n\nCo-authored-by: A <a@b>\nSigned-off-by: C <c@d>\n"
    assert build_commit_tasks.strip_trailers(message) == "Scale circles exactly\n\nThe ratio was rounded."
    assert build_commit_tasks.strip_trailers("Fixes: a subject that looks like one") == (
        "Fixes: a subject that looks like one")  # a one-line message stays whole


def test_each_mainline_change_is_a_task_with_the_definitions_it_changed(tmp_path):
    root = init_repo(tmp_path / "repo")
    first_parent = git_out(root, "rev-parse", "HEAD")
    write(root, "shapes.py", SHAPES_V1.replace("self.radius * factor", "self.radius * float(factor)"))
    write(root, "tests/test_shapes.py", "def test_scale():\n    assert True\n")
    scaled = commit(root, "scale circles by a float factor\n\nCo-authored-by: A <a@example.com>")
    write(root, "tests/test_shapes.py", "def test_scale():\n    assert 1\n")
    commit(root, "tighten the scale test")  # tests only: no gold file, no task
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("2 * (width + height)", "2 * (height + width)"))
    commit(root, "fix")  # too short a query
    second_parent = git_out(root, "rev-parse", "HEAD")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("return width * height", "return height * width")
          .replace("2 * (height + width)", "2 * (width + height)"))
    both = commit(root, "area and perimeter in reading order")
    out = tmp_path / "tasks.jsonl"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--git-dir", str(root / ".git"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert [t["commit"] for t in tasks] == [scaled, both]  # oldest first, the others make no task
    assert tasks[0]["parent"] == first_parent and tasks[1]["parent"] == second_parent
    assert tasks[0]["query"] == "scale circles by a float factor"
    assert tasks[0]["gold_files"] == ["shapes.py"] and tasks[0]["gold_functions"] == ["shapes.py::Circle.scale"]
    assert tasks[0]["test_files_touched"] == ["tests/test_shapes.py"]
    assert tasks[1]["gold_functions"] == ["shapes.py::area", "shapes.py::perimeter"]
    assert tasks[1]["query_mentions_gold_function"] and not tasks[0]["query_mentions_gold_file"]
    assert all(t["fold"] in range(5) and t["date"].endswith("+00:00") for t in tasks)
    # --last keeps the newest
    proc = subprocess.run([sys.executable, str(SCRIPT), "--git-dir", str(root / ".git"), "--out", str(out),
                           "--last", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["commit"] for line in out.read_text().splitlines()] == [both]
    assert git_out(root, "status", "--porcelain") == ""  # the repository was only read
