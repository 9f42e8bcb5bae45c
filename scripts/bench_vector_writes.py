#!/usr/bin/env python3
"""Benchmark the resident size of the vector projection as an embedding pass fills it.

What it measures
----------------
The storage half of an embedding pass, without the model: ``--rows`` random 384-d float32
vectors (default 60,000, the standard library's entity count) go into a fresh
:class:`cogd.index.vectors.VectorStore` (LanceDB) and :class:`cogd.index.vectors.DenseIndex`
the way :mod:`cogd.daemon.embedder` writes them — the KNN index every 64 rows, the table every
``W`` rows, a compaction at the end. Each variant runs in a child process of its own (a fresh
heap and fresh allocator settings), one after another, ``--rounds`` times interleaved:

* ``--writes W[,W...]``: rows per table write (default ``64,512,2048``; the daemon's is
  ``cogd.daemon.embedder.WRITE_ROWS``);
* ``--arenas N[,N...]``: ``MALLOC_ARENA_MAX`` of the child (``0``: glibc's default; the
  daemon's is ``cogd.rpc.control.MALLOC_ARENAS``);
* ``--knn-only``: the in-memory KNN index alone (no table): its peak RSS (``VmHWM`` before and
  after filling it) and the process CPU of a k = 60 search, numpy on one BLAS thread as in the
  daemon, for this cogd and ``--baseline-src``;
* ``--baseline-src DIR``: another cogd checkout (e.g. ``git worktree add /tmp/old <commit>``)
  measured in the same run with its own ``VectorStore`` and its daemon's write size of 64.

Printed per variant: the resident size (``VmRSS``) after every 10,000 rows, at the end and
its peak (``VmHWM``), in MB, and the seconds taken (medians over the rounds). Resident size
does not depend on the machine's load the way times do; times are for orientation only.

How to run
----------
    python scripts/bench_vector_writes.py [--rows 60000] [--writes 64,512,2048] [--arenas 0,2]
                                          [--baseline-src DIR] [--rounds 1] [--json]

Nothing is downloaded; the temporary folders are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
DIM = 384
KNN_EVERY = 64  # rows per KNN update, as the embedding pass does (its CHUNK)


def _status_mb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    return 0


def child_knn(rows: int) -> None:
    """``--knn-only``: the in-memory KNN index alone, sized once (``make_room``, as a pass does) and
    filled 64 unit rows at a time, then 50 searches (k = 60) timed in process CPU; print JSON."""
    import numpy as np

    from cogd.index.vectors import DenseIndex

    rng = np.random.default_rng(0)
    start_mb = _status_mb("VmHWM")
    dense = DenseIndex(DIM)
    if hasattr(dense, "make_room"):
        dense.make_room(rows)
    for first in range(0, rows, KNN_EVERY):
        ids = [f"e{i}" for i in range(first, min(rows, first + KNN_EVERY))]
        matrix = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        dense.upsert(ids, ["function"] * len(ids), matrix)
    filled_mb = _status_mb("VmHWM")
    queries = rng.standard_normal((51, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    dense.search(queries[0], 60)
    began = time.process_time()
    for query in queries[1:]:
        dense.search(query, 60)
    print(json.dumps({"start_mb": start_mb, "peak_mb": filled_mb, "index_mb": filled_mb - start_mb,
                      "search_cpu_ms": round((time.process_time() - began) * 1000 / 50, 2)}))


def child(rows: int, write: int, folder: str) -> None:
    """Fill a fresh store in ``folder`` with ``rows`` vectors, ``write`` rows per table write; print JSON."""
    import numpy as np

    from cogd.index.vectors import DenseIndex, VectorStore

    store = VectorStore(Path(folder) / "vectors", DIM)
    dense = DenseIndex(DIM)
    rng = np.random.default_rng(0)
    start_mb, marks, buffer = _status_mb("VmRSS"), {}, []
    began = time.perf_counter()
    for first in range(0, rows, KNN_EVERY):
        ids = [f"e{i}" for i in range(first, min(rows, first + KNN_EVERY))]
        matrix = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        dense.upsert(ids, ["function"] * len(ids), matrix)
        buffer.extend({"id": i, "kind": "function", "path": f"p/{n % 500}.py", "model": "m", "src_hash": "h" * 16,
                       "vector": matrix[n]} for n, i in enumerate(ids))
        if len(buffer) >= write:
            store.upsert(buffer)
            buffer = []
        done = first + len(ids)
        if done // 10_000 != first // 10_000:
            marks[str(done // 10_000 * 10_000)] = _status_mb("VmRSS")
    store.upsert(buffer)
    store.compact(force=True)
    print(json.dumps({"start_mb": start_mb, "marks": marks, "end_mb": _status_mb("VmRSS"),
                      "peak_mb": _status_mb("VmHWM"), "seconds": round(time.perf_counter() - began, 2),
                      "rows": store.count()}))


def run(src: Path, rows: int, write: int, arenas: int, knn_only: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONSAFEPATH": "1"}
    if knn_only:  # numpy's BLAS on one thread, as in the daemon (cogd.daemon.scheduling)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-knn", str(rows)],
                              env=env, capture_output=True, text=True, check=True, timeout=3600)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    env.pop("MALLOC_ARENA_MAX", None)
    if arenas:
        env["MALLOC_ARENA_MAX"] = str(arenas)
    folder = tempfile.mkdtemp(prefix="cogd-bench-vectors-")
    try:
        os.chmod(folder, 0o700)
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(rows), str(write), folder],
                              env=env, capture_output=True, text=True, check=True, timeout=3600)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--writes", default="64,512,2048")
    parser.add_argument("--arenas", default="0,2")
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-knn", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--knn-only", action="store_true",
                        help="only the in-memory KNN index: its peak RSS and search CPU (this cogd and --baseline-src)")
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), int(args.child[1]), args.child[2])
        return
    if args.child_knn:
        child_knn(args.child_knn)
        return
    if args.knn_only:
        knn_only(args)
        return
    variants = [(f"writes of {w}, arenas {a or 'default'}", HERE, int(w), int(a))
                for w in args.writes.split(",") for a in args.arenas.split(",")]
    if args.baseline_src:
        variants.append(("baseline (writes of 64, default arenas)", args.baseline_src, 64, 0))
    results: dict[str, list[dict]] = {name: [] for name, *_ in variants}
    for _ in range(args.rounds):
        for name, src, write, arenas in variants:
            results[name].append(run(src, args.rows, write, arenas))
            print(f"  {name}: {results[name][-1]}", file=sys.stderr)
    summary = {}
    for name, runs in results.items():
        summary[name] = {
            "end_mb": statistics.median(r["end_mb"] for r in runs),
            "peak_mb": statistics.median(r["peak_mb"] for r in runs),
            "seconds": statistics.median(r["seconds"] for r in runs),
            "marks": {k: statistics.median(r["marks"].get(k, 0) for r in runs) for k in runs[0]["marks"]},
            "start_mb": statistics.median(r["start_mb"] for r in runs),
        }
    if args.json:
        print(json.dumps({"rows": args.rows, "load": os.getloadavg(), "summary": summary}, indent=2))
        return
    print(f"{args.rows:,} vectors of {DIM} dimensions, {args.rounds} round(s), load {os.getloadavg()[0]:.1f}")
    for name, s in summary.items():
        marks = " ".join(f"{int(k) // 1000}k:{v:.0f}" for k, v in s["marks"].items())
        print(f"  {name:<42} start {s['start_mb']:.0f}  {marks}  end {s['end_mb']:.0f}  peak {s['peak_mb']:.0f} MB"
              f"  {s['seconds']:.1f} s")


def knn_only(args) -> None:
    """``--knn-only``: :func:`child_knn` for this cogd and the baseline, alternating, ``--rounds`` times."""
    variants = {"this": HERE, **({"baseline": args.baseline_src} if args.baseline_src else {})}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    loads = []
    for _ in range(args.rounds):
        for name, src in variants.items():
            loads.append(os.getloadavg()[0])
            results[name].append(run(src, args.rows, 0, 0, knn_only=True))
    print(f"KNN index of {args.rows:,} unit vectors of {DIM} dimensions, {args.rounds} round(s), "
          f"load {min(loads):.1f}-{max(loads):.1f}")
    for name, runs in results.items():
        print(f"  {name:9s} ({variants[name]}): index peak RSS +"
              + ", +".join(f"{r['index_mb']}" for r in runs) + " MB; CPU per search (k = 60) "
              + ", ".join(f"{r['search_cpu_ms']}" for r in runs) + " ms")


if __name__ == "__main__":
    main()
