"""A delivery is in the ledger if and only if its pack reached the client; a tool use handed over is never lost.

Real daemons on real sockets (embeddings off). The acknowledgement is driven by
hand on the socket, then by the real ``cogd-hook``; the spool by hooks run while
no daemon is there, then ingested by one started afterwards. The counting
under load is tests/test_load.py's ``test_ledger_counts_exactly_under_external_load``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
from pathlib import Path

import pytest

from conftest import cogd_in_process, lexical_only, make_repo, payload, run_cogd, run_hook, wait_for
from cogd.config import Config
from cogd.daemon import server as server_module
from cogd.rpc.client import call
from cogd.daemon.server import Daemon
from cogd.paths import Layout

SOURCE = {
    "calc.py": "def add_numbers(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n\n\n"
               "def multiply_numbers(a, b):\n    return a * b\n",
    "shapes.py": "class Circle:\n    def area(self, radius):\n        return 3.14159 * radius * radius\n",
}
TIMEOUT_S = 60  # generous: conditions are polled, never slept on


def _repo(tmp_path: Path, extra_config: str = "") -> Path:
    root = lexical_only(make_repo(tmp_path / "repo", SOURCE))
    if extra_config:
        config = root / ".cogd" / "config.toml"
        config.write_text(config.read_text() + "\n" + extra_config)
    return root


@pytest.fixture
def running(tmp_path):
    """A started daemon on a small repository; stopped by the finaliser even when the test fails."""
    roots: list[Path] = []

    def start(extra_config: str = "") -> Path:
        root = _repo(tmp_path / f"r{len(roots)}", extra_config)
        roots.append(root)
        run_cogd(root, "start")
        cogd_in_process(root, "index")  # after the real start: its code here, asking the daemon
        return root

    yield start
    for root in roots:
        run_cogd(root, "stop", check=False)


def _sock(root: Path) -> Path:
    return root / ".cogd" / "run" / "cogd.sock"


def _rows(root: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with sqlite3.connect(root / ".cogd" / "state.db", timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def _daemon_log(root: Path) -> str:
    path = root / ".cogd" / "logs" / "daemon.log"
    return path.read_text(errors="replace") if path.exists() else ""


class Conn:
    """One client connection speaking line-delimited JSON-RPC by hand."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(str(path))
        self.buffer = b""

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self) -> dict | None:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def prompt(self, session: str, ack: bool = True) -> dict:
        params = {"session_id": session, "prompt": "add two numbers", "mode": "bm25"}
        if ack:
            params["ack"] = True
        self.send({"jsonrpc": "2.0", "id": 1, "method": "context.prompt", "params": params})
        return self.read()["result"]

    def close(self) -> None:
        self.sock.close()


def _deliveries(root: Path, session: str) -> list[tuple]:
    return _rows(root, "SELECT id, size_chars, item_count FROM deliveries WHERE session_id = ?", (session,))


