"""The daemon as a real process on a real socket: one per repository, crash
recovery, long paths, permissions, the CLI's JSON forms, direct mode."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import (HOOK_DEADLINE_MS, WAIT_S, Daemon, daemon_processes, hook_log_lines, lexical_only, make_repo,
                      payload, run_cogd, run_hook, wait_for)
from cogd.rpc import control
from cogd.rpc.client import call
from cogd.paths import AF_UNIX_PATH_MAX, Layout

SAMPLE = {
    "pkg/__init__.py": '"""A tiny package."""\n',
    "pkg/geometry.py": (
        '"""Shapes and their areas."""\n\n\n'
        "class Circle:\n"
        '    """A circle given by its radius."""\n\n'
        "    def __init__(self, radius):\n        self.radius = radius\n\n"
        "    def area(self):\n"
        '        """Area of the circle: pi r squared."""\n'
        "        return 3.14159 * self.radius ** 2\n\n\n"
        "def perimeter_of_square(side):\n"
        '    """Perimeter of a square with the given side."""\n'
        "    return 4 * side\n"
    ),
    "web/app.js": "// Client entry point.\nexport function renderWidget(el) {\n  return el;\n}\n",
}


def daemon_pids(root: Path) -> list[int]:
    """The pids of the daemons whose root is exactly ``root``."""
    return sorted(pid for pid, r in daemon_processes(root).items() if r == str(root))


@pytest.fixture
def repo(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    yield root
    Daemon(root).stop()


def test_status_json_and_cli_forms(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    status = json.loads(run_cogd(repo, "status", "--json").stdout)
    assert status["running"] is True
    assert status["pid"] == daemon_pids(repo)[0]
    assert status["uptime_s"] >= 0
    assert status["index"]["files"] == 3
    assert status["index"]["entities"] == 5  # Circle, __init__, area, perimeter_of_square, renderWidget
    assert status["index"]["commit"] and len(status["index"]["commit"]) == 40

    hits = json.loads(run_cogd(repo, "search", "area of a circle", "--json").stdout)
    assert hits[0]["id"] == "pkg/geometry.py::Circle.area"
    kinds = {h["kind"] for h in json.loads(run_cogd(repo, "search", "circle", "--kind", "class", "--json").stdout)}
    assert kinds == {"class"}

    shown = json.loads(run_cogd(repo, "show", "pkg/geometry.py::Circle", "--json").stdout)
    assert (shown["kind"], shown["start_line"], shown["end_line"]) == ("class", 4, 12)
    assert {e["id"] for e in shown["edges"]["out"]} == {"pkg/geometry.py::Circle.__init__", "pkg/geometry.py::Circle.area"}
    assert shown["edges"]["in"] == [{"id": "pkg/geometry.py", "kind": "contains", "resolution": ""}]
    assert shown["retrieval_count"] == 0

    missing = run_cogd(repo, "show", "pkg/nope.py::x", check=False)
    assert missing.returncode != 0 and "no entity" in missing.stderr

    stats = json.loads(run_cogd(repo, "stats", "--json").stdout)
    by_kind = {(r["language"], r["kind"]): r["n"] for r in stats["entities"]}
    assert by_kind == {("javascript", "file"): 1, ("javascript", "function"): 1, ("python", "class"): 1,
                       ("python", "file"): 2, ("python", "function"): 1, ("python", "method"): 2}
    assert stats["edges"] == [{"kind": "contains", "resolution": "", "n": 5}]


def test_socket_and_runtime_permissions(repo):
    run_cogd(repo, "start")
    sock = Layout(repo).socket_path
    assert sock == repo / ".cogd" / "run" / "cogd.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600


def test_one_daemon_when_many_start_at_once(repo):
    # Twelve hook processes find no daemon at the same moment; each tries to start one.
    data = payload("user_prompt_submit.json", repo, prompt="circle area")
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda _: run_hook("prompt-submit", data, deadline_ms=HOOK_DEADLINE_MS), range(12)))
    assert all(proc.returncode == 0 for proc, _ in results)
    # Whichever hook took the lock started the daemon; once it answers, count.
    assert control.wait_ready(Layout(repo), timeout=WAIT_S)
    assert len(daemon_pids(repo)) == 1
    # CLI starts racing with each other also converge on that one daemon.
    with ThreadPoolExecutor(6) as pool:
        procs = list(pool.map(lambda _: run_cogd(repo, "start"), range(6)))
    assert all("already running" in p.stdout for p in procs)
    assert len(daemon_pids(repo)) == 1


def test_kill_9_then_restart(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    [pid] = daemon_pids(repo)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not daemon_pids(repo), WAIT_S, "the killed daemon to be gone")
    layout = Layout(repo)
    assert layout.socket_path.exists() and layout.pid_file.exists()  # stale leftovers
    # A hook meanwhile gets nothing (the stale socket refuses it at once, whatever its
    # deadline: it says so in its log) and starts a new daemon.
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, prompt="circle area"),
                       deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0 and proc.stdout == b""
    said = [line.split(" ", 4)[-1] for line in hook_log_lines(repo, proc.pid)]
    assert len(said) == 2 and said[0].startswith("daemon unavailable: "), said
    assert said[1] == "no daemon answered: started one in the background for next time"
    assert run_cogd(repo, "start").returncode == 0
    status = json.loads(run_cogd(repo, "status", "--json").stdout)
    assert status["pid"] != pid and status["index"]["entities"] == 5
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, prompt="circle area"),
                       deadline_ms=HOOK_DEADLINE_MS)
    assert "pkg/geometry.py::Circle.area" in proc.stdout.decode()


def test_stop_cleans_up(repo):
    run_cogd(repo, "start")
    layout = Layout(repo)
    assert run_cogd(repo, "stop").stdout.strip() == "daemon stopped"
    assert not daemon_pids(repo)
    assert not layout.socket_path.exists() and not layout.pid_file.exists()
    assert json.loads(run_cogd(repo, "status", "--json").stdout)["running"] is False
    assert "stopped (SIGTERM)" in layout.daemon_log.read_text()


def test_stop_waits_for_a_starting_daemon_to_name_itself(repo, monkeypatch):
    # For its first moments a daemon holds the lock while its pid file is missing or still names
    # the daemon before it (killed with -9, then restarted by a hook): stop must not call that
    # "a command working without a daemon".
    run_cogd(repo, "start")
    layout = Layout(repo)
    try:
        [pid] = daemon_pids(repo)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a pid that has exited: the stale file's
        gone.wait()
        stale = {"pid": gone.pid}
        real_read = control.read_pid
        reads = []

        def starting(layout_):
            reads.append(1)
            return stale if len(reads) <= 3 else real_read(layout_)

        monkeypatch.setattr(control, "read_pid", starting)
        assert control.stop(layout, grace=WAIT_S) is True
        assert len(reads) > 3 and not daemon_pids(repo)
        # With no grace the same stale file is refused, as before: the holder is no daemon it knows.
        run_cogd(repo, "start")
        reads.clear()
        assert control.stop(layout, grace=0) is False
        assert daemon_pids(repo)
    finally:
        monkeypatch.undo()
        run_cogd(repo, "stop")
    assert not daemon_pids(repo) and pid != stale["pid"]


def test_long_repository_path_uses_private_runtime_socket(tmp_path, monkeypatch):
    deep = tmp_path
    while len(str(deep / ".cogd" / "run" / "cogd.sock")) <= AF_UNIX_PATH_MAX + 10:
        deep = deep / "a-rather-long-directory-name"
    root = lexical_only(make_repo(deep, SAMPLE))
    try:
        run_cogd(root, "start")
        sock = Layout(root).socket_path
        assert not str(sock).startswith(str(root))
        assert len(os.fsencode(str(sock))) <= AF_UNIX_PATH_MAX
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        run_cogd(root, "index")
        proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt="perimeter of a square"),
                           deadline_ms=HOOK_DEADLINE_MS)
        assert "pkg/geometry.py::perimeter_of_square" in proc.stdout.decode()
    finally:
        Daemon(root).stop()


def test_direct_mode_without_daemon(repo):
    # No daemon: commands take the lock and work in-process, and start none.
    out = run_cogd(repo, "index").stdout
    assert "5 code entities" in out
    assert not daemon_pids(repo)
    hits = json.loads(run_cogd(repo, "search", "perimeter", "--json").stdout)
    assert hits[0]["id"] == "pkg/geometry.py::perimeter_of_square"
    (repo / "pkg" / "geometry.py").write_text(SAMPLE["pkg/geometry.py"] + "\n\ndef hexagon_area(side):\n    return side\n")
    hits = json.loads(run_cogd(repo, "search", "hexagon", "--json").stdout)
    assert hits[0]["id"] == "pkg/geometry.py::hexagon_area"
    assert not daemon_pids(repo)


def test_index_through_daemon_sees_edits_and_deletions(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    (repo / "web" / "app.js").unlink()
    (repo / "web" / "util.ts").write_text("export function clampValue(x: number): number {\n  return x;\n}\n")
    run_cogd(repo, "index")
    ids = {h["id"] for h in json.loads(run_cogd(repo, "search", "render widget clamp value", "--json").stdout)}
    assert "web/util.ts::clampValue" in ids
    assert not any(i.startswith("web/app.js") for i in ids)


def test_file_save_hook_reindexes_the_file(repo):
    run_cogd(repo, "start")
    run_cogd(repo, "index")
    target = repo / "pkg" / "geometry.py"
    target.write_text(SAMPLE["pkg/geometry.py"] + "\n\ndef trapezoid_area(a, b, h):\n    return (a + b) * h / 2\n")
    proc, _ = run_hook("file-save", None, raw=b"", args=(str(target),), deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0 and proc.stdout == b""
    layout = Layout(repo)
    hits = wait_for(lambda: call(layout.socket_path, "search", {"query": "trapezoid"})["hits"], WAIT_S,
                    "the saved file's new function")
    assert hits[0]["id"] == "pkg/geometry.py::trapezoid_area"


def test_idle_exit(repo):
    (repo / ".cogd").mkdir(exist_ok=True)
    (repo / ".cogd" / "config.toml").write_text("[daemon]\nidle_exit_s = 2\n[embed]\nenabled = false\n")
    run_cogd(repo, "start")
    [pid] = daemon_pids(repo)
    wait_for(lambda: not daemon_pids(repo), WAIT_S, "the idle daemon to exit")
    log = (repo / ".cogd" / "logs" / "daemon.log").read_text()
    assert f"{pid} INFO cogd.daemon.server: stopping: idle for 2 s" in log
    assert "stopped (idle for 2 s)" in log
    assert not Layout(repo).socket_path.exists()


def test_the_daemon_runs_with_two_malloc_arenas_unless_the_user_chose(tmp_path, daemon):
    # glibc arenas per thread kept the daemon's freed memory from being reused (control.daemon_environment)
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    started = daemon(root, index=False)
    pid = json.loads(run_cogd(root, "status", "--json").stdout)["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"MALLOC_ARENA_MAX=" + control.MALLOC_ARENAS.encode() in environ, started
    assert control.daemon_environment({"MALLOC_ARENA_MAX": "8", "X": "1"}) == {"MALLOC_ARENA_MAX": "8", "X": "1"}
    assert control.daemon_environment({})["MALLOC_ARENA_MAX"] == "2"
