#!/usr/bin/env python3
"""Benchmark the daemon's background embedding pass on a real tree, variant against variant.

What it measures
----------------
The tree: ``--files`` (default 300) Python files of the running interpreter's standard library
(sorted paths without ``__pycache__``, ``site-packages`` and test folders, every k-th file so
that the sample spans the library; the same files every run), copied into a git repository
once and cloned fresh for every daemon.

A *variant* is ``NAME=CHECKOUT`` or ``NAME=CHECKOUT:key=value,key=value`` (``--variant``,
repeatable): a cogd checkout, imported with ``PYTHONPATH=<checkout>`` and ``PYTHONSAFEPATH=1``
(inherited by the daemon it spawns, so the cogd inside the tree served is never imported),
and ``[embed]`` settings written to the clone's ``.cogd/config.toml`` before ``cogd start``
(integers and ``true``/``false`` as TOML values, anything else quoted). Without ``--variant``:
``current`` (the checkout holding this script) and, with ``--baseline-src DIR``, ``baseline``.
``--baseline-src`` always adds ``baseline`` (first) and is the reference of the ratios and
cosines. Every variant runs once per round (``--rounds``, default 2), the order alternating
between rounds so that load drift hits all alike.

One run: ``cogd start`` in the clone, then ``cogd status --json`` every ``--poll`` seconds
(default 0.5) until every entity has a vector (nothing pending, nothing queued) or
``--timeout`` seconds (default 900) have passed. Reported per run:

* ``index_s``: ``cogd start`` to the committed first index;
* ``first_vec_s``: to the first status showing a vector (the model's load comes before it);
* ``front_s`` / ``full_s``: to the front's and to every entity's coverage;
* ``rate``: the pass's entities per second, vectors counted from the first status that showed
  any to full coverage (the model's load is outside it);
* ``cpu_ms_per_entity``: the daemon's CPU time (user + system, every thread; ``/proc/<pid>/stat``)
  over the same span per entity embedded: on a shared machine it moves less than wall time;
* ``peak_mb``: the daemon's peak resident size (``VmHWM`` of its ``/proc/<pid>/status``,
  read at every poll; the LanceDB child process is not counted);
* ``time_s``: where the pass's time went, when the daemon reports it
  (``embedding.pass_time_s``: rows = reading the index and making texts, cache, encode =
  tokenising and inference, knn, write = the LanceDB table, wait = giving way to requests);
* ``cos``: the cosine of the variant's vectors to the reference variant's of the same round,
  mean and minimum over the texts both embedded (read from the two clones' embedding caches,
  ``.cogd/index/embed_cache.db``: its keys are the model, the cap and the text, so a key names
  the same text in both).

Then per variant the median rate, its ratio to the reference's median in the same run, and the
median peak RSS (goal ≤ 350 MB). The load average is printed before and after every run: the
machine may be shared, and only ratios within one run mean something.

How to run
----------
    python scripts/bench_embed_pass.py --baseline-src /path/to/main-checkout [--files 300]
        [--rounds 2] [--variant "b512=.:batch_tokens=512"] [--json]

Standard library, git and the named checkouts only; nothing is downloaded. Every daemon is
stopped and the temporary directory removed at the end (``--keep`` keeps the directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_up  # noqa: E402  (its checkout runner and peak-RSS reading, shared)
from bench_up import vm_hwm_mb  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
GOAL_PEAK_MB = 350.0


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def make_tree(dest: Path, files: int) -> int:
    """A git repository at ``dest`` holding ``files`` standard-library files (module doc); returns how many."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "__pycache__", "test", "tests", "idle_test"}
    paths = sorted(p for p in stdlib.rglob("*.py") if not skip & set(p.relative_to(stdlib).parts))
    step = max(1, len(paths) // max(1, files))
    chosen = paths[::step][:files]
    for path in chosen:
        target = dest / path.relative_to(stdlib)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "standard library sample")
    return len(chosen)


def toml_value(text: str) -> str:
    if text in ("true", "false") or text.lstrip("-").isdigit():
        return text
    return json.dumps(text)  # a TOML basic string is a JSON string for these values


