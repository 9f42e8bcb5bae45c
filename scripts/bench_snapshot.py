#!/usr/bin/env python3
"""Benchmark index snapshots: ``cogd up`` to full embedding coverage with and without a snapshot.

What it measures, in one run
----------------------------
``--source`` (default: the checkout holding this script) is a git repository; ``--back N``
(default 20) picks the publisher's commit, N commits before the source's HEAD (the snapshot a
clone finds when CI published a while ago). ``--stdlib`` makes the source instead: the running
interpreter's standard library (without ``__pycache__`` and ``site-packages``) committed once,
then N commits that each add one function to a different module (a quiet stretch of history).

1. **Publish**: a clone at HEAD~N, ``cogd start``, ``cogd index``, waits for full embedding
   coverage, then ``cogd snapshot publish`` to a ``file://`` store in the temporary directory:
   its time and the snapshot's sizes (uncompressed, stored).
2. **With the snapshot**: a fresh clone at HEAD configured with the store; ``cogd up --no-hooks
   --wait-embed 0``, then ``status`` every ``--poll`` seconds until the lexical index is current
   at HEAD and every entity has its vector: the time from the command's start, the pull's own
   time (from ``cogd up``'s line) and how many vectors the model computed.
3. **Without**: the same with no store configured (a fresh local build, the cache cold).

Both clones use this interpreter's cogd (``python -m cogd.cli``) and the same ``[embed]``
settings (``--model``, default the default model; ``--lexical`` measures the index alone). The
load average is printed with each measurement: on a shared machine other work moves the figures.
The temporary directory is removed at the end (``--keep`` keeps it); every daemon is stopped.

How to run
----------
    python scripts/bench_snapshot.py [--source DIR] [--back 20] [--model minilm] [--lexical] [--json]

Standard library and git only; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "cogd.cli"]
# The cogd under test is this checkout's, never the one inside a cloned tree (cogd's own history):
# the daemon inherits both variables.
ENV = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def sh(args: list[str], cwd: Path, timeout: float = 3600) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} in {cwd} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def cogd(root: Path, *args: str, timeout: float = 3600) -> str:
    return sh([*CLI, *args], root, timeout)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def configure(root: Path, embed: str, uri: str) -> None:
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text(f"[embed]\n{embed}\n[snapshot]\nuri = \"{uri}\"\n")


def clone(source: Path, dest: Path, commit: str) -> Path:
    sh(["git", "clone", "-q", "--no-hardlinks", str(source), str(dest)], dest.parent)
    sh(["git", "checkout", "-q", commit], dest)
    return dest


def stdlib_source(dest: Path, commits: int) -> Path:
    """A git repository of this interpreter's standard library with ``commits`` small commits on top."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(stdlib, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc"))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    sh(["git", "init", "-q", "-b", "main"], dest)
    sh([*git, "add", "-A"], dest)
    sh([*git, "commit", "-q", "-m", "standard library"], dest)
    modules = sorted(p for p in dest.glob("*.py") if p.is_file() and not p.is_symlink())
    for n in range(commits):
        module = modules[n % len(modules)]
        with open(module, "a", encoding="utf-8") as fh:
            fh.write(f"\n\ndef _bench_snapshot_change_{n}(value):\n    \"\"\"Change {n} of the benchmark.\"\"\"\n"
                     f"    return value + {n}\n")
        sh([*git, "commit", "-q", "-am", f"change {n}"], dest)
    return dest


