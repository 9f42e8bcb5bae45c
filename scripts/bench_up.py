#!/usr/bin/env python3
"""Benchmark a newcomer's first minutes: ``cogd up`` to the first pack, and a whole-standard-library daemon.

What it measures
----------------
Each measurement runs once per *variant*: the cogd under test (``--src``, default the
checkout holding this script) and, with ``--baseline-src DIR`` (another checkout of cogd, e.g.
``git worktree add /tmp/cogd-base main``), that older cogd, in the same run and alternating
round by round so that load drift hits both alike. A variant's code is chosen with
``PYTHONPATH=<its checkout>`` and ``PYTHONSAFEPATH=1`` (inherited by the daemon it spawns), so
the cogd package inside the tree being served is never the one imported. Both variants use
this interpreter and its installed dependencies. The load average is printed before and after
each measurement: on a shared machine other work moves the figures.

1. **First pack** (``--rounds``, default 3). A fresh ``git clone`` of ``--source`` (default:
   this checkout; cogd's own tree, as a new user's first ``cogd up`` sees it) in a temporary
   directory; ``python -m cogd.cli up`` runs there with output to a pipe, exactly as the user
   types it (no options; hooks are written into the clone). Timed from the process start: the
   ``daemon started`` line, the ``index:`` line, the sample-pack rule and the end of the pack (the closing rule), and the
   exit of the command. The daemon is stopped and the clone removed after each round.
   Goal: the pack ≤ 10 s after the start.
2. **Standard library** (skipped with ``--no-stdlib``). The running interpreter's whole
   standard library (``sysconfig.get_paths()["stdlib"]`` without ``__pycache__`` and
   ``site-packages``) copied once into a git repository, then cloned fresh for each variant.
   ``cogd start`` there, then ``status`` every ``--poll`` seconds (default 0.5): time to the
   full lexical index (the first refresh committed and the worker idle), to the embedding
   front (file entities and the definitions of recent and most-referenced files; a daemon
   that reports no front leaves this blank), and to the full embedding (nothing pending,
   nothing queued); the embedding rate over that span; the daemon's peak RSS (``VmHWM`` of
   ``/proc/<pid>/status``, read at every poll; the largest value seen, and the value when the
   lexical index was done, to tell indexing's share from embedding's, and when each multiple of
   RSS_EVERY entities had been embedded, so runs stopped early still compare; beside the peaks at
   the index and at the first tier, the resident set then, ``VmRSS``: what stays of each phase). ``--timeout S``
   (default 3600) stops waiting S seconds after ``cogd start`` (the coverage reached and the
   rate then are reported); ``--no-embed-wait`` stops after the lexical index.
   ``--prompt-every S`` (default 0, off) also asks the daemon for a prompt's context pack
   (``cogd context PROMPT``, the request a prompt hook makes) every S seconds once the lexical
   index is done, so that the memory of answering requests during the pass (the encoder's
   one-thread session among it) is in the peak as a prompted daemon pays it; the number of
   packs asked and their median wall time are reported.

The daemon of each measurement is stopped, and the temporary directory removed at the end
(``--keep`` keeps the directory).

How to run
----------
    python scripts/bench_up.py [--rounds 3] [--baseline-src DIR] [--no-stdlib]
                               [--no-embed-wait | --timeout SECONDS] [--json]

Standard library, git and the cogd checkouts named; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # the checkout holding this script
GOAL_PACK_S = 10.0
PACK_RULE = "sample context pack"


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


class Variant:
    """One cogd to measure: its name and the checkout its code is imported from."""

    def __init__(self, name: str, src: Path):
        if not (src / "cogd" / "__init__.py").is_file():
            raise SystemExit(f"{src} is not a cogd checkout (no cogd/__init__.py)")
        self.name, self.src = name, src.resolve()
        self.env = {**os.environ, "PYTHONPATH": str(self.src), "PYTHONSAFEPATH": "1", "COLUMNS": "120"}
        self.env.pop("COGD_FAULTS", None)

    def cogd(self, cwd: Path, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "cogd.cli", *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SystemExit(f"[{self.name}] cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return proc

    def status(self, cwd: Path) -> dict:
        return json.loads(self.cogd(cwd, "status", "--json", timeout=60).stdout)

    def stop(self, cwd: Path) -> None:
        self.cogd(cwd, "stop", timeout=120, check=False)


# ---------------------------------------------------------------- 1. the first pack

def first_pack(variant: Variant, source: Path, work: Path, n: int) -> dict:
    """One ``cogd up`` on a fresh clone of ``source``: seconds to each milestone (module doc)."""
    clone = work / f"up-{variant.name}-{n}"
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    marks: dict[str, float] = {}
    lines: list[str] = []
    before = load()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "cogd.cli", "up"], cwd=clone, env=variant.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    drain = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    drain.start()
    try:
        rules = 0
        for line in proc.stdout:
            at = time.monotonic() - started
            lines.append(line.rstrip("\n"))
            if line.startswith("daemon ") and "daemon" not in marks:
                marks["daemon"] = at
            if line.startswith("index:") and "index" not in marks:
                marks["index"] = at
            if line.startswith("─"):  # the rules around the pack
                rules += 1
                if PACK_RULE in line and "pack_start" not in marks:
                    marks["pack_start"] = at
                elif "pack_start" in marks and "pack_end" not in marks:
                    marks["pack_end"] = at
        proc.wait(timeout=600)
        marks["exit"] = time.monotonic() - started
        drain.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        variant.stop(clone)
        shutil.rmtree(clone, ignore_errors=True)
    if proc.returncode != 0 or "pack_end" not in marks:
        raise SystemExit(f"[{variant.name}] cogd up failed ({proc.returncode}):\n" + "\n".join(lines[-20:])
                         + "".join(stderr)[-2000:])
    index_line = next((line for line in lines if line.startswith("index:")), "")
    return {**{k: round(v, 2) for k, v in marks.items()}, "index_line": index_line,
            "embedding_line": next((line for line in reversed(lines) if line.startswith("embedding:")), ""),
            "load_before": before, "load_after": load()}


# ---------------------------------------------------------------- 2. the standard library

def make_stdlib(dest: Path) -> Path:
    """A git repository holding a copy of this interpreter's standard library."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(stdlib, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc"))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "standard library")
    return dest


