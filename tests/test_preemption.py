"""Background work gives way to requests: the embedder waits between batches while a request is
in flight, its thread runs at a lower priority, and the hook benchmark's load never outlives it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import Daemon, daemon_processes, interruptible, make_repo, run_cogd, wait_for
from cogd.config import EmbedConfig
from cogd.daemon.embedder import EmbeddingWorker
from cogd.daemon.scheduling import RequestTracker, Yielding, lower_thread_priority, thread_nice
from cogd.embed.encoder import Encoder
from cogd.embed.text import entity_text
from cogd.index import store
from cogd.index.vectors import quantize_rows
from cogd.index.indexer import Indexer
from cogd.paths import Layout

EMBED_WAIT_S = 600.0  # loading the real model and embedding a handful of entities, on a busy machine
pytestmark = pytest.mark.timeout(4 * EMBED_WAIT_S)
BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench_hooks.py"
LOAD_MARK = b"cogd-bench-load"

FILES = {
    "shop/cart.py": (
        '"""A shopping cart."""\n\n\n'
        "class Cart:\n"
        "    def add_item(self, sku, quantity):\n"
        '        """Put a product in the basket."""\n'
        "        self.items[sku] = self.items.get(sku, 0) + quantity\n\n"
        "    def total_price(self, prices):\n"
        '        """Sum what the customer owes."""\n'
        "        return sum(prices[s] * q for s, q in self.items.items())\n"
    ),
    "shop/mail.py": (
        "def send_receipt(address, body):\n"
        '    """Email the receipt to the customer."""\n'
        "    return (address, body)\n"
    ),
}
ENTITIES = 6  # 2 files, 1 class, 3 functions


def _task_ids() -> set[int]:
    """The thread ids of this process (``/proc/self/task``)."""
    return {int(t) for t in os.listdir("/proc/self/task")}


def _thread_nice(tid: int) -> int | None:
    """The nice value of thread ``tid`` of this process (``/proc/self/task/TID/stat`` field 19),
    None when the thread has ended meanwhile."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[16])
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------- the tracker alone

def test_a_wait_ends_when_the_request_leaves_and_a_stop_wakes_it():
    tracker = RequestTracker()
    assert tracker.wait_quiet(0.0, 600.0) == 0.0 and tracker.waits == 0  # nothing in flight: no wait
    with tracker.track():
        assert tracker.in_flight == 1
    assert (tracker.in_flight, tracker.requests) == (0, 1)

    tracker.enter()
    started = threading.Event()
    done: list[float] = []
    waiter = threading.Thread(target=lambda: done.append(tracker.wait_quiet(0.0, 600.0, on_wait=started.set)))
    waiter.start()
    assert started.wait(60)
    assert not done  # still waiting: the request is in flight and the cap is ten minutes away
    tracker.leave()
    waiter.join(60)
    assert done and done[0] > 0 and tracker.waits == 1

    stopping = threading.Event()
    tracker.enter()  # never leaves: only the stop ends this wait
    started.clear()
    waiter = threading.Thread(target=lambda: done.append(tracker.wait_quiet(0.0, 600.0, stopping.is_set, started.set)))
    waiter.start()
    assert started.wait(60)
    stopping.set()
    tracker.wake()
    waiter.join(60)
    assert not waiter.is_alive() and len(done) == 2 and tracker.waits == 2


def test_the_cap_bounds_a_wait_behind_a_request_that_never_ends():
    tracker = RequestTracker()
    tracker.enter()
    waited = tracker.wait_quiet(0.0, 0.05)
    assert waited >= 0.05 and tracker.waits == 1 and tracker.in_flight == 1


def test_a_thread_lowers_only_its_own_priority_and_its_children_inherit_it():
    seen: dict[str, int] = {}

    def background():
        seen["after"] = lower_thread_priority(7)
        child = threading.Thread(target=lambda: seen.__setitem__("child", thread_nice()))
        child.start()
        child.join()
        seen["again"] = lower_thread_priority(3)  # already nicer than 3: unchanged

    before = thread_nice()
    t = threading.Thread(target=background)
    t.start()
    t.join()
    assert seen == {"after": max(7, before), "child": max(7, before), "again": max(7, before)}
    assert thread_nice() == before  # the calling (main) thread is untouched


# ---------------------------------------------------------------- the embedder, in-process, real model