def test_acknowledged_pack_is_recorded_and_unacknowledged_ones_are_not(running):
    root = running()
    withdrawn_before = _daemon_log(root).count("withdrawn, no delivery")

    # Acknowledged on the same connection: recorded at the ack, not before.
    conn = Conn(_sock(root))
    result = conn.prompt("acked")
    assert result["text"] and result["delivery_id"] is None and type(result["ack"]) is int
    assert _deliveries(root, "acked") == []  # built, held, not yet a delivery
    assert call(_sock(root), "status", {})["deliveries"] == {"held": 1, "recording": 0}
    conn.send({"jsonrpc": "2.0", "id": 2, "method": "context.ack", "params": {"ack": result["ack"]}})
    reply = conn.read()
    conn.close()
    delivery_id = reply["result"]["delivery_id"]
    assert _deliveries(root, "acked") == [(delivery_id, len(result["text"]), len(result["items"]))]
    assert call(_sock(root), "status", {})["deliveries"] == {"held": 0, "recording": 0}

    # The client leaves without acknowledging.
    conn = Conn(_sock(root))
    conn.prompt("left")
    conn.close()
    # Another request instead of the ack: the pack is withdrawn, the request still answered.
    conn = Conn(_sock(root))
    conn.prompt("other-request")
    conn.send({"jsonrpc": "2.0", "id": 3, "method": "status", "params": {}})
    assert conn.read()["result"]["pid"] > 0
    # An ack with another token is no ack of this pack.
    wrong = conn.prompt("wrong-token")
    conn.send({"jsonrpc": "2.0", "id": 4, "method": "context.ack", "params": {"ack": wrong["ack"] + 1000}})
    assert conn.read()["error"]["data"]["kind"] == "not_found"
    conn.close()
    wait_for(lambda: _daemon_log(root).count("withdrawn, no delivery") >= withdrawn_before + 3, what="three withdrawals")
    for session in ("left", "other-request", "wrong-token"):
        assert _deliveries(root, session) == [], session

    # A client that does not ask for acknowledgement (the MCP server, the CLI) is recorded at once.
    conn = Conn(_sock(root))
    plain = conn.prompt("no-ack-asked", ack=False)
    conn.close()
    assert type(plain["delivery_id"]) is int and "ack" not in plain
    assert [r[0] for r in _deliveries(root, "no-ack-asked")] == [plain["delivery_id"]]
    assert call(_sock(root), "stats", {}, timeout=TIMEOUT_S)["deliveries"] == 2


def test_packs_held_by_a_killed_daemon_leave_nothing_to_resolve(running):
    """Held packs live in the daemon's memory only: kill -9 with some held, and the ledger has none of them."""
    root = running()
    conns = [Conn(_sock(root)) for _ in range(3)]
    held = [conn.prompt(f"held-{i}") for i, conn in enumerate(conns)]
    assert all(type(result["ack"]) is int for result in held)
    pid = call(_sock(root), "status", {}, timeout=TIMEOUT_S)["pid"]
    os.kill(pid, signal.SIGKILL)
    for conn in conns:
        assert conn.read() is None  # the daemon is gone
        conn.close()
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(),
             what="the killed daemon's exit")
    run_cogd(root, "start")
    stats = call(_sock(root), "stats", {}, timeout=TIMEOUT_S)
    assert stats["deliveries"] == 0 and stats["misses"] == 0
    assert _rows(root, "SELECT count(*) FROM deliveries") == [(0,)]
    assert _rows(root, "SELECT count(*) FROM delivery_items") == [(0,)]
    assert _rows(root, "SELECT count(*) FROM entity_utility WHERE retrieval_count > 0") == [(0,)]


def test_ack_after_the_wait_is_too_late(running):
    root = running("[daemon]\nack_wait_ms = 200\n")
    conn = Conn(_sock(root))
    result = conn.prompt("late")
    wait_for(lambda: "no acknowledgement within 200 ms" in _daemon_log(root), what="the pack's withdrawal")
    try:
        conn.send({"jsonrpc": "2.0", "id": 2, "method": "context.ack", "params": {"ack": result["ack"]}})
        assert conn.read() is None  # the daemon closed the connection when the wait ran out
    except (BrokenPipeError, ConnectionResetError):
        pass
    conn.close()
    assert _deliveries(root, "late") == []


def test_hook_acknowledges_what_it_printed(running):
    root = running()
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, session_id="hook-acked",
                                                prompt="add two numbers"), timeout=TIMEOUT_S,
                       env={"COGD_HOOK_DEADLINE_MS": "30000"})
    assert proc.returncode == 0 and proc.stderr == b""
    text = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    # Recorded by the time the hook exited (it waits for the ack's reply): the next hook can hit it.
    assert [r[1] for r in _deliveries(root, "hook-acked")] == [len(text)]
    # A hook whose pack is over the client's limit prints nothing: nothing is recorded.
    proc, _ = run_hook("session-start", payload("session_start.startup.json", root, session_id="hook-start"),
                       timeout=TIMEOUT_S, env={"COGD_HOOK_DEADLINE_MS": "30000"})
    printed = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] if proc.stdout else ""
    assert [r[1] for r in _deliveries(root, "hook-start")] == ([len(printed)] if printed else [])


