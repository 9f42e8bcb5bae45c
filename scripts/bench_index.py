#!/usr/bin/env python3
"""Benchmark cogd's full and incremental indexing against universal-ctags.

What it measures
----------------
The tree is a temporary git repository holding a copy of the running
interpreter's whole standard library (``sysconfig.get_paths()["stdlib"]``,
without ``__pycache__`` and ``site-packages``), committed once.

Full index, ``--rounds`` rounds (default 3), cogd and ctags alternating so
that load drift hits both alike:

* cogd: a fresh index database each round; a child process
  (``python scripts/bench_index.py --child-index REPO DB``) imports cogd, runs
  ``Indexer(REPO, DB).refresh()`` and reports the refresh's own time, the
  file and entity counts and its peak RSS (``ru_maxrss`` of itself). The
  wall time is taken around the whole child process, start-up and imports
  included, as for ctags;
* ctags: ``ctags -R --fields=+n --languages=LIST -f TAGS .`` in the same
  tree, a fresh tags file each round. LIST names the languages cogd parses
  (``cogd.index.languages.LANGUAGES``, mapped to ctags' names), so both read
  the same files.

Printed: the median wall time of each, the ratio cogd/ctags (process wall
times; the ratio for cogd's refresh alone is shown too), files/s and
entities/s of cogd (on its process wall time), cogd's peak RSS.

Incremental, ``--edits`` rounds (default 50) in this process, on an index
built beforehand (untimed): each round rewrites one real file
(``--edit-file``, default ``collections/__init__.py``) with a new function
appended, then times

* ``Indexer.refresh(paths=[that file])`` — what a save event costs;
* in a second series, ``Indexer.refresh()`` — the whole-tree stat refresh
  that runs before a context pack, with the same kind of edit.

Printed: p50 and p95 (nearest rank) in milliseconds of each series.

Where the full index's time goes, one pass in this process: listing the files
(``list_source_files``), reading them, the bare tree-sitter parse of every
file, and ``extract`` (parse, tags query, references; no database). The rest
of a refresh is the database writes and reference resolution.

Goals reported: full lexical index <= 2.0x ctags; one-file incremental
(``refresh(paths=[file])``) p95 <= 50 ms. The temporary directory is removed
at the end unless ``--keep``.

How to run
----------
    /tmp/venv/bin/python scripts/bench_index.py [--rounds 3] [--edits 50]

Other options: ``--ctags PATH`` (default ``/usr/bin/ctags``, then ``ctags``
on PATH), ``--edit-file REL``, ``--keep``. Standard library and cogd only.
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

GOAL_FULL_RATIO = 2.0
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


def child_index(repo: Path, db: Path) -> None:
    """Run one full index in this (child) process and print its numbers as JSON."""
    from cogd.index import store
    from cogd.index.indexer import Indexer

    started = time.perf_counter()
    ix = Indexer(repo, db)
    result = ix.refresh()
    elapsed = time.perf_counter() - started
    counts = store.counts(ix.conn)
    ix.close()
    print(json.dumps({
        "refresh_s": elapsed, "files": counts["files"], "entities": counts["entities"],
        "skipped": result.skipped, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }))


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


def run_full(repo: Path, work: Path, ctags: str, rounds: int) -> dict:
    languages = ctags_languages()
    print(f"  ctags --languages={languages}")
    cogd_wall, cogd_refresh, ctags_wall, rss = [], [], [], []
    info: dict = {}
    tag_lines = 0
    for r in range(rounds):
        db = work / f"full-{r}.db"
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--child-index", str(repo), str(db)],
                              capture_output=True, text=True, check=True)
        cogd_wall.append(time.perf_counter() - started)
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        cogd_refresh.append(info["refresh_s"])
        rss.append(info["maxrss_kb"])
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)

        tags = work / f"tags-{r}"
        started = time.perf_counter()
        subprocess.run([ctags, "-R", "--fields=+n", f"--languages={languages}", "-f", str(tags), "."],
                       cwd=repo, check=True, capture_output=True)
        ctags_wall.append(time.perf_counter() - started)
        with open(tags, encoding="utf-8", errors="replace") as fh:
            tag_lines = sum(1 for line in fh if not line.startswith("!_"))
        tags.unlink()
        print(f"  round {r + 1}: cogd {cogd_wall[-1]:.2f} s (refresh {cogd_refresh[-1]:.2f} s), "
              f"ctags {ctags_wall[-1]:.2f} s", flush=True)
    return {
        "cogd_wall": statistics.median(cogd_wall), "cogd_refresh": statistics.median(cogd_refresh),
        "ctags_wall": statistics.median(ctags_wall), "rss_kb": max(rss), "files": info["files"],
        "entities": info["entities"], "skipped": info["skipped"], "tags": tag_lines,
    }


def run_incremental(repo: Path, work: Path, rel: str, edits: int) -> dict:
    from cogd.index.indexer import Indexer

    path = repo / rel
    original = path.read_text(encoding="utf-8")
    ix = Indexer(repo, work / "incremental.db")
    try:
        ix.refresh()  # the index a save event finds: built, untimed
        series: dict[str, list[float]] = {"paths": [], "tree": []}
        for name in ("paths", "tree"):
            for i in range(edits):
                path.write_text(original + f"\n\ndef _bench_probe_{name}_{i}():\n    return {i}\n", encoding="utf-8")
                started = time.perf_counter()
                result = ix.refresh(paths=[rel]) if name == "paths" else ix.refresh()
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
    return {
        "size": len(original.encode()), "files": files,
        **{f"{name}_p50": percentile(v, 50) for name, v in series.items()},
        **{f"{name}_p95": percentile(v, 95) for name, v in series.items()},
    }


def breakdown(repo: Path) -> dict:
    """Seconds spent in each stage of a full index, measured stage by stage."""
    from cogd.index.extract import extract
    from cogd.index.languages import grammar, language_for_path
    from cogd.index.sources import list_source_files

    started = time.perf_counter()
    names = list_source_files(repo)
    listed = time.perf_counter() - started
    started = time.perf_counter()
    files = [(name, language_for_path(name), (repo / name).read_bytes()) for name in names]
    read = time.perf_counter() - started
    for language in {language for _, language, _ in files}:
        grammar(language)  # load grammars and compile queries outside the timings
    started = time.perf_counter()
    for _, language, data in files:
        grammar(language).parser.parse(data)
    parse = time.perf_counter() - started
    started = time.perf_counter()
    for name, language, data in files:
        extract(name, data, language)
    extracted = time.perf_counter() - started
    return {"list": listed, "read": read, "parse": parse, "extract": extracted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--ctags")
    parser.add_argument("--edit-file", default="collections/__init__.py")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--child-index", nargs=2, metavar=("REPO", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_index:
        child_index(Path(args.child_index[0]), Path(args.child_index[1]))
        return

    from cogd import __version__

    ctags = find_ctags(args.ctags)
    ctags_version = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    work = Path(tempfile.mkdtemp(prefix="cogd-bench-index-"))
    try:
        started = time.perf_counter()
        repo = make_tree(work / "stdlib")
        listed = git(repo, "ls-files").splitlines()
        print(f"cogd {__version__}, Python {platform.python_version()} ({sys.executable}), {os.cpu_count()} CPUs")
        print(f"ctags: {ctags} ({ctags_version})")
        print(f"tree: {sysconfig.get_paths()['stdlib']} -> {repo}, {len(listed)} files in git "
              f"(made in {time.perf_counter() - started:.1f} s)")

        print(f"\nfull index, {args.rounds} rounds (fresh index each round)")
        full = run_full(repo, work, ctags, args.rounds)
        ratio = full["cogd_wall"] / full["ctags_wall"]
        print(f"  cogd files indexed: {full['files']}, code entities: {full['entities']}, skipped: {full['skipped']}")
        print(f"  ctags tags: {full['tags']}")
        print(f"  median wall, cogd (process):   {full['cogd_wall']:.2f} s")
        print(f"  median wall, cogd (refresh):   {full['cogd_refresh']:.2f} s")
        print(f"  median wall, ctags -R:         {full['ctags_wall']:.2f} s")
        print(f"  ratio cogd/ctags:              {ratio:.2f}x (refresh alone: "
              f"{full['cogd_refresh'] / full['ctags_wall']:.2f}x)")
        print(f"  cogd files/s:                  {full['files'] / full['cogd_wall']:.0f}")
        print(f"  cogd entities/s:               {full['entities'] / full['cogd_wall']:.0f}")
        print(f"  cogd peak RSS:                 {full['rss_kb'] / 1024:.0f} MiB")
        stages = breakdown(repo)
        print("  where the time goes (one pass, in-process):")
        print(f"    list files (git + .cogdignore + stat): {stages['list'] * 1000:.0f} ms")
        print(f"    read files:                            {stages['read'] * 1000:.0f} ms")
        print(f"    bare tree-sitter parse:                {stages['parse']:.2f} s "
              f"({stages['parse'] / full['ctags_wall']:.1f}x ctags)")
        print(f"    extract (parse, tags, references):     {stages['extract']:.2f} s")
        print(f"    rest of refresh (store, resolve):      ~{full['cogd_refresh'] - stages['extract']:.2f} s")

        print(f"\nincremental, {args.edits} one-file edits of {args.edit_file}")
        inc = run_incremental(repo, work, args.edit_file, args.edits)
        print(f"  file: {inc['size']} bytes; index: {inc['files']} files")
        print(f"  refresh(paths=[file]):  p50 {inc['paths_p50']:.1f} ms, p95 {inc['paths_p95']:.1f} ms")
        print(f"  refresh() whole tree:   p50 {inc['tree_p50']:.1f} ms, p95 {inc['tree_p95']:.1f} ms")

        print("\ngoals")
        print(f"  full lexical index <= {GOAL_FULL_RATIO:.1f}x ctags: {ratio:.2f}x "
              f"{'PASS' if ratio <= GOAL_FULL_RATIO else 'FAIL'}")
        print(f"  one-file incremental p95 <= {GOAL_INCREMENTAL_P95_MS:.0f} ms: {inc['paths_p95']:.1f} ms "
              f"{'PASS' if inc['paths_p95'] <= GOAL_INCREMENTAL_P95_MS else 'FAIL'}")
    finally:
        if args.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