@pytest.fixture
def indexed(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    layout = Layout(root).ensure()
    indexer = Indexer(root, layout.index_db)
    indexer.refresh()
    count = indexer.conn.execute("SELECT count(*) FROM entities").fetchone()[0]
    indexer.close()
    assert count == ENTITIES
    return layout


def test_a_request_in_flight_pauses_embedding_between_batches(indexed, monkeypatch):
    layout = indexed
    tracker = RequestTracker()
    batch_calls: list[int] = []  # sizes of the embedder thread's inference batches, in order
    pause_after = 2  # a request arrives while the embedder runs its second batch
    real_encode, real_run = Encoder.encode, Encoder._run

    def run(self, session, encodings):
        out = real_run(self, session, encodings)
        if threading.current_thread().name == "cogd-embed":
            batch_calls.append(len(encodings))
            if len(batch_calls) == pause_after:
                tracker.enter()  # as the socket server does when a hook's request comes in
        return out

    monkeypatch.setattr(Encoder, "_run", run)
    before = _task_ids()
    # two intra-op threads: onnxruntime starts a pool thread of its own, which must inherit the nice value
    # quiet window 0 and a cap of ten minutes: the pause ends when the request leaves, not on a clock
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=2, batch_size=2),
                             Yielding(tracker, quiet_s=0.0, max_s=EMBED_WAIT_S, nice=5))
    try:
        wait_for(lambda: worker.yields >= 1 or worker.state == "error", EMBED_WAIT_S, "the pause")
        assert worker.state == "embedding", worker.error
        # waiting before the third batch: exactly two batches (four vectors) done, none since
        assert (worker.yields, worker.batches, batch_calls, tracker.in_flight) == (1, 2, [2, 2], 1)
        assert worker.status()["yields"] == 1 and worker.status()["phase"] == "embedding"
        # every thread the embedder made (its own, onnxruntime's pool, LanceDB's runtime) is at 5;
        # this test's thread is not
        # (only those: threads that earlier tests' components start meanwhile, such as a runtime
        # pool LanceDB made at another priority, can appear in the same process)
        made = _task_ids() - before
        nice = max(5, thread_nice())
        at_nice = {t for t in made if _thread_nice(t) == nice}
        assert worker._thread.native_id in at_nice and threading.get_native_id() not in made
        assert len(at_nice) >= 2, {t: _thread_nice(t) for t in made}  # the embedder's and onnxruntime's pool thread

        tracker.leave()
        wait_for(lambda: worker.phase == "current" or worker.state == "error", EMBED_WAIT_S, "every vector")
        assert (worker.coverage, worker.embedded, worker.batches, batch_calls) == (1.0, ENTITIES, 3, [2, 2, 2])
        assert (worker.yields, tracker.waits) == (1, 1)
        # batch by batch, the vectors are the ones the encoder gives for the whole list at once
        conn = store.connect(layout.index_db, readonly=True)
        try:
            rows = store.embedding_rows(conn, list(store.entity_states(conn)))
        finally:
            conn.close()
        texts = [entity_text(r[1], r[2], r[3], r[4], r[7], r[5]) for r in rows]
        whole = real_encode(worker.encoder, texts)
        stored = np.stack([worker.dense._matrix[worker.dense._pos[r[0]]] for r in rows])
    finally:
        worker.stop()
    # the KNN matrix keeps int8 codes (cogd.index.vectors.quantize_rows): batch and whole-list floats
    # differ by ~1e-6, which can move a component lying on a rounding boundary by one code, never more
    codes, _factors = quantize_rows(whole)
    assert len(rows) == ENTITIES and stored.dtype == np.int8
    assert np.abs(stored.astype(np.int16) - codes.astype(np.int16)).max() <= 1
    assert (stored == codes).mean() > 0.95


def test_batches_run_on_one_thread_while_a_request_is_in_flight(indexed):
    layout = indexed
    tracker = RequestTracker()
    tracker.enter()  # a request that stays in flight for the whole pass; no waiting (cap 0)
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=2, batch_size=2),
                             Yielding(tracker, quiet_s=0.0, max_s=0.0, nice=0))
    try:
        wait_for(lambda: worker.phase in ("current", "error"), EMBED_WAIT_S, "every vector")
        assert (worker.coverage, worker.yields, worker.batches, worker.light_batches) == (1.0, 0, 3, 3)
        assert sorted(worker.encoder._sessions) == [1, 2]  # the two-thread session and the light one
        assert worker.status()["light_batches"] == 3
    finally:
        tracker.leave()
        worker.stop()


def test_without_yielding_the_embedder_never_waits(indexed):
    layout = indexed
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=1, batch_size=2))
    try:
        wait_for(lambda: worker.phase in ("current", "error"), EMBED_WAIT_S, "every vector")
        assert (worker.coverage, worker.yields, worker.batches) == (1.0, 0, 3)
    finally:
        worker.stop()


# ---------------------------------------------------------------- a real daemon