def _read_hook(root: Path, i: int, session: str = "spooled") -> dict:
    data = payload("post_tool_use.read.range.json", root, session_id=session, tool_use_id=f"toolu_spool_{i}")
    data["tool_input"] = {"file_path": str(root / "calc.py"), "offset": 1 + i, "limit": 2}
    data["tool_response"]["file"].update(filePath=str(root / "calc.py"), startLine=1 + i, numLines=2)
    return data


def test_tool_uses_spooled_without_a_daemon_are_ingested_once(tmp_path):
    root = _repo(tmp_path)
    spool = root / ".cogd" / "run" / "tool-uses.spool"
    try:
        for i in range(5):
            proc, _ = run_hook("post-tool-use", _read_hook(root, i), timeout=TIMEOUT_S)
            assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
        lines = spool.read_bytes().splitlines()
        assert len(lines) == 5 and oct(spool.stat().st_mode & 0o777) == "0o600"
        assert [json.loads(line)["params"]["payload"]["tool_use_id"] for line in lines] == \
            [f"toolu_spool_{i}" for i in range(5)]
        # A drain cut short by a crash leaves its copy: lines 0-1 recorded already, 2 not yet.
        run_cogd(root, "start")
        wait_for(lambda: len(_rows(root, "SELECT 1 FROM tool_uses WHERE session_id = 'spooled'")) == 5, what="ingestion")
        assert not spool.read_bytes() and not spool.with_name(spool.name + ".ingesting").exists()
        run_cogd(root, "stop")
        copy = spool.with_name(spool.name + ".ingesting")
        copy.write_bytes(b"\n".join(lines[:2]) + b"\n" + _line(root, 5) + b"\nnot json\n")
        os.chmod(copy, 0o600)
        run_cogd(root, "start")
        wait_for(lambda: not copy.exists(), what="the replay of the copy")
        rows = _rows(root, "SELECT tool_use_id, touches FROM tool_uses WHERE session_id = 'spooled' ORDER BY id")
        assert [r[0] for r in rows] == [f"toolu_spool_{i}" for i in range(6)]  # 0 and 1 not twice
        assert json.loads(rows[2][1]) == [{"path": "calc.py", "action": "read", "start_line": 3, "end_line": 4}]
        assert "spooled line 4 dropped" in _daemon_log(root)
    finally:
        run_cogd(root, "stop", check=False)


def test_tool_uses_sent_to_a_stalled_daemon_are_recorded_after_their_hooks_left(running):
    """Hooks that sent their tool use and gave up waiting (SIGSTOP holds the daemon) lose nothing."""
    root = running()
    pid = call(_sock(root), "status", {}, timeout=TIMEOUT_S)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        results = [run_hook("post-tool-use", _read_hook(root, i, "stalled"), timeout=TIMEOUT_S,
                            env={"COGD_HOOK_DEADLINE_MS": "400"}) for i in range(3)]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert [(proc.returncode, proc.stdout, proc.stderr) for proc, _ in results] == [(0, b"", b"")] * 3
    hook_log = (root / ".cogd" / "logs" / "hook.log").read_text()
    # Either the socket's timeout or the deadline's signal ends the wait; both say it was sent.
    assert hook_log.count("tool use sent") == 3 and "spooled" not in hook_log, hook_log
    wait_for(lambda: len(_rows(root, "SELECT 1 FROM tool_uses WHERE session_id = 'stalled'")) == 3, what="all three")
    # Their order is not kept: the three waiting connections are served by the thread pool at once.
    assert sorted(r[0] for r in _rows(root, "SELECT tool_use_id FROM tool_uses WHERE session_id = 'stalled'")) \
        == [f"toolu_spool_{i}" for i in range(3)]
    assert not (root / ".cogd" / "run" / "tool-uses.spool").exists()  # sent, not spooled


def _line(root: Path, i: int) -> bytes:
    from cogd.rpc.client import encode_request
    from cogd.hookclient import _slim_tool_payload

    return encode_request("usage.tool_use", {"payload": _slim_tool_payload(_read_hook(root, i))}).rstrip(b"\n")


