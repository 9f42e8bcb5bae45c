#!/usr/bin/env python3
"""The cost of history (cogd.history): mining a repository, and what it adds to one prompt pack.

1. **Mining**: a fresh ``history.db`` in a temporary folder (the repository is only read: git
   runs in it, ``.cogd/`` is not touched), one :meth:`HistoryMiner.sync` pass over the newest
   ``--max-commits`` commits reachable from HEAD; prints wall and CPU seconds, commits mined
   and skipped by reason, and the process's peak resident size (``ru_maxrss``, which includes
   the interpreter and tree-sitter: the miner's own share is the rise over the start).
2. **Per pack** (with ``--index``, the repository's ``.cogd/index/index.db``, read only): for
   each prompt (``--prompts FILE``, one a line; default ten about click), the pack is built
   ``--rounds`` times in this process with history off and with it on, interleaved, and the
   median time of each and of the history part alone (associations, their commit labels and the
   co-change lookups) is printed, in wall time and in this thread's CPU time (on a loaded
   machine the CPU time is the steadier figure): the hook's added latency is the difference.
   History on is timed twice, interleaved: through the miner's in-memory view of the live set
   (what the daemon does; keys without a suffix) and without it (``_sql``: the joins over the
   projection per request that the view replaced), so the two are compared under one load.
3. **The first pack after a pass** (with ``--index``): the file prior's counts (``[rank]
   history_file_prior``, :meth:`HistoryQueries.file_changes`) are read once per state of the
   live set; each round builds a fresh reader, as after a mining pass, and times that first
   pack (hybrid of history on, ``bm25`` mode) three ways, interleaved: the counts already in
   the pass's view (``first_pack_view_counts``: what the miner leaves since it counts them at
   the end of its pass), counted by the request from the view's rows (``…_view_rows``: a pass
   that could not read the index), and counted by the request through SQL
   (``…_sql_rows``: the code before the counts moved into the view). ``prior_count_*`` is the
   counting alone, and ``pass_end_count_ms`` what the miner's pass spends on it instead.

    python scripts/bench_history.py REPO [--max-commits 3000] [--index] [--rounds 30]

Standard library plus cogd (run it with the interpreter of cogd's environment).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = (
    "progress bar shows the wrong eta when the iterable has no length",
    "show_default should display the default of a flag option",
    "shell completion for nested groups does not list subcommands",
    "make the prompt function hide input when asked for a password",
    "echo strips ANSI colours when the output is not a terminal",
    "Path type should resolve symlinks when resolve_path is set",
    "the help output wraps long option names badly",
    "environment variables for options with multiple values are split wrongly",
    "testing CliRunner isolates stdin and stdout",
    "Choice type should be case insensitive",
)


def mine(repo: Path, max_commits: int) -> tuple[Path, dict]:
    from cogd.config import HistoryConfig
    from cogd.history.miner import HistoryMiner
    from cogd.history.store import HistoryStore, status

    folder = Path(tempfile.mkdtemp(prefix="cogd-bench-history-"))
    db = folder / ".cogd" / "index" / "history.db"
    db.parent.mkdir(parents=True)
    os.chmod(folder / ".cogd", 0o700)
    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu0, t0 = time.process_time(), time.perf_counter()
    store = HistoryStore(db)
    miner = HistoryMiner(repo, store, HistoryConfig(max_commits=max_commits))
    miner.sync()
    figures = {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - cpu0, 2),
               "rss_before_mb": round(before_rss, 1),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               **{k: v for k, v in status(store.reader()).items() if k in ("commits", "mined", "skipped", "pairs")}}
    store.close()
    return db, figures


def per_pack(repo: Path, db: Path, prompts: list[str], rounds: int) -> dict:
    from cogd.config import load_config
    from cogd.history.miner import HistoryMiner
    from cogd.history.query import HistoryQueries
    from cogd.history.store import HistoryStore
    from cogd.index import store as index_store
    from cogd.retrieve.feedback import Feedback
    from cogd.retrieve.lexical import match_expression, query_terms
    from cogd.retrieve.pack import prompt_pack

    config = load_config(None)
    conn = index_store.connect(repo / ".cogd" / "index" / "index.db", readonly=True)
    history = HistoryStore(db)
    miner = HistoryMiner(repo, history, config.history)
    miner.sync()  # already mined: synchronises the live flags only
    queries = HistoryQueries(miner, config.history)
    view = miner.view  # the live set in memory, as the daemon's miner leaves it after a pass
    timed: dict[str, dict[str, list[float]]] = {v: {"part": [], "part_cpu": [], "on": [], "on_cpu": []}
                                                for v in ("view", "sql")}

    def sources(lists: dict[str, list[float]]):
        def assoc(text, tests_unwanted=None):
            t, c = time.perf_counter(), time.thread_time()
            terms = query_terms(text)
            found = queries.associations(conn, match_expression(terms), 60, text, 1, tests_unwanted, terms)
            queries.subjects(list({h for a in found[:20] for h in a.commits[:3]}))
            lists["part"].append(time.perf_counter() - t)
            lists["part_cpu"].append(time.thread_time() - c)
            return found

        def co(seeds):
            t, c = time.perf_counter(), time.thread_time()
            out = queries.co_changed(conn, seeds, 1)
            lists["part"][-1] += time.perf_counter() - t  # one request's history part: both reads
            lists["part_cpu"][-1] += time.thread_time() - c
            return out
        return assoc, co

    off, off_cpu = [], []
    for _ in range(rounds):
        for prompt in prompts:
            t, c = time.perf_counter(), time.thread_time()
            prompt_pack(conn, repo, prompt, config.pack, config.retrieve, mode="bm25",
                        feedback=Feedback(config.rank))
            off.append(time.perf_counter() - t)
            off_cpu.append(time.thread_time() - c)
            # history on, read through the in-memory view and without it (SQL joins per request,
            # as before the view), interleaved so both see the same load
            for variant in ("view", "sql"):
                miner.view = view if variant == "view" else None
                lists = timed[variant]
                assoc, co = sources(lists)
                t, c = time.perf_counter(), time.thread_time()
                prompt_pack(conn, repo, prompt, config.pack, config.retrieve, mode="bm25",
                            feedback=Feedback(config.rank, history=assoc, co_changed=co, evidence=queries.evidence()))
                lists["on"].append(time.perf_counter() - t)
                lists["on_cpu"].append(time.thread_time() - c)
    miner.view = view
    first = first_pack_after_a_pass(repo, conn, miner, prompts, max(3, rounds // 3))
    history.close()
    conn.close()

    def p50(values: list[float]) -> float:
        return round(1000 * statistics.median(values), 2)

    out = {"pack_off_p50_ms": p50(off), "pack_off_cpu_p50_ms": p50(off_cpu), "packs": len(off)}
    for variant, lists in timed.items():
        suffix = "" if variant == "view" else "_sql"
        out.update({f"pack_on_p50_ms{suffix}": p50(lists["on"]), f"pack_on_cpu_p50_ms{suffix}": p50(lists["on_cpu"]),
                    f"history_part_p50_ms{suffix}": p50(lists["part"]),
                    f"history_part_p95_ms{suffix}": round(1000 * sorted(lists["part"])[int(0.95 * (len(lists["part"]) - 1))], 2),
                    f"history_part_cpu_p50_ms{suffix}": p50(lists["part_cpu"])})
    out.update(first)
    return out


def first_pack_after_a_pass(repo: Path, conn, miner, prompts: list[str], rounds: int) -> dict:
    """Section 3 of the module doc: the first pack after a pass with the file prior's counts in
    the view, counted from the view's rows, or counted through SQL; interleaved per prompt."""
    import dataclasses

    from cogd.config import load_config
    from cogd.history import store
    from cogd.history.query import HistoryQueries
    from cogd.retrieve.feedback import Feedback
    from cogd.retrieve.lexical import match_expression, query_terms
    from cogd.retrieve.pack import prompt_pack

    config = load_config(None)
    view = miner.view
    t = time.perf_counter()
    counted = store.file_changes(conn, view.touched_rows())
    pass_end = time.perf_counter() - t
    with_counts = dataclasses.replace(view, file_changes=counted)
    without = dataclasses.replace(view, file_changes=None)
    timed = {v: {"pack": [], "pack_cpu": [], "count": [], "count_cpu": []}
             for v in ("view_counts", "view_rows", "sql_rows")}
    for _ in range(rounds):
        for prompt in prompts:
            for variant, lists in timed.items():
                miner.view = with_counts if variant == "view_counts" else without
                queries = HistoryQueries(miner, config.history)  # a fresh reader: nothing cached yet
                if variant == "sql_rows":  # the counting as it was: its rows read by SQL per request
                    def by_sql(index_conn, index_version=None, queries=queries):
                        return store.file_changes(index_conn, store.touched_rows(miner.store.reader()),
                                                  lambda ids: queries._current(index_conn, ids, index_version))
                    counter = by_sql
                else:
                    counter = queries.file_changes

                def changes(counter=counter, lists=lists):
                    t, c = time.perf_counter(), time.thread_time()
                    found = counter(conn, 1)
                    lists["count"].append(time.perf_counter() - t)
                    lists["count_cpu"].append(time.thread_time() - c)
                    return found

                def assoc(text, tests_unwanted=None, queries=queries):
                    return queries.associations(conn, match_expression(query_terms(text)), 60, text, 1,
                                                tests_unwanted)

                t, c = time.perf_counter(), time.thread_time()
                prompt_pack(conn, repo, prompt, config.pack, config.retrieve, mode="bm25",
                            feedback=Feedback(config.rank, history=assoc,
                                              co_changed=lambda seeds, q=queries: q.co_changed(conn, seeds, 1),
                                              evidence=queries.evidence(), file_changes=changes))
                lists["pack"].append(time.perf_counter() - t)
                lists["pack_cpu"].append(time.thread_time() - c)
    miner.view = view

    def p50(values: list[float]) -> float:
        return round(1000 * statistics.median(values), 2)

    out = {"pass_end_count_ms": round(1000 * pass_end, 2), "first_packs": len(timed["view_counts"]["pack"]),
           "prior_files": len(counted)}
    for variant, lists in timed.items():
        out.update({f"first_pack_p50_ms_{variant}": p50(lists["pack"]),
                    f"first_pack_cpu_p50_ms_{variant}": p50(lists["pack_cpu"]),
                    f"prior_count_p50_ms_{variant}": p50(lists["count"]),
                    f"prior_count_cpu_p50_ms_{variant}": p50(lists["count_cpu"])})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--max-commits", type=int, default=3000)
    parser.add_argument("--index", action="store_true", help="also time packs over REPO/.cogd/index/index.db")
    parser.add_argument("--prompts", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--db", type=Path, default=None, help="an already mined history.db: skip the mining step")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    db, figures = mine(repo, args.max_commits) if args.db is None else (args.db, {})
    out = {"repo": str(repo), "load": os.getloadavg()[0], "mining": figures}
    if args.index:
        prompts = (args.prompts.read_text(encoding="utf-8").splitlines() if args.prompts else list(PROMPTS))
        out["per_pack"] = per_pack(repo, db, [p for p in prompts if p.strip()], args.rounds)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