def test_the_daemon_embedder_waits_behind_a_request_and_status_does_not_count(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    (root / ".cogd").mkdir()
    # The quiet window after the last request (cogd index's) is ten minutes: the embedder must
    # wait before its first batch. Status requests (polled below) do not count as requests.
    (root / ".cogd" / "config.toml").write_text(
        "[embed]\nthreads = 1\n[daemon]\npreempt_quiet_ms = 600000\npreempt_max_ms = 600000\nbackground_nice = 4\n",
        encoding="utf-8")
    d = Daemon(root)
    try:
        d.start()  # cogd start; cogd index (a tracked request)

        def paused():
            embedding = d.status()["embedding"]
            assert embedding["state"] != "error", embedding
            return embedding if embedding["yields"] >= 1 else None

        embedding = wait_for(paused, EMBED_WAIT_S, "the embedder to wait for the quiet window")
        assert (embedding["phase"], embedding["computed"], embedding["embedded_entities"]) == ("embedding", 0, 0)
        assert embedding["entities"] == ENTITIES
        assert embedding["yields"] == 1  # one wait, still under way
        pid = d.status()["pid"]
        nices = set()
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/stat", "rb") as fh:
                nices.add(int(fh.read().rsplit(b")", 1)[1].split()[16]))
        # the embedder thread at 4; the event loop and the request threads stay at the daemon's 0
        assert {0, 4} <= nices
        run_cogd(root, "stop")  # a waiting embedder does not hold the stop up (its wait is woken)
        wait_for(lambda: not daemon_processes(root), 60, "the daemon to exit")
    finally:
        d.stop()


# ---------------------------------------------------------------- bench_hooks' busy processes

def _load_processes() -> dict[int, bytes]:
    """pid → argv of every live busy process of a hook benchmark (``cogd-bench-load`` in argv)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                argv = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                if fh.read().rsplit(b") ", 1)[-1][:1] == b"Z":
                    continue
        except OSError:
            continue
        if LOAD_MARK in argv.split(b"\0"):
            found[int(entry.name)] = argv
    return found


def _alive(pids) -> list[int]:
    return [p for p in pids if p in _load_processes()]


def _bench(*args: str) -> list[str]:
    return [sys.executable, str(BENCH), "--lexical", "--packages", "json", "--warmup", "0", *args]


def test_bench_load_processes_are_gone_after_a_normal_run(tmp_path):
    proc = subprocess.run(_bench("--load", "2", "--runs", "2", "--other-runs", "2", "--json"),
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr  # 1: a latency goal not met on a busy machine
    result = json.loads(proc.stdout)
    pids = result["load"]["pids"]
    assert len(pids) == 2 and result["load"]["processes"] == 2
    assert all(cpu is not None and cpu > 0 for cpu in result["load"]["cpu_s"])  # they really were busy
    assert _alive(pids) == []
    assert result["ratio"]["ratio"] == pytest.approx(result["results"][0]["p50_ms"] / result["results"][3]["p50_ms"],
                                                     rel=1e-2)
    assert [g["command"] for g in result["goals"]][-1] == "cogd-hook prompt-submit"  # the ratio goal, with --load


def _start_bench_until_load(tmp_path) -> tuple[subprocess.Popen, list[int], Path]:
    """Start a long benchmark; return it once its busy processes run, with their pids and its repository."""
    proc = subprocess.Popen(_bench("--load", "2", "--runs", "100000"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, preexec_fn=interruptible)
    lines: list[str] = []
    pids: list[int] = []
    repo = None
    for line in proc.stderr:  # the bench logs its progress line by line
        lines.append(line)
        if m := re.match(r"building the repository in (\S+) \.\.\.", line):
            repo = Path(m.group(1))
        if m := re.match(r"load: 2 busy processes started \(pids ([\d ]+)\)", line):
            pids = [int(x) for x in m.group(1).split()]
            break
    assert pids and repo is not None, "".join(lines)
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
    return proc, pids, repo


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_bench_load_processes_are_gone_after_an_interrupt(tmp_path, how):
    proc, pids, repo = _start_bench_until_load(tmp_path)
    try:
        # the bench logs the pids right after starting them: each shows its own argv once it has exec'd
        wait_for(lambda: len(_alive(pids)) == 2, 60, "both busy processes to run")
        proc.send_signal(getattr(signal, how))  # Ctrl-C reaches only the bench: they are in their own groups
        assert proc.wait(120) == 130
        assert _alive(pids) == []
        assert not daemon_processes(repo) and not repo.exists()  # its daemon stopped, its folder removed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if repo.exists():
            Daemon(repo).stop()


def test_bench_load_processes_exit_on_their_own_when_the_bench_is_killed(tmp_path):
    proc, pids, repo = _start_bench_until_load(tmp_path)
    try:
        proc.kill()  # no finally, no atexit: the busy processes notice their parent is gone
        proc.wait()
        wait_for(lambda: not _alive(pids), 60, "the busy processes to exit")
    finally:
        if repo.exists():
            Daemon(repo).stop()  # SIGKILL left the daemon and the folder: ours to clean
            shutil.rmtree(repo.parent, ignore_errors=True)


def test_daemon_scheduling_settings_are_checked_and_capped(tmp_path):
    from cogd.config import ConfigError, load_config

    path = tmp_path / "config.toml"
    path.write_text("[daemon]\nbackground_nice = 25\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="background_nice must be 0-19"):
        load_config(path)
    # a committed config may not stall embedding behind requests for more than a minute in a row
    path.write_text("[daemon]\npreempt_max_ms = 86400000\npreempt_quiet_ms = 90000000\n", encoding="utf-8")
    daemon = load_config(path).daemon
    assert (daemon.preempt_max_ms, daemon.preempt_quiet_ms, daemon.background_nice) == (60_000, 60_000, 10)
    defaults = load_config(tmp_path / "missing.toml").daemon
    assert (defaults.preempt_quiet_ms, defaults.preempt_max_ms, defaults.background_nice) == (0, 2000, 10)
