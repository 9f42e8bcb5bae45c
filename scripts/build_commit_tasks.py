#!/usr/bin/env python3
"""Build a replay task file (the development set's commit format) from another repository's history.

``replay_sessions.py`` replays a stream of tasks, each one mainline change of a repository:
its message as the prompt, its parent as the tree, the files and functions it changed as the
gold. The development set holds such a stream for one repository only; this script builds one
for any git directory so a default chosen there can be checked on a second stream.

How a task is made (a simpler cousin of the development set's rules, so figures are comparable
between arms on one stream, not with the development set's own):

* the candidates are the first-parent commits of HEAD with exactly one parent (a project that
  squashes its pull requests lands each one as such a commit), newest ``--scan`` of them;
* the gold is what cogd's own history miner maps the commit's diff onto
  (:class:`cogd.history.miner.HistoryMiner`: each changed line of the parent's file to the
  innermost definition spanning it, ids as the index gives them at the parent): ``gold_files``
  the files other than tests (``hybrid.is_test_path``) and documentation (``docs/``, ``doc/``)
  that held a touched definition, ``gold_functions`` the touched functions and methods of those
  files (their kind read by cogd's extractor from the parent's blob); a commit the miner skips
  (bot, version bump, mass change, no code) or with no gold file is no task;
* ``query`` is the message without its trailer lines (``Co-authored-by:``, ``Signed-off-by:`` …);
  a query of fewer than ``--min-words`` words is no task;
* ``fold`` (0–4) is the commit hash's BLAKE2b modulo 5, ``date`` the committer time (ISO 8601).

The newest ``--last`` tasks are written oldest first, one JSON object a line.

    python scripts/build_commit_tasks.py --git-dir DIR --out tasks.jsonl [--last 150] [--scan 600]

Nothing is written into the git directory (the miner reads a scratch tree that borrows its
objects, ``_replay_tree.ScratchTree``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _replay_tree import ScratchTree, clean_env  # noqa: E402

_TRAILER = re.compile(r"^[A-Za-z][A-Za-z-]*(?:-[Bb]y|-[Tt]o)?:\s+\S")
_DOCS = re.compile(r"(^|/)docs?/")


def strip_trailers(message: str) -> str:
    """``message`` without its final block of ``Key: value`` trailer lines (``Co-authored-by:``…)."""
    lines = message.rstrip().splitlines()
    end = len(lines)
    while end > 1 and _TRAILER.match(lines[end - 1]):
        end -= 1
    return "\n".join(lines[:end]).strip()


def definition_kinds(git_dir: Path, parent: str, path: str) -> dict[str, str]:
    """``{entity id: kind}`` of the definitions of ``path`` at ``parent`` ({} when it cannot be parsed)."""
    from cogd.index.extract import definitions
    from cogd.index.languages import language_for_path

    language = language_for_path(path)
    if language is None:
        return {}
    blob = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "blob", f"{parent}:{path}"],
                          capture_output=True, env=clean_env())
    if blob.returncode != 0:
        return {}
    try:
        return {e.id: e.kind for e in definitions(path, blob.stdout, language)}
    except Exception:  # noqa: BLE001 — an unparsable file gives no kinds; its task keeps its files
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--last", type=int, default=150, help="tasks kept, the newest (default 150)")
    parser.add_argument("--scan", type=int, default=600, help="first-parent commits looked at (default 600)")
    parser.add_argument("--min-words", type=int, default=3, help="shorter queries make no task (default 3)")
    args = parser.parse_args(argv)

    from cogd.config import HistoryConfig
    from cogd.history.miner import HistoryMiner
    from cogd.history.store import HistoryStore
    from cogd.retrieve.hybrid import is_test_path

    git_dir = args.git_dir.resolve()
    env = clean_env()
    head = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True, env=env).stdout.strip()
    mainline = subprocess.run(["git", f"--git-dir={git_dir}", "rev-list", "--first-parent", "--parents",
                               f"--max-count={args.scan}", head], capture_output=True, text=True, check=True,
                              env=env).stdout.splitlines()
    single = [line.split() for line in mainline if len(line.split()) == 2]
    config = HistoryConfig()  # the newest 3,000 commits reachable from HEAD, as a daemon mines them
    tasks = []
    with tempfile.TemporaryDirectory(prefix="cogd-tasks-") as scratch:
        tree = ScratchTree(git_dir, Path(scratch))
        tree.move(head)
        (tree.root / ".cogd" / "index").mkdir(parents=True)
        store = HistoryStore(tree.root / ".cogd" / "index" / "history.db")
        try:
            print("mining:", HistoryMiner(tree.root, store, config).sync(), file=sys.stderr)
            conn = store.reader()
            for commit, parent in single:
                row = conn.execute("SELECT time, message, skipped FROM commits WHERE hash = ?", (commit,)).fetchone()
                if row is None or row[2] is not None:
                    continue
                query = strip_trailers(row[1])
                if len(query.split()) < args.min_words:
                    continue
                touched = conn.execute("SELECT entity_id, path FROM touched WHERE hash = ?", (commit,)).fetchall()
                files = sorted({path for _e, path in touched if not is_test_path(path) and not _DOCS.search(path)})
                functions = []
                for path in files:
                    kinds = definition_kinds(git_dir, parent, path)
                    functions += sorted(e for e, p in touched if p == path and kinds.get(e) in ("function", "method"))
                files = [f for f in files if any(e for e, p in touched if p == f and "::" in e) or
                         subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{parent}:{f}"],
                                        stderr=subprocess.DEVNULL, env=env).returncode == 0]
                if not files:
                    continue
                names = {f.split("::", 1)[1].split(".")[-1] for f in functions}
                lower = query.lower()
                tasks.append({
                    "repo": git_dir.parent.name, "commit": commit, "parent": parent,
                    "date": dt.datetime.fromtimestamp(row[0], dt.timezone.utc).isoformat(), "kind": "first-parent",
                    "query": query, "gold_files": files, "gold_functions": functions,
                    "test_files_touched": sorted({p for _e, p in touched if is_test_path(p)}),
                    "query_mentions_gold_file": any(Path(f).name.lower() in lower for f in files),
                    "query_mentions_gold_function": any(re.search(rf"\b{re.escape(n.lower())}\b", lower) for n in names),
                    "split": "dev", "fold": int(hashlib.blake2b(commit.encode(), digest_size=8).hexdigest(), 16) % 5,
                })
                if len(tasks) >= args.last:
                    break
        finally:
            store.close()
    tasks.reverse()  # oldest first: the replay order
    args.out.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    print(f"{len(tasks)} tasks ({sum(bool(t['gold_functions']) for t in tasks)} with gold functions) "
          f"-> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
