"""Faults found by trying to break cogd: each one now ends in a clear outcome, not a hang."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import lexical_only, make_repo, payload, run_cogd, run_hook
from cogd.daemon import control
from cogd.daemon.client import call
from cogd.index.indexer import read_source
from cogd.paths import Layout
from cogd.usage.touches import touches_from_tool_use

SMALL = {"pkg/mod.py": "def alpha():\n    return 1\n\n\ndef beta():\n    return alpha()\n"}


@pytest.fixture
def repo(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", SMALL))
    yield root
    run_cogd(root, "stop", check=False)


def test_deeply_nested_file_does_not_freeze_the_daemon(repo):
    # 200,000 nested brackets: tree-sitter's tags query takes minutes on this.
    (repo / "deep.py").write_bytes(b"x = [\n" + b"[\n" * 200_000)
    (repo / ".cogd" / "config.toml").write_text("[embed]\nenabled = false\n[index]\nparse_timeout_ms = 500\n")
    run_cogd(repo, "start")
    layout = Layout(repo)
    slowest = 0.0
    deadline = time.monotonic() + 60
    status = {}
    while time.monotonic() < deadline:
        started = time.monotonic()
        status = call(layout.socket_path, "status", {}, timeout=5)
        slowest = max(slowest, time.monotonic() - started)
        if status["index"]["files"] == 2 and status["index"]["state"] == "idle":
            break
        time.sleep(0.2)
    assert slowest < 1.0, f"status took {slowest:.2f} s while the file was being parsed"
    assert status["index"]["files"] == 2
    files = {(r["language"], r["status"]): r["n"] for r in json.loads(run_cogd(repo, "stats", "--json").stdout)["files"]}
    assert files == {("python", "ok"): 1, ("python", "timeout"): 1}
    hits = json.loads(run_cogd(repo, "search", "beta", "--json").stdout)
    assert hits[0]["id"] == "pkg/mod.py::beta"


def test_deleted_index_database_is_rebuilt(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    layout = Layout(repo)
    for suffix in ("", "-wal", "-shm"):
        Path(str(layout.index_db) + suffix).unlink(missing_ok=True)
    deadline = time.monotonic() + 20
    hits = []
    while time.monotonic() < deadline:
        try:
            hits = call(layout.socket_path, "search", {"query": "alpha"}, timeout=5)["hits"]
        except Exception:
            hits = []
        if hits and layout.index_db.exists() and call(layout.socket_path, "status", {})["index"]["files"] == 1:
            break
        time.sleep(0.2)
    assert hits and hits[0]["id"] == "pkg/mod.py::alpha"
    assert layout.index_db.exists()
    assert "was deleted or replaced: rebuilding it" in layout.daemon_log.read_text()


def test_touch_with_nothing_to_do_returns_at_once(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    layout = Layout(repo)
    started = time.monotonic()
    call(layout.socket_path, "index.touch", {"paths": ["/etc/passwd"], "wait": True, "timeout_s": 5})
    call(layout.socket_path, "index.touch", {"paths": [], "wait": True, "timeout_s": 5})
    assert time.monotonic() - started < 2
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
                                 env={"COGD_HOOK_DEADLINE_MS": value})
        assert proc.returncode == 0 and proc.stderr == b"" and seconds < 5


def test_fifo_at_an_indexed_path_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(OSError):
        read_source(fifo, 1 << 20)
    assert time.monotonic() - started < 1


def test_long_tokens_in_bash_commands_stay_cheap(tmp_path):
    payload_ = {"tool_name": "Task", "cwd": str(tmp_path), "tool_input": {"prompt": "x" * 20_000},
                "tool_response": {"content": [{"type": "text", "text": "a/" * 10_000}] * 40}}
    started = time.monotonic()
    assert touches_from_tool_use(payload_, tmp_path) == []
    assert time.monotonic() - started < 0.5