def test_spool_is_not_a_symlink_target(tmp_path):
    root = _repo(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    run_dir = root / ".cogd" / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "tool-uses.spool").symlink_to(outside)
    proc, _ = run_hook("post-tool-use", _read_hook(root, 0), timeout=TIMEOUT_S)
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert outside.read_text() == "keep\n"
    assert "tool use lost" in (root / ".cogd" / "logs" / "hook.log").read_text()


def _serve_in_process(tmp_path: Path, clients):
    """Run Daemon._handle on a real socket in this process; ``clients(path, root)`` drives it from a thread."""
    root = make_repo(tmp_path / "repo", SOURCE)
    layout = Layout(root).ensure()
    lock_fd = os.open(layout.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    daemon = Daemon(layout, Config(), lock_fd)
    from cogd.daemon.service import Service

    daemon.service = Service(layout, Config(), start_index=False, start_embedder=False)
    path = tmp_path / "s.sock"
    out: list = []

    async def main():
        daemon.loop = asyncio.get_running_loop()
        server = await asyncio.start_unix_server(daemon._handle, path=str(path))
        async with server:
            out.append(await asyncio.get_running_loop().run_in_executor(None, clients, path, root))

    try:
        asyncio.run(main())
    finally:
        daemon.service.close()
        daemon.pool.shutdown()
        os.close(lock_fd)
    return out[0]


def test_refused_connection_says_busy(tmp_path, monkeypatch):
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 0)

    def client(path: Path, root: Path):
        conn = Conn(path)  # the refusal comes at accept, before (and whether or not) a request is sent
        answer = conn.read()
        conn.close()
        return answer

    answer = _serve_in_process(tmp_path, client)
    assert answer["error"]["data"]["kind"] == "busy" and answer["id"] is None


def test_hook_spools_a_tool_use_a_busy_daemon_refused(tmp_path):
    """The hook's side: a ``busy`` refusal means unread, so the tool use goes to the spool."""
    root = _repo(tmp_path)
    path = _sock(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    listener.settimeout(TIMEOUT_S)
    import threading

    def refuse():
        conn, _ = listener.accept()
        conn.settimeout(TIMEOUT_S)
        received = b""
        while not received.endswith(b"\n"):  # read it first, so the hook's send cannot meet a closed socket
            received += conn.recv(65536)
        conn.sendall(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32007,"message":"busy","data":{"kind":"busy"}}}\n')
        conn.close()

    thread = threading.Thread(target=refuse)
    thread.start()
    try:
        proc, _ = run_hook("post-tool-use", _read_hook(root, 0), timeout=TIMEOUT_S, env={"COGD_HOOK_DEADLINE_MS": "30000"})
    finally:
        thread.join(TIMEOUT_S)
        listener.close()
    assert (proc.returncode, proc.stdout) == (0, b"")
    lines = (root / ".cogd" / "run" / "tool-uses.spool").read_bytes().splitlines()
    assert [json.loads(line)["params"]["payload"]["tool_use_id"] for line in lines] == ["toolu_spool_0"]
    assert "tool use spooled for the daemon: daemon busy" in (root / ".cogd" / "logs" / "hook.log").read_text()


def test_incomplete_line_is_not_processed(tmp_path):
    def client(path: Path, root: Path):
        line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "usage.tool_use",
                           "params": {"payload": {"session_id": "half", "tool_name": "Read"}}}).encode()
        conn = Conn(path)
        conn.sock.sendall(line.replace(b'"half"', b'"no-newline"'))  # whole JSON, no newline: a client cut off
        conn.sock.shutdown(socket.SHUT_WR)
        answer = conn.read()
        conn.close()
        # A complete line is processed even though its client leaves at once, without reading.
        conn = Conn(path)
        conn.sock.sendall(line + b"\n")
        conn.close()
        rows = wait_for(lambda: _rows(root, "SELECT session_id FROM tool_uses"), what="the complete line's tool use")
        return answer, rows

    assert _serve_in_process(tmp_path, client) == (None, [("half",)])
