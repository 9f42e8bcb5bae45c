"""kill -9 during writes: a real process records, transitions, edits and consolidates (merges) memories
in a loop and is killed at arbitrary moments; afterwards every record file parses (the old or the new
version, never a torn one) and a sync brings the projection level with the files without a refusal
or an illegal_transition. (tests/test_memory_intents.py kills at every named step instead.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from cogd.memory.api import MemoryStore
from cogd.memory.record import read
from conftest import WAIT_S, wait_for

WRITER = r'''
import sys, itertools
from pathlib import Path
from cogd.memory.api import MemoryStore
from cogd.config import ConsolidateConfig
from cogd.memory.consolidate import consolidate
from cogd.memory.errors import MemoryRefused

root = Path(sys.argv[1])
store = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
filler = " ".join(["the watcher coalesces events into batches before the index worker sees them"] * 4)
print("ready", flush=True)
for n in itertools.count():
    body = "\n".join(f"{sys.argv[2]} {n} line {i}: {filler}" for i in range(24))  # about 8 KB
    try:
        rid = store.record("observation", body, title=f"crash test {sys.argv[2]} {n}")["record"]["id"]
        store.transition(rid, "active")
        got = store.get(rid)
        store.edit(rid, got["text"] + "\nappended by edit " + filler + "\n")
        if n % 2:
            store.transition(rid, "rejected", reason="crash test")
        # two near-duplicate candidates from two sessions: consolidation merges them, then promotes the survivor
        store.record("observation", f"{sys.argv[2]} {n}: parse_date returns naive datetimes without a zone",
                     session_id="s1")
        store.record("observation", f"{sys.argv[2]} {n}: parse_date returns naive datetimes without a zone given",
                     session_id="s2")
        consolidate(store, root / ".cogd" / "state.db", ConsolidateConfig(retention_days=0))
    except MemoryRefused as exc:
        print("refused", exc.kind, exc, file=sys.stderr, flush=True)
'''


def test_kill_9_during_writes_leaves_only_whole_files(tmp_path):
    root = tmp_path / "repo"
    (root / ".cogd" / "index").mkdir(parents=True)
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    rng = random.Random(1)
    for round_no in range(4):
        proc = subprocess.Popen([sys.executable, str(script), str(root), f"round{round_no}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        before = len(list((root / ".cogd" / "memory").glob("*/*.md")))
        try:
            line = proc.stdout.readline().strip()
            if line != "ready":
                proc.wait(timeout=WAIT_S)
                raise AssertionError(f"the writer did not start (round {round_no}): {proc.stderr.read()}")
            # this round's first record is on disk (however slow the machine), then a kill at a random moment
            wait_for(lambda: len(list((root / ".cogd" / "memory").glob("*/*.md"))) > before, WAIT_S,
                     f"round {round_no}'s first record")
            time.sleep(rng.uniform(0.2, 0.9))
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=WAIT_S)
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr, stderr
        files = sorted((root / ".cogd" / "memory").glob("*/*.md"))
        assert files, "the writer wrote nothing before the kill"
        for path in files:
            record = read(path)  # raises on a torn file
            assert record.body.startswith("round")
    store = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    try:
        store.sync()
        assert store.status()["problems"] == []
        files = {p.stem: read(p).status for p in (root / ".cogd" / "memory").glob("*/*.md")}
        projected = {r["id"]: r["status"] for r in store.projection.rows()}
        assert projected == files
        assert len(files) >= 2
        # no kill, wherever it hit (a merge half written included), reads as an illegal hand edit
        assert [e for e in store.events() if e["action"] in ("illegal_transition", "refused")] == []
        assert store.ledger.intents() == []
    finally:
        store.close()
    # the atomic writer's temporaries left by a kill are dot files, never read as records
    leftovers = [p.name for p in (root / ".cogd" / "memory").glob("*/.*")]
    assert all(name.endswith(".tmp") for name in leftovers)
