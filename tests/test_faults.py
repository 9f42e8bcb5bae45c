"""Faults found by trying to break cogd: each one now ends in a clear outcome, not a hang."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import (HOOK_EXIT_SLACK_S, WAIT_S, Daemon, cogd_in_process, lexical_only, make_repo, payload, run_cogd,
                      run_hook, wait_for)
from cogd.rpc.client import MAX_DEADLINE_MS
from cogd.rpc import control
from cogd.rpc.client import call
from cogd.index.indexer import read_source
from cogd.paths import Layout
from cogd.usage.touches import touches_from_tool_use

SMALL = {"pkg/mod.py": "def alpha():\n    return 1\n\n\ndef beta():\n    return alpha()\n"}


@pytest.fixture
def repo(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", SMALL))
    yield root
    Daemon(root).stop()


def test_deeply_nested_file_does_not_freeze_the_daemon(repo):
    # 200,000 nested brackets: tree-sitter's tags query takes minutes on this.
    (repo / "deep.py").write_bytes(b"x = [\n" + b"[\n" * 200_000)
    parse_timeout_s = 3.0  # set here: a status that waited for the parse would take about this long
    (repo / ".cogd" / "config.toml").write_text(
        f"[embed]\nenabled = false\n[index]\nparse_timeout_ms = {parse_timeout_s * 1000:.0f}\n")
    run_cogd(repo, "start")
    layout = Layout(repo)
    slowest = 0.0

    def indexed() -> dict | None:
        nonlocal slowest
        started = time.monotonic()
        status = call(layout.socket_path, "status", {}, timeout=WAIT_S)
        slowest = max(slowest, time.monotonic() - started)
        return status if status["index"]["files"] == 2 and status["index"]["state"] == "idle" else None

    status = wait_for(indexed, WAIT_S, "the index with the deep file")
    assert slowest < parse_timeout_s, f"status took {slowest:.2f} s while the file was being parsed"
    assert status["index"]["files"] == 2
    files = {(r["language"], r["status"]): r["n"] for r in json.loads(run_cogd(repo, "stats", "--json").stdout)["files"]}
    assert files == {("python", "ok"): 1, ("python", "timeout"): 1}
    hits = json.loads(run_cogd(repo, "search", "beta", "--json").stdout)
    assert hits[0]["id"] == "pkg/mod.py::beta"


def test_deleted_index_database_is_rebuilt(repo):
    run_cogd(repo, "start")
    cogd_in_process(repo, "index")  # after the real start: its code here, asking the daemon
    layout = Layout(repo)
    for suffix in ("", "-wal", "-shm"):
        Path(str(layout.index_db) + suffix).unlink(missing_ok=True)

    def rebuilt() -> list:
        try:
            hits = call(layout.socket_path, "search", {"query": "alpha"}, timeout=WAIT_S)["hits"]
        except Exception:
            hits = []
        ready = hits and layout.index_db.exists() and call(layout.socket_path, "status", {})["index"]["files"] == 1
        return hits if ready else []

    hits = wait_for(rebuilt, WAIT_S, "the rebuilt index")
    assert hits[0]["id"] == "pkg/mod.py::alpha"
    assert layout.index_db.exists()
    assert "was deleted or replaced: rebuilding it" in layout.daemon_log.read_text()


def test_touch_with_nothing_to_do_returns_at_once(repo):
    run_cogd(repo, "start")
    cogd_in_process(repo, "index")  # after the real start: its code here, asking the daemon
    layout = Layout(repo)
    wait_s = 600  # what a touch that waited for nothing would take
    started = time.monotonic()
    call(layout.socket_path, "index.touch", {"paths": ["/etc/passwd"], "wait": True, "timeout_s": wait_s}, timeout=wait_s)
    call(layout.socket_path, "index.touch", {"paths": [], "wait": True, "timeout_s": wait_s}, timeout=wait_s)
    assert time.monotonic() - started < wait_s / 10
    assert call(layout.socket_path, "status", {})["index"]["queue_depth"] == 0


def test_bad_timeouts_are_bad_requests(repo):
    run_cogd(repo, "start")
    layout = Layout(repo)
    for bad in (None, "s", [], 1e308, -1, 0):
        with pytest.raises(Exception) as caught:
            call(layout.socket_path, "index.refresh", {"timeout_s": bad})
        assert getattr(caught.value, "kind", "") == "bad_request"


def test_stop_never_signals_a_process_that_is_not_the_daemon(repo, tmp_path):
    layout = Layout(repo).ensure()
    assert control.is_daemon_process(os.getpid(), layout) is False
    fd = control.try_lock(layout)  # a command working without a daemon holds the lock
    try:
        layout.pid_file.write_text(json.dumps({"pid": os.getpid()}))  # a stale pid file naming someone else
        assert control.stop(layout, timeout=1) is False  # and this process is still alive to say so
    finally:
        os.close(fd)


def test_hook_survives_absurd_deadline_settings(repo):
    run_cogd(repo, "start")  # otherwise the hooks start one, which could outlive the fixture's stop
    for value in ("99999999999999999999", "²", "-5", "1e9"):
        proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, prompt="alpha"),
                                 env={"COGD_HOOK_DEADLINE_MS": value}, timeout=MAX_DEADLINE_MS / 1000 + 2 * HOOK_EXIT_SLACK_S)
        # a huge setting is clamped to MAX_DEADLINE_MS: the hook never waits longer than that
        assert proc.returncode == 0 and proc.stderr == b"" and seconds < MAX_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S


def test_fifo_at_an_indexed_path_is_refused_not_waited_for(tmp_path):
    import threading

    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:  # on a thread: a read that waits for a writer would wait for ever
        try:
            read_source(fifo, 1 << 20)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 — the test looks at it
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(WAIT_S)
    if reader.is_alive():  # unblock it (a writer arrives) so that the thread ends
        with open(fifo, "wb"):
            pass
        raise AssertionError("read_source waited on the FIFO")
    assert isinstance(outcome[0], OSError), outcome


def test_long_tokens_in_bash_commands_stay_cheap(tmp_path):
    payload_ = {"tool_name": "Task", "cwd": str(tmp_path), "tool_input": {"prompt": "x" * 20_000},
                "tool_response": {"content": [{"type": "text", "text": "a/" * 10_000}] * 40}}
    started = time.monotonic()
    assert touches_from_tool_use(payload_, tmp_path) == []
    # Milliseconds when linear; the quadratic scan this guards against took minutes. The bound
    # is that gap, not this machine's speed.
    assert time.monotonic() - started < 30
