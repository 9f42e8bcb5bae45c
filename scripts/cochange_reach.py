#!/usr/bin/env python3
"""How far co-change can reach on a development set: why a weight on it moves no figure.

Co-change (``cogd.history``: definitions changed together, support and confidence) can only
raise recall where a task changes two definitions or more, the pack finds one of them and
misses another, and the missed one is a co-change partner of the found one in the history
*before* the task. This script counts each of those conditions over the newest ``--last`` tasks
of the development set, and how many packs a co-change weight changes at all.

* Packs are built in this process over ``REPO/.cogd/index/index.db`` (read only; the tree at
  its own HEAD, lexical retrieval, history associations on) with co-change off; a gold
  function counts as found when the pack holds it (``name~2`` twins as ``name``).
* ``--db`` is a mined ``history.db`` of the same repository (``scripts/bench_history.py``
  leaves one; or ``REPO/.cogd/index/history.db``). The **prequential** partner test counts
  pairs over the mined commits older than the task's parent (by commit time) other than the
  task's own commit, with cogd's rules: commits over ``co_change_max_definitions`` entities
  ignored, support ≥ ``co_change_min_support``, confidence(found → missed) ≥
  ``co_change_min_confidence``. The **leaky** figure uses the live pairs at HEAD (which include
  the task's own commit): an upper bound, not a measurement.
* ``packs changed``: packs whose items or order differ from co-change off at weights 0.5, 2
  and 8 (the history at HEAD: again an upper bound on reach).

    python scripts/cochange_reach.py REPO --db HISTORY_DB [--git-dir GIT_DIR] [--last 150]

Standard library plus cogd (run it with the interpreter of cogd's environment).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _replay_tree import gold_form  # noqa: E402

DEFAULT_TASKS = Path(__file__).resolve().parent.parent.parent / "shared" / "eval-data" / "commits" / "pallets__click.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--db", type=Path, required=True, help="a mined history.db of the repository")
    parser.add_argument("--git-dir", type=Path, default=None, help="the git directory (default REPO/.git)")
    parser.add_argument("--tasks", type=Path, default=DEFAULT_TASKS)
    parser.add_argument("--last", type=int, default=150)
    args = parser.parse_args(argv)

    from cogd.config import load_config
    from cogd.history.miner import HistoryMiner
    from cogd.history.query import HistoryQueries
    from cogd.history.store import HistoryStore, live_view
    from cogd.index import store as index_store
    from cogd.retrieve.feedback import Feedback
    from cogd.retrieve.lexical import match_expression, query_terms
    from cogd.retrieve.pack import prompt_pack

    repo = args.repo.resolve()
    git_dir = args.git_dir or repo / ".git"
    config = load_config(None)
    hc = config.history
    conn = index_store.connect(repo / ".cogd" / "index" / "index.db", readonly=True)
    history = HistoryStore(args.db, readonly=True)
    miner = HistoryMiner(repo, history, hc)
    miner.view = live_view(history.reader(), miner.state_key(), hc.co_change_max_definitions)
    queries = HistoryQueries(miner, hc)
    evidence = queries.evidence()
    rows = [json.loads(line) for line in args.tasks.read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = rows[-args.last:]

    def pack(query: str, weight: float) -> list[str]:
        config.rank.co_change_weight = weight
        feedback = Feedback(config.rank, evidence=evidence,
                            history=lambda t, unwanted=None: queries.associations(
                                conn, match_expression(query_terms(t)), 60, t, 1, unwanted),
                            co_changed=lambda seeds: queries.co_changed(conn, seeds, 1))
        return [i.entity_id for i in prompt_pack(conn, repo, query, config.pack, config.retrieve, mode="bm25",
                                                 feedback=feedback).items]

    reader = history.reader()
    mined = reader.execute("SELECT hash, time FROM commits WHERE skipped IS NULL AND n_entities <= ?",
                           (hc.co_change_max_definitions,)).fetchall()
    touched: dict[str, set[str]] = collections.defaultdict(set)
    for hash_, entity_id in reader.execute(
            "SELECT t.hash, t.entity_id FROM touched t JOIN commits m ON m.hash = t.hash WHERE m.skipped IS NULL "
            "AND m.n_entities <= ? AND instr(t.entity_id, '::') > 0", (hc.co_change_max_definitions,)):
        touched[hash_].add(gold_form(entity_id))
    leaky: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for a, b, confidence in reader.execute("SELECT a, b, confidence FROM pairs"):
        leaky[gold_form(a)][gold_form(b)] = confidence

    counts = collections.Counter()
    changed = collections.Counter()
    for task in tasks:
        base = pack(task["query"], 0)
        for weight in (0.5, 2, 8):
            changed[weight] += pack(task["query"], weight) != base
        gold = set(task["gold_functions"])
        if len(gold) < 2:
            continue
        counts["two or more gold functions"] += 1
        ids = {gold_form(i) for i in base}
        found, missed = gold & ids, gold - ids
        if not (found and missed):
            continue
        counts["some found, some missed"] += 1
        counts["leaky: a missed one is a partner of a found one"] += any(
            leaky[a].get(b, 0) >= hc.co_change_min_confidence for a in found for b in missed)
        limit = int(subprocess.run(["git", f"--git-dir={git_dir}", "show", "-s", "--format=%ct", task["parent"]],
                                   capture_output=True, text=True, check=True).stdout.strip())
        support: collections.Counter = collections.Counter()
        pairs: collections.Counter = collections.Counter()
        for hash_, when in mined:
            if when > limit or hash_ == task["commit"] or len(touched.get(hash_, ())) < 2:
                continue
            for e in touched[hash_]:
                support[e] += 1
            for a, b in itertools.permutations(touched[hash_], 2):
                pairs[(a, b)] += 1
        counts["prequential: a missed one is a partner of a found one"] += any(
            pairs[(a, b)] >= hc.co_change_min_support and pairs[(a, b)] / support[a] >= hc.co_change_min_confidence
            for a in found for b in missed)
        counts["prequential: a missed one shares any earlier commit with a found one"] += any(
            pairs[(a, b)] >= 1 for a in found for b in missed)
    print(json.dumps({"tasks": len(tasks), "evidence": evidence, **counts,
                      "packs changed vs co-change off (history at HEAD)": {str(k): v for k, v in changed.items()}},
                     indent=1))
    history.close()
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
