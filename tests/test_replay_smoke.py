"""End to end smoke test of ``scripts/replay_sessions.py`` on a tiny synthetic history.

Builds a four-commit git repository of a small Python package in ``tmp_path``,
a tasks file shaped like ``pallets__click.jsonl`` (one task per change), runs
the script (all three arms, ``--mode bm25``) as a subprocess with the real
daemon and the real ``cogd-hook``, and checks that it produced numbers in range
and that the ledger resolved the replayed edits of delivered gold functions as
hits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT / "scripts" / "replay_sessions.py"

GEOMETRY = '''\
"""Plane geometry helpers."""

import math


def circle_area(radius):
    """Area of a circle of the given radius."""
    return 3.14 * radius * radius


def square_area(side):
    """Area of a square."""
    return side * side


def rectangle_perimeter(width, height):
    """Perimeter of a rectangle."""
    return 2 * (width + height)
'''

TEXT = '''\
"""Text helpers: slugs and wrapping."""


def slugify(title):
    """Turn a title into a URL slug."""
    return title.lower().replace(" ", "-")


def wrap_words(text, width):
    """Wrap text into lines of at most width characters."""
    lines, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = (line + " " + word).strip()
    return lines + [line]


class Formatter:
    """Formats report headings."""

    def heading(self, title):
        """A heading underlined with equals signs."""
        return title + "\\n" + "=" * len(title)
'''

CLI = '''\
"""Command line entry point."""

from shapes.geometry import circle_area
from shapes.text import slugify


def main(argv):
    """Print the slug of the first argument and a circle area."""
    print(slugify(argv[0]), circle_area(1.0))
'''

# (message, {path: (old, new)}, gold functions) — each change edits one or two functions.
CHANGES = [
    ("Strip punctuation in slugify so slugs are URL safe",
     {"shapes/text.py": ('return title.lower().replace(" ", "-")',
                         'return "".join(c for c in title.lower() if c.isalnum() or c == " ").replace(" ", "-")')},
     ["shapes/text.py::slugify"]),
    ("Use math.pi for the circle area",
     {"shapes/geometry.py": ("return 3.14 * radius * radius", "return math.pi * radius * radius")},
     ["shapes/geometry.py::circle_area"]),
    ("Formatter heading: underline with dashes, and wrap_words keeps empty text empty",
     {"shapes/text.py": ('return title + "\\n" + "=" * len(title)', 'return title + "\\n" + "-" * len(title)')},
     ["shapes/text.py::Formatter.heading"]),
]


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=Replay Test", "-c", "user.email=replay@test",
                           "-c", "commit.gpgsign=false", *args], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _history(tmp_path: Path) -> tuple[Path, Path]:
    """The repository (its .git directory) and the tasks file."""
    repo = tmp_path / "upstream"
    (repo / "shapes").mkdir(parents=True)
    _git(repo, "init", "-q")
    files = {"shapes/__init__.py": '"""Shapes and text."""\n', "shapes/geometry.py": GEOMETRY,
             "shapes/text.py": textwrap.dedent(TEXT), "shapes/cli.py": CLI,
             "README.md": "# shapes\n\nA tiny package used to test history replays.\n"}
    for path, text in files.items():
        (repo / path).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Initial package", date="2021-03-01T10:00:00+00:00")
    tasks = []
    for n, (message, edits, gold) in enumerate(CHANGES, 1):
        parent = _git(repo, "rev-parse", "HEAD")
        for path, (old, new) in edits.items():
            text = (repo / path).read_text(encoding="utf-8")
            assert old in text, (path, old)
            (repo / path).write_text(text.replace(old, new), encoding="utf-8")
        date = f"2021-03-0{n + 1}T10:00:00+00:00"
        _git(repo, "commit", "-q", "-am", message, date=date)
        tasks.append({
            "repo": "test/shapes", "commit": _git(repo, "rev-parse", "HEAD"), "parent": parent, "date": date,
            "kind": "direct", "pr": None, "query": message, "gold_files": sorted(edits), "gold_functions": gold,
            "gold_classes": [], "gold_functions_new": [], "module_level_change_files": [], "files_added": [],
            "files_deleted": [], "test_files_touched": [], "other_files_touched": [], "hunk_headers": [],
            "lines_changed": 2, "parser": {}, "query_mentions_gold_file": False,
            "query_mentions_gold_function": any(g.rsplit(".", 1)[-1].split("::")[-1] in message for g in gold),
            "split": "dev", "fold": 0,
        })
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return repo / ".git", tasks_file


def test_replay_sessions_end_to_end(tmp_path):
    git_dir, tasks_file = _history(tmp_path)
    out = tmp_path / "replay.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--git-dir", str(git_dir), "--tasks", str(tasks_file), "--last", "0",
         "--mode", "bm25", "--block", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,  # a hang guard
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "| arm | sessions | file R | fn R | fn R@5 | hit rate | tokens/pack |" in proc.stdout
    result = json.loads(out.read_text(encoding="utf-8"))
    arms = {a["arm"]: a for a in result["arms"]}
    assert set(arms) == {"off", "on", "recency"}
    for arm in arms.values():
        assert arm["error"] is None, arm
        assert arm["git_dir_unchanged"] is True
        records = arm["records"]
        assert len(records) == len(CHANGES)
        for rec in records:
            assert rec["stdout_matches_ledger"], rec["pack"]
            assert rec["pack"]["items"], rec["query"]
            assert 0 < rec["pack"]["chars"] <= 9500
            for key in ("file_R", "fn_R", "fn_R_entity", "file_R@5", "fn_R@5", "fn_MRR"):
                assert 0.0 <= rec["metrics"][key] <= 1.0
            assert rec["agent"]["spans_found"] == len(rec["gold_functions"])  # gold spans came from the index
            assert rec["outcomes"]["tool_uses"] >= 4  # grep, 2+ distractor reads, gold read, edit
        half = result["summary"]["second_half"][arm["arm"]]
        for key in ("file_R", "fn_R", "hit_rate", "hit_rate_all"):
            assert half[key] is not None and 0.0 <= half[key] <= 100.0, (key, half)
        assert half["tokens_per_pack"] > 0
        # Lexical retrieval finds these gold files by name: recall is not an accident of the scoring.
        assert sum(r["metrics"]["file_R"] for r in records) >= 2
        # The loop closed: every gold function the prompt pack delivered was then edited, so the
        # ledger must have resolved it as a hit; nothing stays pending after SessionEnd.
        delivered_gold = [(r, g) for r in records for g in r["gold_functions"]
                          if g in {i["id"] for i in r["pack"]["items"]}]
        assert delivered_gold, "no gold function was delivered: the smoke history is too hard"
        for rec, gold in delivered_gold:
            assert gold in rec["outcomes"]["prompt_hit_ids"], (arm["arm"], gold, rec["outcomes"])
        assert sum(r["outcomes"]["prompt"]["hit"] for r in records) > 0
        assert sum(r["outcomes"]["prompt"].get("pending", 0) for r in records) == 0