def vm_mb(pid: int, field: str = "VmHWM") -> float | None:
    """``field`` of ``/proc/<pid>/status`` in MB (``VmHWM``: the peak resident set; ``VmRSS``: the
    resident set now), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def vm_hwm_mb(pid: int) -> float | None:
    """The peak resident set (``VmHWM``) of process ``pid`` in MB, or None when it is gone."""
    return vm_mb(pid, "VmHWM")


RSS_EVERY = 5000  # the peak resident size is also reported when each multiple of this many is embedded


def _embedding_done(e: dict) -> bool:
    return e.get("state") in ("idle", "error", "disabled") and not e.get("pending") and not e.get("queued")


PROMPTS = ("the rotating log file handler never rolls over at midnight",
           "json.loads gives a confusing error message when the document has a trailing comma",
           "cookies that have expired are still being sent to the server")  # --prompt-every, in turn


def stdlib_run(variant: Variant, template: Path, work: Path, *, embed_wait: bool, timeout: float,
               poll: float, prompt_every: float = 0.0) -> dict:
    """The whole-standard-library daemon run of ``variant`` (module doc, part 2)."""
    clone = work / f"stdlib-{variant.name}"
    subprocess.run(["git", "clone", "-q", str(template), str(clone)], check=True)
    before = load()
    started = time.monotonic()
    out: dict = {"load_before": before}
    peak = 0.0
    e: dict = {}  # the last embedding status read
    asked: list[float] = []  # --prompt-every: wall seconds of each context pack asked
    next_prompt = 0.0
    try:
        variant.cogd(clone, "start", timeout=600)
        status = variant.status(clone)
        pid = status["pid"]
        while True:
            at = time.monotonic() - started
            status = variant.status(clone)
            peak = max(peak, vm_hwm_mb(pid) or 0.0)
            if "index" not in status:  # no answer within the status command's timeout, or no daemon
                out.setdefault("unanswered", []).append({"at_s": round(at, 1), "running": status.get("running"),
                                                         "error": status.get("error")})
                if not status.get("running") or len(out["unanswered"]) > 20:
                    break
                time.sleep(poll)
                continue
            index, e = status["index"], status.get("embedding") or {}
            if "index_s" not in out and index.get("refreshes", 0) >= 1 and index["state"] == "idle":
                out.update(index_s=round(at, 2), files=index["files"], entities=index["entities"],
                           file_entities=index.get("file_entities"), peak_rss_at_index_mb=round(peak, 1),
                           rss_at_index_mb=round(vm_mb(pid, "VmRSS") or 0.0, 1))
                if not embed_wait:
                    break
            if prompt_every > 0 and "index_s" in out and at >= next_prompt:
                t0 = time.monotonic()
                variant.cogd(clone, "context", PROMPTS[len(asked) % len(PROMPTS)], timeout=120)
                asked.append(time.monotonic() - t0)
                next_prompt = at + prompt_every
                peak = max(peak, vm_hwm_mb(pid) or 0.0)
            done = e.get("embedded_entities") or 0
            for mark in range(RSS_EVERY, done + 1, RSS_EVERY):  # resident size as the vectors grow
                out.setdefault("peak_rss_by_embedded", {}).setdefault(str(mark), round(peak, 1))
            tier = e.get("first_tier") or {}
            if ("first_tier_s" not in out and tier.get("active") and e.get("entities")
                    and tier.get("entities") == e["entities"]):  # every entity has a static vector
                out.update(first_tier_s=round(at, 2), first_tier_sync_s=tier.get("seconds"),
                           first_tier_model=tier.get("model"), peak_rss_at_first_tier_mb=round(peak, 1),
                           rss_at_first_tier_mb=round(vm_mb(pid, "VmRSS") or 0.0, 1))
            if "first_tier_s" in out and "first_tier_dropped_s" not in out and not tier.get("active"):
                out.update(first_tier_dropped_s=round(at, 2), peak_rss_both_tiers_mb=round(peak, 1))
            front = e.get("front") or {}
            if ("index_s" in out and "front_s" not in out and front.get("entities")
                    and front.get("embedded_entities") == front["entities"]):
                out.update(front_s=round(at, 2), front_entities=front["entities"])
            if "index_s" in out and e.get("entities") and _embedding_done(e):
                out["embed_s"] = round(at, 2)
                break
            if at > timeout:
                out["timed_out_s"] = round(at, 2)
                break
            time.sleep(poll)
        out["embedding"] = {k: e.get(k) for k in ("state", "model", "entities", "embedded_entities", "pending",
                                                  "rate_per_s", "computed", "error")}
        if e.get("entities"):
            out["coverage"] = round(e.get("embedded_entities", 0) / e["entities"], 4)
        if "embed_s" in out and "index_s" in out and out["embed_s"] > out["index_s"]:
            out["embed_rate_per_s"] = round(e.get("embedded_entities", 0) / (out["embed_s"] - out["index_s"]), 1)
        out["peak_rss_mb"] = round(peak, 1)
        if asked:
            out.update(prompts=len(asked), prompt_p50_s=round(statistics.median(asked), 3))
        if "first_tier_s" in out and "first_tier_dropped_s" not in out:
            out["peak_rss_both_tiers_mb"] = out["peak_rss_mb"]  # still held when the run stopped
        out["first_tier"] = e.get("first_tier")
    finally:
        variant.stop(clone)
        shutil.rmtree(clone, ignore_errors=True)
    out["load_after"] = load()
    return out


# ---------------------------------------------------------------- report

def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _stop_on_sigterm(signum, frame) -> None:
    """SIGTERM as SystemExit, so that the ``finally`` blocks stop the daemons and remove the clones."""
    raise SystemExit(f"stopped by signal {signum}")


def main() -> None:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=HERE, help="the cogd checkout under test (default: this one)")
    parser.add_argument("--baseline-src", type=Path, help="another cogd checkout, measured in the same run")
    parser.add_argument("--source", type=Path, default=HERE, help="the repository `cogd up` serves (cloned fresh)")
    parser.add_argument("--rounds", type=int, default=3, help="first-pack rounds per variant (0: skip)")
    parser.add_argument("--no-stdlib", action="store_true", help="skip the standard-library daemon run")
    parser.add_argument("--no-embed-wait", action="store_true", help="stdlib: stop after the lexical index")
    parser.add_argument("--timeout", type=float, default=3600.0, help="stdlib: seconds to wait for the full embedding")
    parser.add_argument("--poll", type=float, default=0.5, help="stdlib: seconds between status polls")
    parser.add_argument("--prompt-every", type=float, default=0.0,
                        help="stdlib: ask for a prompt's context pack every S seconds after the index (0: never)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    variants = [Variant("current", args.src)]
    if args.baseline_src:
        variants.append(Variant("baseline", args.baseline_src))
    work = Path(tempfile.mkdtemp(prefix="cogd-bench-up-"))
    result: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_start": load()},
                    "variants": {v.name: str(v.src) for v in variants}, "source": str(args.source),
                    "first_pack": {v.name: [] for v in variants}, "stdlib": {}}
    try:
        for n in range(args.rounds):
            for variant in variants if n % 2 == 0 else variants[::-1]:
                result["first_pack"][variant.name].append(first_pack(variant, args.source, work, n))
                if not args.json:
                    r = result["first_pack"][variant.name][-1]
                    print(f"[{variant.name}] round {n + 1}: pack at {r['pack_start']} s, exit {r['exit']} s "
                          f"(load {r['load_before'][0]} → {r['load_after'][0]})", flush=True)
        if not args.no_stdlib:
            template = make_stdlib(work / "stdlib-template")
            for variant in variants:
                result["stdlib"][variant.name] = stdlib_run(variant, template, work, embed_wait=not args.no_embed_wait,
                                                            timeout=args.timeout, poll=args.poll,
                                                            prompt_every=args.prompt_every)
                if not args.json:
                    print(f"[{variant.name}] stdlib: {json.dumps(result['stdlib'][variant.name])}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_end"] = load()
    for name, rounds in result["first_pack"].items():
        result.setdefault("summary", {})[name] = {
            "pack_start_median_s": _median([r["pack_start"] for r in rounds]),
            "pack_end_median_s": _median([r["pack_end"] for r in rounds]),
            "exit_median_s": _median([r["exit"] for r in rounds]),
            "index_line_median_s": _median([r["index"] for r in rounds if "index" in r]),
            "daemon_line_median_s": _median([r["daemon"] for r in rounds if "daemon" in r]),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["machine"]
    print(f"\nmachine: Python {m['python']}, {m['cpus']} CPUs, load average {m['load_start']} at start, "
          f"{m['load_end']} at end")
    if args.rounds:
        print(f"first pack: `cogd up` on a fresh clone of {args.source}, {args.rounds} rounds, medians (s):")
        print(f"  {'variant':<10} {'daemon up':>10} {'index line':>10} {'pack shown':>10} {'pack end':>9} {'exit':>7}"
              f"  goal ≤ {GOAL_PACK_S:g} s")
        for name, s in result["summary"].items():
            verdict = "meets" if s["pack_end_median_s"] is not None and s["pack_end_median_s"] <= GOAL_PACK_S else "MISSES"
            print(f"  {name:<10} {s['daemon_line_median_s']!s:>10} {s['index_line_median_s']!s:>10} {s['pack_start_median_s']!s:>10} "
                  f"{s['pack_end_median_s']!s:>9} {s['exit_median_s']!s:>7}  {verdict}")
        for name, rounds in result["first_pack"].items():
            print(f"  [{name}] {rounds[-1]['index_line']}\n  [{name}] {rounds[-1]['embedding_line']}")
    for name, s in result["stdlib"].items():
        e = s.get("embedding") or {}
        print(f"stdlib [{name}]: {s.get('files')} files, {s.get('entities')} code entities "
              f"(+{s.get('file_entities')} file entities); lexical index {s.get('index_s')} s; "
              f"front ({s.get('front_entities', '-')} entities) {s.get('front_s', '-')} s; "
              f"full embedding {s.get('embed_s', '-')} s"
              + (f" (stopped waiting at {s['timed_out_s']} s, coverage {s.get('coverage')}, "
                 f"{e.get('rate_per_s')}/s at the end)" if "timed_out_s" in s else "")
              + (f", {s['embed_rate_per_s']} entities/s" if "embed_rate_per_s" in s else "")
              + (f"; first tier (every entity a static vector) at {s['first_tier_s']} s, "
                 f"{round(s['first_tier_s'] - s['index_s'], 2) if 'index_s' in s else '-'} s after the lexical index "
                 f"(its sync {s.get('first_tier_sync_s')} s, {s.get('first_tier_model')}), dropped at "
                 f"{s.get('first_tier_dropped_s', '-')} s, peak RSS while both tiers were held "
                 f"{s.get('peak_rss_both_tiers_mb')} MB" if "first_tier_s" in s else "; no first tier")
              + f"; daemon peak RSS {s.get('peak_rss_mb')} MB ({s.get('peak_rss_at_index_mb')} MB when the "
              f"lexical index was done, resident then {s.get('rss_at_index_mb')} MB"
              + (f"; {s.get('peak_rss_at_first_tier_mb')} MB with the first tier ready, resident then "
                 f"{s.get('rss_at_first_tier_mb')} MB" if "first_tier_s" in s else "")
              + "".join(f"; {int(k):,} embedded: {v} MB" for k, v in (s.get("peak_rss_by_embedded") or {}).items())
              + (f"; {s['prompts']} context packs asked during it, p50 {s['prompt_p50_s']} s" if s.get("prompts") else "")
              + f"); model {e.get('model')}; "
              f"load {s['load_before']} → {s['load_after']}")


if __name__ == "__main__":
    main()