class Variant(bench_up.Variant):
    """One daemon set-up: a checkout (its ``cogd`` runs as :class:`bench_up.Variant`'s) and
    ``[embed]`` settings."""

    def __init__(self, spec: str):
        name, sep, rest = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"a variant is NAME=CHECKOUT[:key=value,...], got {spec!r}")
        src, _, settings = rest.partition(":")
        super().__init__(name, Path(src))
        self.settings = dict(s.split("=", 1) for s in settings.split(",") if s.strip())


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used (all its threads), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def one_run(variant: Variant, template: Path, work: Path, tag: str, timeout: float, poll: float) -> dict:
    """One daemon of ``variant`` on a fresh clone (module doc); its cache is kept as ``work/<tag>.db``."""
    clone = work / tag
    subprocess.run(["git", "clone", "-q", str(template), str(clone)], check=True)
    if variant.settings:
        (clone / ".cogd").mkdir()
        lines = ["[embed]"] + [f"{k} = {toml_value(v)}" for k, v in variant.settings.items()]
        (clone / ".cogd" / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out: dict = {"load_before": load()}
    started = time.monotonic()
    peak, e = 0.0, {}
    first: tuple[float, int, float | None] | None = None
    cpu_end: float | None = None
    try:
        variant.cogd(clone, "start")
        pid = json.loads(variant.cogd(clone, "status", "--json", timeout=120).stdout)["pid"]
        while True:
            at = time.monotonic() - started
            status = json.loads(variant.cogd(clone, "status", "--json", timeout=120, check=False).stdout or "{}")
            peak = max(peak, vm_hwm_mb(pid) or 0.0)
            index, e = status.get("index") or {}, status.get("embedding") or {}
            if "index_s" not in out and index.get("refreshes", 0) >= 1 and index.get("state") == "idle":
                out.update(index_s=round(at, 2), entities=index.get("entities"), file_entities=index.get("file_entities"))
            done = e.get("embedded_entities") or 0
            if first is None and done > 0 and "index_s" in out:
                first = (at, done, cpu_s(pid))
                out["first_vec_s"] = round(at, 2)
            front = e.get("front") or {}
            if first and "front_s" not in out and front.get("entities") and front.get("embedded_entities") == front["entities"]:
                out["front_s"] = round(at, 2)
            if ("index_s" in out and e.get("entities") and e.get("state") in ("idle", "error")
                    and not e.get("pending") and not e.get("queued")):
                out["full_s"] = round(at, 2)
                cpu_end = cpu_s(pid)
                break
            if at > timeout:
                out["timed_out_s"] = round(at, 2)
                break
            time.sleep(poll)
        out.update(embedded=e.get("embedded_entities"), of=e.get("entities"), computed=e.get("computed"),
                   error=e.get("error"), time_s=e.get("pass_time_s"), peak_mb=round(peak, 1),
                   light_batches=e.get("light_batches"))
        if first and "full_s" in out and out["full_s"] > first[0]:
            n = (e.get("embedded_entities") or 0) - first[1]
            out["rate"] = round(n / (out["full_s"] - first[0]), 1)
            if first[2] is not None and cpu_end is not None and n > 0:
                out["cpu_ms_per_entity"] = round((cpu_end - first[2]) * 1000 / n, 2)
    finally:
        variant.cogd(clone, "stop", timeout=120, check=False)
        cache = clone / ".cogd" / "index" / "embed_cache.db"
        if cache.exists():
            shutil.copyfile(cache, work / f"{tag}.db")
        shutil.rmtree(clone, ignore_errors=True)
    out["load_after"] = load()
    return out


def cosines(a: Path, b: Path) -> tuple[float, float, int] | None:
    """Mean and minimum cosine between the vectors the two caches hold under the same key, and how many."""
    if not (a.exists() and b.exists()):
        return None
    with sqlite3.connect(a) as db:
        db.execute("ATTACH DATABASE ? AS other", (str(b),))
        pairs = db.execute("SELECT x.vector, y.vector FROM embeddings x JOIN other.embeddings y ON x.key = y.key").fetchall()
    if not pairs:
        return None
    x = np.stack([np.frombuffer(p[0], dtype="<f4") for p in pairs])
    y = np.stack([np.frombuffer(p[1], dtype="<f4") for p in pairs])
    c = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    return float(c.mean()), float(c.min()), len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="NAME=CHECKOUT[:key=value,...] (repeatable)")
    parser.add_argument("--baseline-src", type=Path, help="a cogd checkout measured as `baseline`, the reference")
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    variants = [Variant(f"baseline={args.baseline_src}")] if args.baseline_src else []
    variants += [Variant(v) for v in args.variant] or [Variant(f"current={HERE}")]
    if len({v.name for v in variants}) != len(variants):
        raise SystemExit("variant names must differ")
    reference = variants[0]
    work = Path(tempfile.mkdtemp(prefix="cogd-bench-pass-"))
    result: dict = {"load_start": load(), "cpus": os.cpu_count(), "runs": {v.name: [] for v in variants},
                    "variants": {v.name: {"src": str(v.src), "embed": v.settings} for v in variants}}
    try:
        result["files"] = make_tree(work / "template", args.files)
        if not args.json:
            print(f"tree: {result['files']} standard-library files; {len(variants)} variants, {args.rounds} rounds; "
                  f"load {load()}", flush=True)
        for r in range(args.rounds):
            for v in variants if r % 2 == 0 else variants[::-1]:
                run = one_run(v, work / "template", work, f"{v.name}-{r}", args.timeout, args.poll)
                result["runs"][v.name].append(run)
                if not args.json:
                    print(f"[{v.name}] round {r + 1}: {json.dumps(run)}", flush=True)
            for v in variants[1:]:
                cos = cosines(work / f"{v.name}-{r}.db", work / f"{reference.name}-{r}.db")
                if cos:
                    result["runs"][v.name][-1]["cos"] = [round(cos[0], 5), round(cos[1], 5), cos[2]]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["load_end"] = load()
    base_rate = statistics.median([r["rate"] for r in result["runs"][reference.name] if "rate" in r] or [float("nan")])
    summary = {}
    for v in variants:
        runs = result["runs"][v.name]
        rates = [r["rate"] for r in runs if "rate" in r]
        rate = statistics.median(rates) if rates else float("nan")
        summary[v.name] = {
            "rate_median": round(rate, 1), "x_reference": round(rate / base_rate, 2) if base_rate == base_rate and base_rate > 0 else None,
            "full_s_median": round(statistics.median([r["full_s"] - r["index_s"] for r in runs if "full_s" in r]), 2) if any(
                "full_s" in r for r in runs) else None,
            "peak_mb_median": statistics.median([r["peak_mb"] for r in runs]),
            "cpu_ms_median": statistics.median([r["cpu_ms_per_entity"] for r in runs if "cpu_ms_per_entity" in r])
            if any("cpu_ms_per_entity" in r for r in runs) else None,
            "cos": [r.get("cos") for r in runs],
        }
    result["summary"] = summary
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"\nload {result['load_start']} at start, {result['load_end']} at end; reference: {reference.name}")
    print(f"  {'variant':<14} {'settings':<40} {'ent/s':>7} {'x ref':>6} {'CPU ms/ent':>10} {'index→full s':>12} "
          f"{'peak MB':>8}  cos to ref (mean/min)")
    for v in variants:
        s = summary[v.name]
        cos = "; ".join(f"{c[0]:.4f}/{c[1]:.4f}" for c in s["cos"] if c) or "-"
        settings = ",".join(f"{k}={val}" for k, val in v.settings.items()) or "(defaults)"
        print(f"  {v.name:<14} {settings:<40} {s['rate_median']:>7} {s['x_reference']!s:>6} {s['cpu_ms_median']!s:>10} {s['full_s_median']!s:>12} "
              f"{s['peak_mb_median']:>8}  {cos}   (goal peak ≤ {GOAL_PEAK_MB:.0f} MB)")
    for v in variants:
        for n, r in enumerate(result["runs"][v.name]):
            t = r.get("time_s")
            if t:
                total = sum(x for x in t.values()) or 1.0
                print(f"  [{v.name}] round {n + 1} pass time: " + ", ".join(
                    f"{k} {x:.1f} s ({x / total:.0%})" for k, x in t.items()))


if __name__ == "__main__":
    main()