def wait_current(root: Path, head: str, embedded: bool, poll: float, timeout: float) -> dict:
    """The status once the index is at ``head`` and idle and (``embedded``) every entity has a vector."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = json.loads(cogd(root, "status", "--json"))
        index, emb = status.get("index") or {}, status.get("embedding") or {}
        lexical = index.get("commit") == head and index.get("state") == "idle" and not index.get("queue_depth")
        vectors = (not embedded) or (emb.get("phase") == "current" and emb.get("coverage") == 1.0
                                      and emb.get("entities") == index.get("entities", 0) + index.get("files", 0))
        if lexical and vectors:
            return status
        time.sleep(poll)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {root} to be current")


def run_up(root: Path, head: str, embedded: bool, poll: float, timeout: float) -> dict:
    """``cogd up`` in ``root`` until current; seconds, the pull line, vectors computed."""
    began = time.monotonic()
    try:
        out = cogd(root, "up", "--no-hooks", "--wait-embed", "0")
        status = wait_current(root, head, embedded, poll, timeout)
        seconds = time.monotonic() - began
    finally:
        subprocess.run([*CLI, "stop"], cwd=root, capture_output=True, timeout=120, env=ENV)
    pulled = re.search(r"snapshot of \w+ installed .* in ([\d.]+) s", out)
    return {"seconds": round(seconds, 2), "pull_s": float(pulled.group(1)) if pulled else None,
            "pull_line": next((line for line in out.splitlines() if line.startswith("snapshot ")), ""),
            "computed": (status.get("embedding") or {}).get("computed"),
            "entities": status["index"]["entities"], "files": status["index"]["files"], "load": load()}


def publish(source: Path, tmp: Path, commit: str, embed: str, store: str, embedded: bool, poll: float,
            timeout: float) -> dict:
    root = clone(source, tmp / "publisher", commit)
    configure(root, embed, store)
    began = time.monotonic()
    try:
        cogd(root, "start")
        cogd(root, "index")
        wait_current(root, commit, embedded, poll, timeout)
        build_s = time.monotonic() - began
        t0 = time.monotonic()
        result = json.loads(cogd(root, "snapshot", "publish", "--json"))
        result["publish_s"] = round(time.monotonic() - t0, 2)
    finally:
        subprocess.run([*CLI, "stop"], cwd=root, capture_output=True, timeout=120, env=ENV)
    result["build_s"] = round(build_s, 2)
    result["load"] = load()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--back", type=int, default=20)
    parser.add_argument("--stdlib", action="store_true", help="the standard library with --back small commits")
    parser.add_argument("--model", default="", help="[embed] model (default: cogd's default)")
    parser.add_argument("--lexical", action="store_true", help="[embed] enabled = false: the index alone")
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embed = "enabled = false" if args.lexical else (f'model = "{args.model}"' if args.model else "enabled = true")
    tmp = Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    try:
        source = stdlib_source(tmp / "source", args.back) if args.stdlib else args.source.resolve()
        head = sh(["git", "rev-parse", "HEAD"], source).strip()
        base = sh(["git", "rev-parse", f"HEAD~{args.back}"], source).strip()
        (tmp / "store").mkdir()  # a file:// store must exist (an unmounted share is not created on the local disk)
        store = f"file://{tmp / 'store'}"
        report = {"source": str(source), "head": head, "snapshot_commit": base, "back": args.back, "embed": embed}
        report["publish"] = publish(source, tmp, base, embed, store, not args.lexical, args.poll, args.timeout)
        with_root = clone(source, tmp / "with", head)
        configure(with_root, embed, store)
        report["with_snapshot"] = run_up(with_root, head, not args.lexical, args.poll, args.timeout)
        without_root = clone(source, tmp / "without", head)
        configure(without_root, embed, "")
        report["without"] = run_up(without_root, head, not args.lexical, args.poll, args.timeout)
        report["speedup"] = round(report["without"]["seconds"] / max(report["with_snapshot"]["seconds"], 1e-9), 2)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    p, w, n = report["publish"], report["with_snapshot"], report["without"]
    print(f"source {source} HEAD {head[:12]}; snapshot of HEAD~{args.back} ({base[:12]}); {embed}")
    print(f"publish: {p['counts']['entities']} entities, {p['counts']['vectors']} vectors, "
          f"{p['files_bytes'] / 1e6:.1f} MB ({p['stored_bytes'] / 1e6:.1f} MB stored) in {p['publish_s']} s "
          f"(the publisher's own build: {p['build_s']} s; load {p['load']})")
    print(f"with snapshot: current in {w['seconds']} s (pull {w['pull_s']} s; model computed {w['computed']}; "
          f"load {w['load']})")
    print(f"without:       current in {n['seconds']} s (model computed {n['computed']}; load {n['load']})")
    print(f"speed-up: {report['speedup']}x")


if __name__ == "__main__":
    main()
