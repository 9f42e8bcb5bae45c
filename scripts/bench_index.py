#!/usr/bin/env python3
"""Benchmark cogd's full and incremental indexing against universal-ctags.

What it measures
----------------
The tree is a temporary git repository holding a copy of the running
interpreter's whole standard library (``sysconfig.get_paths()["stdlib"]``,
without ``__pycache__`` and ``site-packages``), committed once.

Full index, ``--rounds`` rounds (default 3), the three runs of a round
interleaved so that load drift hits them alike:

* cogd, parallel: what the daemon runs, a fresh index database each round; a
  child process (``python scripts/bench_index.py --child-index REPO DB N``)
  imports cogd, starts the daemon's parse pool (``N`` =
  ``cogd.index.parsepool.worker_count(0)`` parser processes: one per core),
  runs ``Indexer(REPO, DB, pool=...).refresh()`` and reports the refresh's own
  time, the file and entity counts and its peak RSS (``ru_maxrss`` of itself).
  The wall time is taken around the whole child process, start-up, imports
  and the pool's start included, as for ctags; its CPU time (user + system of
  the child and its parser processes) is printed too;
* cogd, serial (the baseline): the same with ``N`` = 0, parsing in the
  child's own thread, as ``Indexer(REPO, DB)`` without a pool does;
* ctags: ``ctags -R --fields=+n --languages=LIST -f TAGS .`` in the same
  tree, a fresh tags file each round. LIST names the languages cogd parses
  (``cogd.index.languages.LANGUAGES``, mapped to ctags' names), so both read
  the same files.

Printed: the median wall time of each, the load average (1 minute) before
every run, the ratio parallel/serial and cogd/ctags (process wall times; the
refresh's own time is shown too), files/s and entities/s of
cogd (on its process wall time), cogd's peak RSS. The two cogd runs must give
the same index (counts compared; ``tests/test_index_parallel.py`` compares
every row).

Incremental, ``--edits`` rounds (default 50) in this process, on an index
built beforehand (untimed): each round rewrites one real file
(``--edit-file``, default ``collections/__init__.py``) with a new function
appended, then times

* ``Indexer.refresh(paths=[that file])`` — what a save event costs, parsing
  in this thread;
* the same through the daemon's parse pool (:func:`daemon_pool`: the file
  goes to the pool's save lane and back: what the daemon's save costs);
* in a third series, ``Indexer.refresh()`` — the whole-tree stat refresh
  that runs before a context pack, with the same kind of edit.

Printed: p50 and p95 (nearest rank) in milliseconds of each series.

Where the full index's time goes, one serial refresh in this process with
timers around each stage (CPU seconds of this thread, exclusive of the
stages nested in them, so that other processes' load counts less): the
tree-sitter parse, the tags query, the reference (imports, inherits) queries
(both one query since they run as one walk: reported together then),
extraction (definitions, calls, summaries: Python), the SQLite writes of the
parsed files, their FTS5 rows, call resolution, commits, and the rest (listing,
reading, hashing). ``--no-stages`` skips it.

Goals reported: full lexical index (parallel, process wall) <= 6 s; one-file
incremental (``refresh(paths=[file])``) p95 <= 50 ms. The temporary directory is removed
at the end unless ``--keep``.

How to run
----------
    /tmp/venv/bin/python scripts/bench_index.py [--rounds 3] [--edits 50]

``--incremental-only`` times only the one-file saves (in child processes, rounds of 10,
wall and CPU time of the saving thread), each through the parse pool the daemon of that version
builds (``cogd.daemon.worker.parse_pool`` where it exists: saves parse in its save lane), as the
daemon's index worker runs a watcher's save, or with ``--in-process-saves`` in the saving thread; ``--baseline-src DIR`` does the same for another
version's checkout too (``git worktree add DIR COMMIT``), alternating with this one, each on
its own index: before/after in the same run. Without ``--incremental-only``, ``--baseline-src``
also runs that checkout's full index in every round (parallel and serial, the order of the
versions alternating between rounds; ratios this/baseline of wall and CPU printed), prints the
stage table of both versions side by side (each in a child process), and times the saves as
``--incremental-only`` does instead of the in-process incremental series.

Other options: ``--ctags PATH`` (default ``/usr/bin/ctags``, then ``ctags``
on PATH), ``--workers N`` (parser processes of the parallel run), ``--edit-file REL``,
``--no-stages``, ``--keep``. Standard library and cogd only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

GOAL_FULL_S = 6.0
GOAL_INCREMENTAL_P95_MS = 50.0
# cogd language name -> ctags language name
CTAGS_NAMES = {
    "python": "Python", "javascript": "JavaScript", "typescript": "TypeScript", "tsx": "TypeScript",
    "go": "Go", "rust": "Rust", "java": "Java", "c": "C", "cpp": "C++", "csharp": "C#", "ruby": "Ruby",
    "php": "PHP", "kotlin": "Kotlin", "bash": "Sh",
}


def ctags_languages() -> str:
    """The ctags ``--languages`` list for the languages cogd parses."""
    from cogd.index.languages import LANGUAGES

    names = sorted({CTAGS_NAMES[name] for name in LANGUAGES if name in CTAGS_NAMES})
    missing = sorted(name for name in LANGUAGES if name not in CTAGS_NAMES)
    if missing:
        print(f"  (no ctags name known for {', '.join(missing)}: ctags skips those files)")
    return ",".join(names)


def child_index(repo: Path, db: Path, workers: int) -> None:
    """Run one full index in this (child) process and print its numbers as JSON.

    ``workers`` parser processes (the daemon's pool), or 0: parse in this thread.
    """
    from cogd.index import languages, store
    from cogd.index.indexer import Indexer, parse_rows_job, timeout_rows
    from cogd.index.parsepool import ParsePool

    started = time.perf_counter()
    pool = None
    if workers:
        overrides = languages.configure(repo)
        pool = ParsePool(workers, parse_rows_job, timeout_rows, languages.configure, (str(repo), overrides))
    ix = Indexer(repo, db, pool=pool)
    result = ix.refresh()
    elapsed = time.perf_counter() - started
    counts = store.counts(ix.conn)
    ix.close()
    if pool is not None:
        pool.close()
    print(json.dumps({
        "refresh_s": elapsed, "files": counts["files"], "entities": counts["entities"], "edges": counts.get("edges"),
        "skipped": result.skipped, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }))


def children_cpu() -> float:
    """User + system CPU seconds of every waited-for child process so far (their own children included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load1() -> float:
    return os.getloadavg()[0]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def make_tree(dest: Path) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(stdlib, dest, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc"))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "standard library")
    return dest


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


def find_ctags(option: str | None) -> str:
    for candidate in (option, "/usr/bin/ctags", shutil.which("ctags")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("universal-ctags not found (give --ctags PATH)")


def run_cogd(repo: Path, db: Path, workers: int, src: Path | None = None) -> dict:
    """One child-process full index (see :func:`child_index`): its JSON plus wall, CPU and load before.

    ``src``: a checkout whose ``cogd`` package the child imports (``PYTHONPATH``); None: this one."""
    load = load1()
    cpu = children_cpu()
    env = {**os.environ, "PYTHONPATH": str(src if src is not None else Path(__file__).resolve().parent.parent)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child-index", str(repo), str(db), str(workers)],
                          capture_output=True, text=True, check=True, env=env)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    info.update(wall=time.perf_counter() - started, cpu=children_cpu() - cpu, load=load)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return info


def run_full(repo: Path, work: Path, ctags: str, rounds: int, workers: int, baseline: Path | None = None) -> dict:
    """``rounds`` rounds of the full index: cogd parallel and serial (and, with ``baseline``, the
    same for that checkout, the order of the versions alternating between rounds), then ctags."""
    languages = ctags_languages()
    print(f"  ctags --languages={languages}")
    runs: dict[str, list[dict]] = {"parallel": [], "serial": []}
    if baseline is not None:
        runs.update({"baseline parallel": [], "baseline serial": []})
    ctags_wall, ctags_load = [], []
    tag_lines = 0
    for r in range(rounds):
        plan = [("parallel", workers, None), ("serial", 0, None)]
        if baseline is not None:
            other = [("baseline parallel", workers, baseline), ("baseline serial", 0, baseline)]
            plan = plan + other if r % 2 == 0 else other + plan
        for name, n, src in plan:
            runs[name].append(run_cogd(repo, work / f"full-{name.replace(' ', '-')}-{r}.db", n, src))
        tags = work / f"tags-{r}"
        ctags_load.append(load1())
        started = time.perf_counter()
        subprocess.run([ctags, "-R", "--fields=+n", f"--languages={languages}", "-f", str(tags), "."],
                       cwd=repo, check=True, capture_output=True)
        ctags_wall.append(time.perf_counter() - started)
        with open(tags, encoding="utf-8", errors="replace") as fh:
            tag_lines = sum(1 for line in fh if not line.startswith("!_"))
        tags.unlink()
        par, ser = runs["parallel"][-1], runs["serial"][-1]
        if baseline is not None:
            bpar, bser = runs["baseline parallel"][-1], runs["baseline serial"][-1]
            print(f"  round {r + 1}: baseline parallel {bpar['wall']:.2f} s (cpu {bpar['cpu']:.1f} s, load "
                  f"{bpar['load']:.1f}), baseline serial {bser['wall']:.2f} s (cpu {bser['cpu']:.1f} s, load "
                  f"{bser['load']:.1f})", flush=True)
        print(f"  round {r + 1}: parallel {par['wall']:.2f} s (refresh {par['refresh_s']:.2f} s, cpu {par['cpu']:.1f} s, "
              f"load {par['load']:.1f}), serial {ser['wall']:.2f} s (refresh {ser['refresh_s']:.2f} s, "
              f"cpu {ser['cpu']:.1f} s, load {ser['load']:.1f}), ctags {ctags_wall[-1]:.2f} s "
              f"(load {ctags_load[-1]:.1f})", flush=True)
    for key in ("files", "entities", "edges", "skipped"):
        values = {json.dumps(run[key], sort_keys=True) for series in runs.values() for run in series}
        if len(values) != 1:
            raise SystemExit(f"the indexes of the runs differ in {key}: {sorted(values)}")
    first = runs["parallel"][0]
    out = {"ctags_wall": statistics.median(ctags_wall), "files": first["files"], "entities": first["entities"],
           "edges": first["edges"], "skipped": first["skipped"], "tags": tag_lines, "workers": workers}
    for name, series in runs.items():
        out[name] = {key: statistics.median(run[key] for run in series) for key in ("wall", "refresh_s", "cpu", "load")}
        out[name]["rss_kb"] = max(run["maxrss_kb"] for run in series)
    return out


def run_incremental(repo: Path, work: Path, rel: str, edits: int, workers: int) -> dict:
    from cogd.index.indexer import Indexer

    path = repo / rel
    original = path.read_text(encoding="utf-8")
    pool = daemon_pool(repo)
    ix = Indexer(repo, work / "incremental.db")
    try:
        ix.refresh()  # the index a save event finds: built, untimed
        series: dict[str, list[float]] = {"paths": [], "pool": [], "tree": []}
        for name in series:
            ix.pool = pool if name == "pool" else None
            if name == "pool":  # the workers and the save lane started, untimed
                pool.map([(rel, original.encode(), ix.limits)] * workers, 60.0)
                path.write_text(original + "\n\ndef _bench_warm():\n    return 0\n", encoding="utf-8")
                ix.refresh(paths=[rel])
            for i in range(edits):
                path.write_text(original + f"\n\ndef _bench_probe_{name}_{i}():\n    return {i}\n", encoding="utf-8")
                started = time.perf_counter()
                result = ix.refresh() if name == "tree" else ix.refresh(paths=[rel])
                series[name].append((time.perf_counter() - started) * 1000)
                if result.parsed != 1:
                    raise SystemExit(f"edit {i} ({name}) re-parsed {result.parsed} files, expected 1")
            probe = f"{rel}::_bench_probe_{name}_{edits - 1}"
            if not ix.conn.execute("SELECT 1 FROM entities WHERE id = ?", (probe,)).fetchone():
                raise SystemExit(f"the last edit is not in the index: {probe}")
        files = ix.conn.execute("SELECT count(*) FROM files").fetchone()[0]
    finally:
        path.write_text(original, encoding="utf-8")
        ix.close()
        pool.close()
    return {
        "size": len(original.encode()), "files": files,
        **{f"{name}_p50": percentile(v, 50) for name, v in series.items()},
        **{f"{name}_p95": percentile(v, 95) for name, v in series.items()},
    }


def daemon_pool(repo: Path):
    """The parse pool the daemon of the imported cogd version would run for ``repo``: its own
    constructor (``cogd.daemon.worker.parse_pool``) when it has one, else the pool as the daemon
    built it before that function existed (workers one per core, no save lane)."""
    from cogd.config import IndexConfig

    try:
        from cogd.daemon.worker import parse_pool
    except ImportError:
        from cogd.index import languages
        from cogd.index.indexer import parse_rows_job, timeout_rows
        from cogd.index.parsepool import ParsePool, worker_count

        return ParsePool(worker_count(IndexConfig().parse_workers), parse_rows_job, timeout_rows,
                         languages.configure, (str(repo), languages.configure(repo)))
    return parse_pool(repo, IndexConfig())


def child_edits(repo: Path, db: Path, rel: str, edits: int, start: int, warmup: bool = True,
                in_process: bool = False) -> None:
    """``--child-edits``: build ``db`` if missing (untimed), then time ``edits`` one-file saves of
    ``rel`` (``Indexer.refresh(paths=[rel])``); prints one JSON line:
    ``{"wall_ms": [...], "cpu_ms": [...]}`` (CPU: this thread's, ``time.thread_time``; parsing
    in a parser process is not in it).

    The indexer parses as the daemon's index worker does: through the daemon's parse pool
    (:func:`daemon_pool`), or with ``in_process`` in this thread (an indexer without a pool, as
    the CLI without a daemon runs). ``warmup``: one untimed save first, since this child is a
    fresh process and the daemon's writer is a long-lived one (its first save after start warms
    the page cache, the parser and the pool's processes)."""
    from cogd.index.indexer import Indexer

    path = repo / rel
    original = path.read_text(encoding="utf-8")
    pool = None if in_process else daemon_pool(repo)
    ix = Indexer(repo, db, pool=pool)
    wall, cpu = [], []
    try:
        if not ix.conn.execute("SELECT 1 FROM files LIMIT 1").fetchone():
            ix.refresh()
        if warmup:
            path.write_text(original + f"\n\ndef _bench_warm_{start}():\n    return 0\n", encoding="utf-8")
            ix.refresh(paths=[rel])
        for i in range(start, start + edits):
            path.write_text(original + f"\n\ndef _bench_probe_{i}():\n    return {i}\n", encoding="utf-8")
            started, on_cpu = time.perf_counter(), time.thread_time()
            result = ix.refresh(paths=[rel])
            cpu.append((time.thread_time() - on_cpu) * 1000)
            wall.append((time.perf_counter() - started) * 1000)
            if result.parsed != 1:
                raise SystemExit(f"edit {i} re-parsed {result.parsed} files, expected 1")
        probe = f"{rel}::_bench_probe_{start + edits - 1}"
        if not ix.conn.execute("SELECT 1 FROM entities WHERE id = ?", (probe,)).fetchone():
            raise SystemExit(f"the last edit is not in the index: {probe}")
    finally:
        path.write_text(original, encoding="utf-8")
        ix.close()
        if pool is not None:
            pool.close()
    print(json.dumps({"wall_ms": wall, "cpu_ms": cpu}))


def compare_saves(repo: Path, work: Path, rel: str, edits: int, baseline: Path | None, warmup: bool = True,
                  in_process: bool = False) -> None:
    """One-file saves of this cogd and of ``baseline`` (a checkout), alternating in rounds of 10
    edits in child processes, each version on its own index of ``repo`` (built first, untimed).
    Prints p50/p95 of wall and CPU time per version, with the load average of the rounds.
    ``warmup``: each child makes one untimed save first; without, only the very first save of
    the run is dropped (the method of earlier runs: the first save of every later child, a
    fresh process, is then timed cold). ``in_process``: parse in the saving thread, not through the
    daemon's parse pool (see :func:`child_edits`)."""
    versions = {"this": Path(__file__).resolve().parent.parent}
    if baseline is not None:
        versions["baseline"] = baseline.resolve()
    times = {name: {"wall_ms": [], "cpu_ms": []} for name in versions}
    loads = []
    print(f"\none-file saves of {rel}, {edits} per version in rounds of 10, alternating, "
          f"{'one untimed warm-up save per child' if warmup else 'cold first save of each child timed'}, "
          f"{'parsed in the saving thread' if in_process else 'through the daemon parse pool'}: "
          + ", ".join(f"{name} = {src}" for name, src in versions.items()))
    done = 0
    while done < edits:
        n = min(10, edits - done)
        order = list(versions) if (done // 10) % 2 == 0 else list(reversed(versions))
        for name in order:
            env = {**os.environ, "PYTHONPATH": str(versions[name])}
            loads.append(load1())
            proc = subprocess.run([sys.executable, __file__, "--child-edits", str(repo), str(work / f"saves-{name}.db"),
                                   rel, str(n), str(done)] + ([] if warmup else ["--no-warmup"])
                                  + (["--in-process-saves"] if in_process else []),
                                  capture_output=True, text=True, env=env, check=True)
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            if done == 0 and not warmup:  # the first save after opening warms the caches: dropped
                out = {k: v[1:] for k, v in out.items()}
            for key in out:
                times[name][key].extend(out[key])
        done += n
    print(f"  load average (1 min) before the rounds: min {min(loads):.1f}, max {max(loads):.1f}")
    for name, series in times.items():
        print(f"  {name:9s} wall p50 {percentile(series['wall_ms'], 50):6.1f} ms, p95 {percentile(series['wall_ms'], 95):6.1f} ms;"
              f" CPU p50 {percentile(series['cpu_ms'], 50):6.1f} ms, p95 {percentile(series['cpu_ms'], 95):6.1f} ms"
              f" ({len(series['wall_ms'])} saves)")
    p95 = percentile(times["this"]["wall_ms"], 95)
    print(f"  goal: one-file incremental p95 <= {GOAL_INCREMENTAL_P95_MS:.0f} ms: {p95:.1f} ms "
          f"{'PASS' if p95 <= GOAL_INCREMENTAL_P95_MS else 'FAIL'}")


class _Stages:
    """Exclusive CPU seconds (this thread) per named stage; stages nest."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._stack: list[list] = []

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            self._stack.append([name, time.thread_time(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _name, began, nested = self._stack.pop()
                spent = time.thread_time() - began
                self.seconds[name] = self.seconds.get(name, 0.0) + spent - nested
                if self._stack:
                    self._stack[-1][2] += spent
        return timed

    def current(self) -> str | None:
        return self._stack[-1][0] if self._stack else None


def stage_profile(repo: Path, db: Path) -> tuple[dict[str, float], float]:
    """Exclusive CPU seconds per stage of one serial full refresh in this process, and the refresh's total.

    Timers wrap the functions of each stage (tree-sitter's parser through a
    proxy, the query runner, the extraction functions, ``store.write_files``,
    ``resolve.resolve``); FTS5 statements and commits are told apart on the
    writer connection (a ``sqlite3.Connection`` subclass). Nothing of cogd
    changes: the wrappers call the real functions.
    """
    import dataclasses
    import sqlite3

    from cogd.index import extract, indexer, languages, references, resolve, store

    stages = _Stages()

    class TimedParser:
        def __init__(self, parser):
            self._parser = parser

        def parse(self, *args, **kwargs):
            return stages.wrap("parse", self._parser.parse)(*args, **kwargs)

        def reset(self):
            self._parser.reset()

    proxies: dict[int, object] = {}
    real_grammar = languages.grammar

    def grammar(name):
        gram = real_grammar(name)
        if id(gram) not in proxies:
            proxies[id(gram)] = (gram, dataclasses.replace(gram, parser=TimedParser(gram.parser)))
        return proxies[id(gram)][1]

    def query(q, node):
        grams = [g for g, _proxy in proxies.values()]
        if any(q is g.combined for g in grams):
            name = "queries (tags + references, one walk)"
        elif any(q is g.tags for g in grams):
            name = "tags query"
        else:
            name = "reference queries"
        return stages.wrap(name, real_query)(q, node)

    class TimedConnection(sqlite3.Connection):
        def execute(self, sql, *args):
            if "entities_fts" in sql and stages.current() == "sqlite writes":
                return stages.wrap("fts5", super().execute)(sql, *args)
            return super().execute(sql, *args)

        def executemany(self, sql, *args):
            if "entities_fts" in sql and stages.current() == "sqlite writes":
                return stages.wrap("fts5", super().executemany)(sql, *args)
            return super().executemany(sql, *args)

        def commit(self):
            return stages.wrap("commit", super().commit)()

    class Sqlite:
        def __getattr__(self, name):
            return getattr(sqlite3, name)

        @staticmethod
        def connect(*args, **kwargs):
            return sqlite3.connect(*args, factory=TimedConnection, **kwargs)

    real_query = languages.run_query
    saved = [(extract, "grammar", extract.grammar), (indexer, "grammar", indexer.grammar),
             (languages, "run_query", languages.run_query), (references, "run_query", references.run_query),
             (indexer, "parse_file", indexer.parse_file), (extract, "collect_references", extract.collect_references),
             (resolve, "resolve", resolve.resolve), (store, "write_files", store.write_files), (store, "sqlite3", sqlite3)]
    extract.grammar = indexer.grammar = grammar
    languages.run_query = references.run_query = query
    indexer.parse_file = stages.wrap("extraction", indexer.parse_file)
    extract.collect_references = stages.wrap("extraction", extract.collect_references)
    resolve.resolve = stages.wrap("call resolution", resolve.resolve)
    store.write_files = stages.wrap("sqlite writes", store.write_files)
    store.sqlite3 = Sqlite()
    try:
        ix = indexer.Indexer(repo, db)
        began = time.thread_time()
        stages.wrap("other (list, read, hash, names)", ix.refresh)()
        total = time.thread_time() - began
        ix.close()
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return stages.seconds, total


def child_stages(repo: Path, db: Path) -> None:
    """``--child-stages``: :func:`stage_profile` in this (child) process, printed as one JSON line."""
    seconds, total = stage_profile(repo, db)
    print(json.dumps({"seconds": seconds, "total": total}))


def print_stages(repo: Path, work: Path, baseline: Path | None) -> None:
    """The stage table: in this process, or with ``baseline`` one child process per version (this
    one, then the baseline's), side by side."""
    load = load1()
    if baseline is None:
        seconds, total = stage_profile(repo, work / "stages.db")
        print(f"  where the time goes (one serial refresh in this process, CPU s of its thread, "
              f"load {load:.1f}): total {total:.2f} s")
        for name, spent in sorted(seconds.items(), key=lambda item: -item[1]):
            print(f"    {name:38s} {spent:6.2f} s  {100 * spent / total:5.1f}%")
        return
    found = {}
    for name, src in (("this", Path(__file__).resolve().parent.parent), ("baseline", baseline)):
        proc = subprocess.run([sys.executable, __file__, "--child-stages", str(repo), str(work / f"stages-{name}.db")],
                              capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(src)})
        found[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    this, base = found["this"], found["baseline"]
    print(f"  where the time goes (one serial refresh per version in a child process, CPU s of its thread, "
          f"load {load:.1f} before): total this {this['total']:.2f} s, baseline {base['total']:.2f} s "
          f"({this['total'] / base['total']:.2f}x)")
    print(f"    {'stage':38s} {'this':>7s} {'':6s}  {'baseline':>8s}")
    for name in sorted(set(this["seconds"]) | set(base["seconds"]), key=lambda n: -base["seconds"].get(n, 0.0)):
        a, b = this["seconds"].get(name, 0.0), base["seconds"].get(name, 0.0)
        print(f"    {name:38s} {a:6.2f} s {100 * a / this['total']:5.1f}%  {b:6.2f} s {100 * b / base['total']:5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--ctags")
    parser.add_argument("--workers", type=int, default=0, help="parser processes of the parallel run (0: the daemon's default)")
    parser.add_argument("--edit-file", default="collections/__init__.py")
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--incremental-only", action="store_true", help="skip the full index rounds and the stages")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a checkout of another cogd version (its cogd/ package): the one-file saves are timed "
                             "for it and for this one, alternating, each on its own copy of the index")
    parser.add_argument("--child-index", nargs=3, metavar=("REPO", "DB", "WORKERS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-stages", nargs=2, metavar=("REPO", "DB"), help=argparse.SUPPRESS)
    parser.add_argument("--child-edits", nargs=5, metavar=("REPO", "DB", "REL", "N", "START"), help=argparse.SUPPRESS)
    parser.add_argument("--no-warmup", action="store_true",
                        help="--incremental-only: time the first save of every child process too (cold)")
    parser.add_argument("--in-process-saves", action="store_true",
                        help="time the one-file saves parsing in the saving thread (an indexer without a pool), "
                             "not through the daemon's parse pool and its save lane")
    args = parser.parse_args()
    if args.child_index:
        child_index(Path(args.child_index[0]), Path(args.child_index[1]), int(args.child_index[2]))
        return
    if args.child_stages:
        child_stages(Path(args.child_stages[0]), Path(args.child_stages[1]))
        return
    if args.child_edits:
        repo, db, rel, n, start = args.child_edits
        child_edits(Path(repo), Path(db), rel, int(n), int(start), warmup=not args.no_warmup,
                    in_process=args.in_process_saves)
        return
    if args.baseline_src is not None and not (args.baseline_src / "cogd" / "__init__.py").is_file():
        parser.error(f"--baseline-src {args.baseline_src}: no cogd/ package there")

    from cogd import __version__
    from cogd.index.parsepool import worker_count

    ctags = find_ctags(args.ctags)
    ctags_version = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    workers = worker_count(args.workers)
    work = Path(tempfile.mkdtemp(prefix="cogd-bench-index-"))
    try:
        started = time.perf_counter()
        repo = make_tree(work / "stdlib")
        listed = git(repo, "ls-files").splitlines()
        print(f"cogd {__version__}, Python {platform.python_version()} ({sys.executable}), {os.cpu_count()} CPUs, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"ctags: {ctags} ({ctags_version})")
        print(f"tree: {sysconfig.get_paths()['stdlib']} -> {repo}, {len(listed)} files in git "
              f"(made in {time.perf_counter() - started:.1f} s)")

        if args.incremental_only:
            compare_saves(repo, work, args.edit_file, args.edits, args.baseline_src, warmup=not args.no_warmup,
                          in_process=args.in_process_saves)
            return
        print(f"\nfull index, {args.rounds} rounds (fresh index each run); parallel = {workers} parser processes"
              + (f"; baseline = {args.baseline_src}" if args.baseline_src else ""))
        full = run_full(repo, work, ctags, args.rounds, workers, args.baseline_src)
        par, ser = full["parallel"], full["serial"]
        print(f"  cogd files indexed: {full['files']}, code entities: {full['entities']}, edges: {full['edges']}, "
              f"skipped: {full['skipped']} (same for both)")
        print(f"  ctags tags: {full['tags']}")
        print(f"  median wall, cogd parallel (process): {par['wall']:.2f} s (refresh {par['refresh_s']:.2f} s, "
              f"cpu {par['cpu']:.1f} s, load {par['load']:.1f})")
        print(f"  median wall, cogd serial (process):   {ser['wall']:.2f} s (refresh {ser['refresh_s']:.2f} s, "
              f"cpu {ser['cpu']:.1f} s, load {ser['load']:.1f})")
        if args.baseline_src:
            bpar, bser = full["baseline parallel"], full["baseline serial"]
            print(f"  median wall, baseline parallel:       {bpar['wall']:.2f} s (refresh {bpar['refresh_s']:.2f} s, "
                  f"cpu {bpar['cpu']:.1f} s, load {bpar['load']:.1f})")
            print(f"  median wall, baseline serial:         {bser['wall']:.2f} s (refresh {bser['refresh_s']:.2f} s, "
                  f"cpu {bser['cpu']:.1f} s, load {bser['load']:.1f})")
            print(f"  this / baseline, parallel:            wall {par['wall'] / bpar['wall']:.2f}x, "
                  f"cpu {par['cpu'] / bpar['cpu']:.2f}x")
            print(f"  this / baseline, serial:              wall {ser['wall'] / bser['wall']:.2f}x, "
                  f"cpu {ser['cpu'] / bser['cpu']:.2f}x")
        print(f"  median wall, ctags -R:                {full['ctags_wall']:.2f} s")
        print(f"  parallel / serial:                    {par['wall'] / ser['wall']:.2f}x")
        print(f"  ratio cogd/ctags:                     parallel {par['wall'] / full['ctags_wall']:.2f}x, "
              f"serial {ser['wall'] / full['ctags_wall']:.2f}x")
        print(f"  cogd files/s, entities/s (parallel):  {full['files'] / par['wall']:.0f}, "
              f"{full['entities'] / par['wall']:.0f}")
        print(f"  cogd peak RSS (main process):         parallel {par['rss_kb'] / 1024:.0f} MiB, "
              f"serial {ser['rss_kb'] / 1024:.0f} MiB")
        if not args.no_stages:
            print_stages(repo, work, args.baseline_src)
        if args.baseline_src:
            compare_saves(repo, work, args.edit_file, args.edits, args.baseline_src, warmup=not args.no_warmup,
                          in_process=args.in_process_saves)
            print(f"\ngoals (load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
            print(f"  full lexical index (parallel, process wall) <= {GOAL_FULL_S:.0f} s: {par['wall']:.2f} s "
                  f"{'PASS' if par['wall'] <= GOAL_FULL_S else 'FAIL'}")
            return

        print(f"\nincremental, {args.edits} one-file edits of {args.edit_file}")
        inc = run_incremental(repo, work, args.edit_file, args.edits, workers)
        print(f"  file: {inc['size']} bytes; index: {inc['files']} files")
        print(f"  refresh(paths=[file]):  p50 {inc['paths_p50']:.1f} ms, p95 {inc['paths_p95']:.1f} ms (load {load1():.1f})")
        print(f"  the same, parse pool:   p50 {inc['pool_p50']:.1f} ms, p95 {inc['pool_p95']:.1f} ms")
        print(f"  refresh() whole tree:   p50 {inc['tree_p50']:.1f} ms, p95 {inc['tree_p95']:.1f} ms")

        print(f"\ngoals (load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        print(f"  full lexical index (parallel, process wall) <= {GOAL_FULL_S:.0f} s: {par['wall']:.2f} s "
              f"{'PASS' if par['wall'] <= GOAL_FULL_S else 'FAIL'}")
        print(f"  one-file incremental p95 <= {GOAL_INCREMENTAL_P95_MS:.0f} ms: {inc['paths_p95']:.1f} ms "
              f"{'PASS' if inc['paths_p95'] <= GOAL_INCREMENTAL_P95_MS else 'FAIL'}")
    finally:
        if args.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
