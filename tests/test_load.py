"""Load and contention against a real daemon on a real repository.

Standard-library packages copied into a git repository, a daemon started with
``cogd start``, and real ``cogd-hook`` processes fed Claude Code-shaped
payloads from many threads at once. Embeddings are off (``lexical_only``):
these tests are about concurrency, the ledger and the index, not the model.

What is measured and asserted:

1. 1,000 prompt hooks from 20 parallel workers: every one exits 0 with a pack,
   every pack is in the ledger with its items, p95 under the hook deadline.
2. Ledger writes and CLI reads while full reindexes run back to back: no
   "database is locked", no write dropped, and the index ends equal to a
   fresh index of the tree.
3. 30 MB PostToolUse payloads go through the hook within its deadline.
4. Unicode of every kind (and bytes that are not UTF-8) in prompts.
5. ``kill -9`` of the daemon in the middle of a full reindex.

6. 1,000 prompt and tool-use hooks during reindexes with busy-looping processes
   started by the test: printed packs == recorded deliveries and handed-over
   tool uses == stored tool uses, exactly.

Also: a hook that gave up at its deadline leaves no delivery in the ledger.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import COGD_HOOK, cogd_in_process, copy_stdlib, deliveries_settled, lexical_only, make_repo, payload, run_cogd, run_hook, wait_for
from cogd.rpc.client import DaemonUnavailable, call
from cogd.index.indexer import Indexer

DEADLINE_S = 1.5  # the hook's default deadline (cogd.rpc.client.DEFAULT_DEADLINE_MS)
MAX_CONTEXT_CHARS = 9_500  # cogd.hookclient.MAX_CONTEXT_CHARS
PACKAGES = ("json", "http", "logging")
# For kill -9 mid-index: big enough that a full reindex commits a batch or two
# (BATCH_FILES = 200) and is still running a second later (about 400 files).
BIG_PACKAGES = ("json", "http", "logging", "email", "asyncio", "unittest", "xml", "multiprocessing",
                "concurrent", "importlib", "urllib", "html", "wsgiref", "sqlite3", "ctypes", "tomllib", "idlelib")

LOAD_CALLS = 1000
LOAD_WORKERS = 20

# What people type into an agent working on this code.
PROMPTS = [
    "json.loads gives a confusing error message when the document has a trailing comma",
    "pretty printing json output should sort the keys and use two spaces of indentation",
    "the json encoder crashes on a dict with non-string keys, make it skip them",
    "why does JSONDecoder raw_decode return the end index, and where is it used",
    "add support for decoding NaN and Infinity as None in the json scanner",
    "the http server access log should include the client address",
    "http.client does not retry when the server closes a keep-alive connection",
    "cookies that have expired are still being sent to the server",
    "the simple http request handler serves directory listings without escaping file names",
    "parse the Content-Type header and its charset parameter in http.client",
    "http cookiejar should reject cookies whose domain does not match the request host",
    "the rotating log file handler never rolls over at midnight",
    "logging basicConfig ignores the force argument",
    "the SysLogHandler drops messages longer than 1024 bytes over UDP",
    "add a QueueHandler example that sends log records to a listener thread",
    "logging.config.dictConfig fails when a formatter has a custom class",
    "LoggerAdapter.process should merge the extra dict instead of replacing it",
    "the SMTPHandler times out when the mail server is slow; make the timeout configurable",
    "where does the logging module acquire its module-level lock, and can it deadlock after fork",
    "HTTPStatus should expose whether a code is a client error or a server error",
]


# ---------------------------------------------------------------- helpers

def _ledger(root: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with sqlite3.connect(root / ".cogd" / "state.db", timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def _pack_text(stdout: bytes) -> str:
    """The context a hook printed; raises AssertionError unless it is a valid prompt pack."""
    out = json.loads(stdout)
    assert set(out) == {"hookSpecificOutput"}, out
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "UserPromptSubmit", spec
    text = spec["additionalContext"]
    assert isinstance(text, str) and text and len(text) <= MAX_CONTEXT_CHARS, len(text or "")
    return text


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    return sorted_values[max(math.ceil(q / 100 * len(sorted_values)) - 1, 0)]


def _entity_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return sorted(conn.execute("SELECT id, kind, start_line, end_line FROM entities").fetchall())


def _edge_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return sorted(conn.execute("SELECT src, dst, kind, resolution FROM edges").fetchall())


def _fresh_index(root: Path, where: Path) -> Path:
    """A fresh index of ``root``'s tree, built in-process into a new database under ``where``."""
    db = Path(tempfile.mkdtemp(prefix="fresh-", dir=where)) / "index.db"
    indexer = Indexer(root, db)
    try:
        indexer.refresh()
    finally:
        indexer.close()
    return db


def _log(root: Path, name: str) -> str:
    path = root / ".cogd" / "logs" / name
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _still_serving(root: Path) -> dict:
    status = json.loads(run_cogd(root, "status", "--json").stdout)
    assert status["running"] is True and status["index"]["entities"] > 0, status
    return status


def _start(root: Path) -> Path:
    run_cogd(root, "start")
    cogd_in_process(root, "index")  # after the real start: its code here, asking the daemon
    return root


def _wait_idle(root: Path, timeout: float = 60) -> dict:
    """Until the index worker has nothing queued (prompt hooks queue cheap refreshes)."""
    def idle() -> dict | None:
        status = call(root / ".cogd" / "run" / "cogd.sock", "status", {}, timeout=10)
        return status if status["index"]["state"] == "idle" and status["index"]["queue_depth"] == 0 else None

    return wait_for(idle, timeout, what="an idle index worker")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """json, http and logging in a git repository, with a lexical-only daemon running."""
    root = lexical_only(copy_stdlib(tmp_path_factory.mktemp("load") / "repo", PACKAGES))
    _start(root)
    yield root
    run_cogd(root, "stop", check=False)


# ---------------------------------------------------------------- 1. load

LOAD_DEADLINE_S = 5.0


def test_thousand_prompt_hooks_from_twenty_workers(repo, record_property):
    prefix = "load-"

    def one(i: int) -> tuple[int, subprocess.CompletedProcess, float]:
        data = payload("user_prompt_submit.json", repo, session_id=f"{prefix}{i:04d}",
                       prompt=PROMPTS[i % len(PROMPTS)])
        # The point is errors and lost deliveries under load, not the deadline: on a
        # shared 2-core machine 20 parallel interpreters can push single calls past
        # the shipped 1.5 s (a dropped pack, by design), so this run allows 5 s.
        proc, seconds = run_hook("prompt-submit", data, timeout=30, env={"COGD_HOOK_DEADLINE_MS": "5000"})
        return i, proc, seconds

    started = time.monotonic()
    with ThreadPoolExecutor(LOAD_WORKERS) as pool:
        results = list(pool.map(one, range(LOAD_CALLS)))
    total = time.monotonic() - started

    times = sorted(seconds for _, _, seconds in results)
    p50, p95 = _percentile(times, 50), _percentile(times, 95)
    summary = (f"{LOAD_CALLS} prompt-submit hooks from {LOAD_WORKERS} workers in {total:.1f} s "
               f"({LOAD_CALLS / total:.1f}/s): p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
               f"max {times[-1] * 1000:.0f} ms")
    print(f"\n[load] {summary}")
    record_property("hook_p50_ms", round(p50 * 1000))
    record_property("hook_p95_ms", round(p95 * 1000))

    errors: list[str] = []
    texts: dict[str, str] = {}
    for i, proc, seconds in results:
        session = f"{prefix}{i:04d}"
        if proc.returncode != 0 or proc.stderr:
            errors.append(f"{session}: exit {proc.returncode}, stderr {proc.stderr[:200]!r}")
            continue
        try:
            texts[session] = _pack_text(proc.stdout)
        except (ValueError, AssertionError, KeyError) as exc:
            errors.append(f"{session} ({seconds * 1000:.0f} ms): no valid pack ({exc!r}): {proc.stdout[:200]!r}")
    hook_log = "\n".join(_log(repo, "hook.log").splitlines()[-10:])
    assert not errors, f"{len(errors)} of {LOAD_CALLS} calls failed ({summary}):\n" + "\n".join(errors[:10]) \
        + f"\nhook.log:\n{hook_log}"

    # Not one delivery lost: exactly one per session, each with all its items.
    deliveries_settled(repo)
    rows = _ledger(repo, """
        SELECT d.session_id, d.event, d.size_chars, d.item_count, count(i.rank), min(i.rank), max(i.rank)
        FROM deliveries d LEFT JOIN delivery_items i ON i.delivery_id = d.id
        WHERE d.session_id LIKE ? GROUP BY d.id""", (prefix + "%",))
    assert len(rows) == LOAD_CALLS
    assert {r[0] for r in rows} == set(texts)
    for session, event, size, item_count, items, low, high in rows:
        assert event == "prompt" and size == len(texts[session]), (session, size)
        assert item_count > 0 and items == item_count and (low, high) == (1, item_count), (session, item_count, items)

    assert p95 < LOAD_DEADLINE_S, summary


# ---------------------------------------------------------------- 2. writes under contention

CONTENTION_READS = 200
CONTENTION_PROMPTS = 200
HOOK_WORKERS = 8
REINDEX_LOOPS = 3
# The point is locks and dropped writes, not latency: on a shared 2-core machine at load 20+ the
# shipped 1.5 s deadline drops packs by design, so these hooks get a generous one.
CONTENTION_ENV = {"COGD_HOOK_DEADLINE_MS": "30000"}


def test_ledger_writes_and_cli_during_full_reindex(repo, tmp_path):
    sock = repo / ".cogd" / "run" / "cogd.sock"
    sources = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*.py") if ".cogd" not in p.parts)
    writers_done = threading.Event()
    failures: list[str] = []
    reindexes: list[float] = []
    states: list[str] = []  # index state seen by `cogd status --json`
    polled: list[str] = []  # ...and by a light poller on the socket

    def reindex_loop() -> None:
        # Full reindexes back to back until every write has gone in. A full reindex of this tree takes
        # a few hundred ms, less than the CLI's own start-up: three loops keep one always queued.
        while not writers_done.is_set() or not reindexes:
            began = time.monotonic()
            proc = run_cogd(repo, "index", "--full", check=False, timeout=300)
            if proc.returncode != 0 or "locked" in proc.stdout + proc.stderr:
                failures.append(f"cogd index --full: exit {proc.returncode}: {proc.stdout[-300:]} {proc.stderr[-300:]}")
            reindexes.append(time.monotonic() - began)

    def cli_loop(args: tuple[str, ...]) -> None:
        while not writers_done.is_set():
            proc = run_cogd(repo, *args, check=False, timeout=120)
            output = proc.stdout + proc.stderr
            if proc.returncode != 0 or "locked" in output:
                failures.append(f"cogd {' '.join(args)}: exit {proc.returncode}: {output[-300:]}")
                continue
            if args[0] == "status":
                states.append(json.loads(proc.stdout)["index"]["state"])
            elif args[0] == "stats":
                json.loads(proc.stdout)["ledger"]["tool_uses"]
            elif not any(hit["path"] == "json/decoder.py" for hit in json.loads(proc.stdout)):
                failures.append(f"cogd search did not find json/decoder.py: {proc.stdout[:300]}")

    def poll_state() -> None:
        while not writers_done.is_set():
            polled.append(call(sock, "status", {}, timeout=30)["index"]["state"])
            time.sleep(0.05)

    def read_hook(i: int) -> None:
        path = sources[i % len(sources)]
        data = payload("post_tool_use.read.range.json", repo, session_id=f"contend-read-{i:03d}",
                       tool_use_id=f"toolu_contend_{i:03d}")
        data["tool_input"] = {"file_path": str(repo / path), "offset": 1 + i, "limit": 20}
        data["tool_response"]["file"].update(filePath=str(repo / path), startLine=1 + i, numLines=20)
        proc, seconds = run_hook("post-tool-use", data, timeout=60, env=CONTENTION_ENV)
        if proc.returncode != 0 or proc.stdout or proc.stderr:
            failures.append(f"read hook {i}: exit {proc.returncode} {proc.stdout[:200]!r} {proc.stderr[:200]!r}")

    def prompt_hook(i: int) -> None:
        data = payload("user_prompt_submit.json", repo, session_id=f"contend-prompt-{i:03d}",
                       prompt=PROMPTS[i % len(PROMPTS)])
        proc, seconds = run_hook("prompt-submit", data, timeout=60, env=CONTENTION_ENV)
        if proc.returncode != 0 or proc.stderr:
            failures.append(f"prompt hook {i}: exit {proc.returncode} {proc.stderr[:200]!r}")
            return
        try:
            _pack_text(proc.stdout)
        except (ValueError, AssertionError, KeyError) as exc:
            failures.append(f"prompt hook {i} ({seconds * 1000:.0f} ms): no valid pack ({exc!r})")

    background = [threading.Thread(target=reindex_loop) for _ in range(REINDEX_LOOPS)]
    background += [threading.Thread(target=cli_loop, args=(args,)) for args in
                   (("search", "json decoder scanstring", "--json"), ("stats", "--json"), ("status", "--json"))]
    for thread in background:
        thread.start()
    try:
        # Let the first full reindex get going before the writes start.
        wait_for(lambda: call(sock, "status", {}, timeout=10)["index"]["state"] == "indexing", 30,
                 what="the full reindex to start", step=0.02, max_step=0.02)
        started = time.monotonic()
        background.append(threading.Thread(target=poll_state))
        background[-1].start()
        jobs = [(read_hook, i) for i in range(CONTENTION_READS)] + [(prompt_hook, i) for i in range(CONTENTION_PROMPTS)]
        jobs = [job for pair in zip(jobs[:CONTENTION_READS], jobs[CONTENTION_READS:]) for job in pair]  # interleaved
        with ThreadPoolExecutor(HOOK_WORKERS) as pool:
            list(pool.map(lambda job: job[0](job[1]), jobs))
        writing = time.monotonic() - started
    finally:
        writers_done.set()
        for thread in background:
            thread.join(600)
    print(f"\n[contention] {len(jobs)} hook writes in {writing:.1f} s during {len(reindexes)} full reindexes "
          f"(mean {sum(reindexes) / len(reindexes):.1f} s); the daemon was indexing in "
          f"{polled.count('indexing')} of {len(polled)} polls")

    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:10])
    # The writes really ran against reindexing. How large a share of the polls lands inside a
    # reindex depends on the machine (a loaded one spends longer starting each `cogd index`), so the
    # test asks only that reindexes ran and were seen running, repeatedly.
    assert len(reindexes) >= 2 and polled.count("indexing") >= 3 and len(states) >= 3, \
        (len(reindexes), polled.count("indexing"), len(polled), len(states))
    for name in ("daemon.log", "hook.log"):
        assert "database is locked" not in _log(repo, name), name

    # No write dropped: exact counts, each tool use with its touch.
    tool_uses = _ledger(repo, "SELECT session_id, tool_name, tool_use_id, touches FROM tool_uses "
                              "WHERE session_id LIKE 'contend-read-%' ORDER BY session_id")
    assert len(tool_uses) == CONTENTION_READS
    for i, (session, tool, tool_use_id, touches) in enumerate(tool_uses):
        assert (session, tool, tool_use_id) == (f"contend-read-{i:03d}", "Read", f"toolu_contend_{i:03d}")
        assert json.loads(touches) == [{"path": sources[i % len(sources)], "action": "read",
                                        "start_line": 1 + i, "end_line": 20 + i}]
    deliveries = _ledger(repo, "SELECT d.item_count, count(i.rank) FROM deliveries d "
                               "LEFT JOIN delivery_items i ON i.delivery_id = d.id "
                               "WHERE d.session_id LIKE 'contend-prompt-%' GROUP BY d.id")
    assert len(deliveries) == CONTENTION_PROMPTS
    assert all(count == items > 0 for count, items in deliveries)

    # The index after all that equals a fresh index of the same tree.
    _wait_idle(repo)
    fresh = _fresh_index(repo, tmp_path)
    assert _entity_rows(repo / ".cogd" / "index" / "index.db") == _entity_rows(fresh)
    assert _edge_rows(repo / ".cogd" / "index" / "index.db") == _edge_rows(fresh)
    _still_serving(repo)


def test_hooks_that_gave_up_record_no_delivery(repo):
    """A pack whose hook hit its deadline before the answer came never reached the agent: not a delivery.

    Under load the answer can come after the deadline (in the first load runs here 9 hooks of 1,000
    did, and each of their packs was still recorded as delivered). SIGSTOP makes it deterministic: the
    requests wait in the socket while their hooks give up, then the daemon resumes.
    """
    pid = call(repo / ".cogd" / "run" / "cogd.sock", "status", {}, timeout=10)["pid"]
    sessions = [f"gave-up-{i}" for i in range(5)]
    hung_up_before = _log(repo, "daemon.log").count("hung up")
    os.kill(pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(len(sessions)) as pool:
            results = list(pool.map(lambda s: run_hook("prompt-submit", payload(
                "user_prompt_submit.json", repo, session_id=s, prompt=PROMPTS[0]), timeout=30), sessions))
    finally:
        os.kill(pid, signal.SIGCONT)
    for proc, seconds in results:
        assert proc.returncode == 0 and proc.stdout == b"" and seconds < DEADLINE_S + 1.0
    _still_serving(repo)  # answered after the five stale requests, on the same daemon
    wait_for(lambda: _log(repo, "daemon.log").count("hung up") >= hung_up_before + len(sessions),
             what="the daemon to reach the requests of the hooks that left")
    placeholders = ",".join("?" * len(sessions))
    assert _ledger(repo, f"SELECT session_id FROM deliveries WHERE session_id IN ({placeholders})", tuple(sessions)) == []
    assert _ledger(repo, "SELECT count(*) FROM delivery_items WHERE delivery_id NOT IN (SELECT id FROM deliveries)") == [(0,)]
    # A hook with time to wait still gets its pack, recorded once.
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, session_id="gave-up-not", prompt=PROMPTS[0]))
    _pack_text(proc.stdout)
    count = "SELECT count(*) FROM deliveries WHERE session_id = 'gave-up-not'"
    wait_for(lambda: _ledger(repo, count) != [(0,)], what="the printed pack's delivery")  # see test_unicode_prompts
    assert _ledger(repo, count) == [(1,)]


def test_server_skips_or_retracts_packs_for_clients_that_left(tmp_path):
    """The server's side of the above, each case in turn: gone before, gone during, still there, half-closed."""
    from cogd.config import Config
    from cogd.daemon.server import Daemon
    from cogd.daemon.service import Service
    from cogd.paths import Layout

    root = make_repo(tmp_path / "repo", {"calc.py": "def add_numbers(a, b):\n    return a + b\n"})
    layout = Layout(root).ensure()
    lock_fd = os.open(layout.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    daemon = Daemon(layout, Config(), lock_fd)
    service = daemon.service = Service(layout, Config(), start_index=False, start_embedder=False)
    try:
        service.call("index.refresh", {"wait": True})
        real_call = service.call

        def ask(session: str, during=None) -> dict | None:
            server_end, client_end = socket.socketpair()
            try:
                if during == "before":
                    client_end.close()
                elif during == "half-closed":
                    client_end.shutdown(socket.SHUT_WR)
                elif during == "while-built":
                    def call_then_leave(method, params):
                        result = real_call(method, params)
                        client_end.close()
                        return result
                    service.call = call_then_leave
                line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "context.prompt",
                                   "params": {"session_id": session, "prompt": "add numbers"}}).encode() + b"\n"
                return daemon._answer(line, server_end.fileno())
            finally:
                service.call = real_call
                server_end.close()
                client_end.close()

        assert ask("gone-before", "before") is None
        assert ask("gone-while-built", "while-built") is None
        assert ask("still-there")["result"]["text"]
        assert ask("half-closed", "half-closed")["result"]["text"]  # shutdown(SHUT_WR) still reads
        sessions = [r[0] for r in service.ledger._conn.execute("SELECT session_id FROM deliveries ORDER BY id")]
        assert sessions == ["still-there", "half-closed"]
        assert service.ledger.totals()["delivery_items"] == sum(
            r[0] for r in service.ledger._conn.execute("SELECT item_count FROM deliveries"))
    finally:
        service.close()
        daemon.pool.shutdown()
        os.close(lock_fd)


# ---------------------------------------------------------------- 3. huge payloads

def _pipe_hook(event: str, data: bytes, timeout: float = 30) -> tuple[int, bytes, bytes, float, str | None]:
    """Run the hook writing ``data`` to its stdin ourselves, so a broken pipe is seen, not swallowed."""
    started = time.monotonic()
    proc = subprocess.Popen([COGD_HOOK, event], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    write_error: list[str] = []
    err: list[bytes] = []

    def write() -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError) as exc:
            write_error.append(f"{exc.__class__.__name__}: {exc}")

    threads = [threading.Thread(target=write), threading.Thread(target=lambda: err.append(proc.stderr.read()))]
    for thread in threads:
        thread.start()
    out = proc.stdout.read()
    proc.wait(timeout)
    seconds = time.monotonic() - started
    for thread in threads:
        thread.join(timeout)
    return proc.returncode, out, err[0] if err else b"", seconds, write_error[0] if write_error else None


THIRTY_MB = 30 * 1024 * 1024


def _big_text(repo: Path) -> str:
    """About 30 MB of real code (json/decoder.py repeated)."""
    unit = (repo / "json" / "decoder.py").read_text(encoding="utf-8")
    return (unit * (THIRTY_MB // len(unit) + 1))[:THIRTY_MB]


def test_thirty_megabyte_read_payload(repo):
    data = payload("post_tool_use.read.json", repo, session_id="huge-read", tool_use_id="toolu_huge_read")
    target = repo / "json" / "decoder.py"
    data["tool_input"]["file_path"] = str(target)
    data["tool_response"]["file"].update(filePath=str(target), content=_big_text(repo), numLines=800_000,
                                         startLine=1, totalLines=800_000)
    raw = json.dumps(data).encode()
    assert len(raw) > THIRTY_MB
    code, out, err, seconds, broken = _pipe_hook("post-tool-use", raw)
    print(f"\n[huge] {len(raw) / 1e6:.1f} MB Read payload: {seconds * 1000:.0f} ms")
    assert (code, out, err, broken) == (0, b"", b"", None)
    assert seconds < DEADLINE_S
    rows = _ledger(repo, "SELECT tool_name, tool_use_id, touches FROM tool_uses WHERE session_id = 'huge-read'")
    assert rows == [("Read", "toolu_huge_read", json.dumps(
        [{"path": "json/decoder.py", "action": "read", "start_line": None, "end_line": None}]))]
    _still_serving(repo)


def test_thirty_megabyte_bash_stdout(repo):
    data = payload("post_tool_use.bash.json", repo, session_id="huge-bash", tool_use_id="toolu_huge_bash")
    data["tool_input"]["command"] = "python -m pytest http/cookiejar.py -q"
    data["tool_response"]["stdout"] = _big_text(repo)
    raw = json.dumps(data).encode()
    assert len(raw) > THIRTY_MB
    code, out, err, seconds, broken = _pipe_hook("post-tool-use", raw)
    print(f"\n[huge] {len(raw) / 1e6:.1f} MB Bash payload: {seconds * 1000:.0f} ms")
    assert (code, out, err, broken) == (0, b"", b"", None)
    assert seconds < DEADLINE_S
    rows = _ledger(repo, "SELECT tool_name, touches FROM tool_uses WHERE session_id = 'huge-bash'")
    assert [(tool, json.loads(touches)) for tool, touches in rows] == [
        ("Bash", [{"path": "http/cookiejar.py", "action": "mention", "start_line": None, "end_line": None}])]
    _still_serving(repo)


# ---------------------------------------------------------------- 4. unicode of every kind

def _with_raw_prompt(repo: Path, session: str, raw_prompt: bytes) -> bytes:
    """A prompt payload whose JSON string value for ``prompt`` is exactly ``raw_prompt`` (escapes and all)."""
    marker = "PROMPT-MARKER-7f3a"
    text = json.dumps(payload("user_prompt_submit.json", repo, session_id=session, prompt=marker)).encode()
    return text.replace(marker.encode(), raw_prompt)


UNICODE_CASES = {
    # JSON escapes a strict UTF-8 encoder refuses: lone and reversed surrogates
    "lone-high-surrogate": rb"json decoder \ud800 error on a trailing comma",
    "lone-low-surrogate": rb"\udfff the rotating log handler \udfff",
    "reversed-pair": rb"cookie jar \udc00\ud800 expired cookies",
    "only-surrogates": rb"\ud800\udbff\udc00\udfff",
    # NUL and other controls, as escapes (a raw control byte in a JSON string is invalid JSON)
    "nul-escape": rb"json\u0000decoder\u0000error",
    "nul-only": rb"\u0000",
    "raw-nul-byte": b"json\x00decoder error",
    "controls": rb"\u0001\u0007\u001b[31mred\u001b[0m logging \u007f\u0085\u2028\u2029 handler",
    # right-to-left text, bidi overrides, combining marks
    "rtl": "מפענח json נכשל על פסיק בסוף — خطأ في معالج السجل".encode(),
    "bidi-overrides": "\u202ejson decoder\u202c \u2067logging\u2069 \u200f\u200e handler".encode(),
    "combining": "e\u0301\u0301\u0301 d\u0308e\u0323c\u0327o\u0306der j\u0336s\u0336o\u0336n\u0336 Z\u0351\u0360a\u0342lgo".encode(),
    # astral planes: emoji (raw UTF-8 and as surrogate-pair escapes), math letters, private use
    "emoji": "🐍 json 🔥 decoder 👩‍👩‍👧‍👦 🏳️‍🌈 logging 🇫🇷 handler".encode(),
    "emoji-escaped": rb"\ud83d\udc0d json \ud83d\udd25 decoder",
    "astral": "𝔧𝔰𝔬𝔫 𝕕𝕖𝕔𝕠𝕕𝕖𝕣 \U0001F600 \U000E0001 \U0010FFFD \U000F0000".encode(),
    "cjk": "JSON 解码器在尾随逗号时报错，日志处理器 ログハンドラが深夜にローテーションしない 쿠키가 만료됨".encode(),
    # a 100 KB single line: words, then one 100 KB token
    "100kb-words": ("the rotating log file handler never rolls over at midnight " * 2000)[:100_000].encode(),
    "100kb-token": b"x" * 100_000,
    "100kb-cjk": ("日志处理器" * 7000)[:34_000].encode(),  # about 100 KB of UTF-8
    # bytes that are not UTF-8 at all, inside the JSON text
    "invalid-utf8": b"json \xff\xfe decoder \xc3\x28 error \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end",
    "truncated-utf8": b"logging handler \xe6\x97",
}


@pytest.mark.parametrize("case", list(UNICODE_CASES))
def test_unicode_prompts(repo, case):
    session = f"unicode-{case}"
    raw = _with_raw_prompt(repo, session, UNICODE_CASES[case])
    before = _ledger(repo, "SELECT count(*) FROM deliveries")[0][0]
    proc, seconds = run_hook("prompt-submit", None, raw=raw, timeout=30)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert seconds < DEADLINE_S + 1.0
    printed = bool(proc.stdout.strip())
    if printed:
        _pack_text(proc.stdout)
        assert proc.stdout.isascii()  # JSON escapes only: survives any client encoding
    # A pack printed is a pack recorded, and nothing else is recorded. The hook waits at most
    # hookclient.ACK_WAIT_S for the daemon's commit of its acknowledgement (the delivery is
    # recorded either way), so on a loaded machine the row may land just after the hook exits.
    def recorded() -> int:
        return _ledger(repo, "SELECT count(*) FROM deliveries")[0][0] - before

    if printed:
        wait_for(lambda: recorded() >= 1, what="the printed pack's delivery")
    assert recorded() == (1 if printed else 0)
    _still_serving(repo)


def test_unicode_packs_where_words_survive(repo):
    """Prompts whose words survive their odd characters still get their pack."""
    for case in ("lone-high-surrogate", "lone-low-surrogate", "nul-escape", "rtl", "emoji", "emoji-escaped",
                 "100kb-words", "invalid-utf8", "truncated-utf8"):
        proc, _ = run_hook("prompt-submit", None, raw=_with_raw_prompt(repo, f"words-{case}", UNICODE_CASES[case]))
        assert _pack_text(proc.stdout), case
    rows = dict(_ledger(repo, "SELECT session_id, query FROM deliveries WHERE session_id LIKE 'words-%'"))
    # Stored as valid text: the lone surrogate replaced, the words kept.
    assert rows["words-lone-high-surrogate"] == "json decoder ? error on a trailing comma"
    assert all(query.encode("utf-8") for query in rows.values())
    assert "\ufffd" in rows["words-invalid-utf8"]
    assert len(rows["words-100kb-words"]) == 2000  # the ledger keeps the prompt's head


def test_hook_config_deadline_is_still_read(repo, tmp_path):
    """``[hook] deadline_ms`` in the config still applies (the hook parses the config only when it can)."""
    config = repo / ".cogd" / "config.toml"
    original = config.read_text()
    try:
        config.write_text(original + "\n[hook]\ndeadline_ms = 1\n")
        proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, prompt=PROMPTS[0]))
        assert proc.returncode == 0 and proc.stdout == b"" and seconds < 1.0
        assert "deadline reached" in _log(repo, "hook.log").splitlines()[-1]
    finally:
        config.write_text(original)
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", repo, prompt=PROMPTS[0]))
    _pack_text(proc.stdout)


# ---------------------------------------------------------------- 5. kill -9 mid-index

def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ", 1)[-1][:1] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _answers(sock: Path) -> bool:
    try:
        call(sock, "status", {}, timeout=5)
        return True
    except DaemonUnavailable:
        return False


@pytest.fixture(scope="module")
def killed_mid_index(tmp_path_factory):
    """A daemon killed with SIGKILL in the middle of a full reindex, then `cogd start` + `cogd index`."""
    base = tmp_path_factory.mktemp("kill9")
    root = lexical_only(copy_stdlib(base / "repo", BIG_PACKAGES))
    run = root / ".cogd" / "run"
    sock = run / "cogd.sock"
    _start(root)
    orphans: list[int] = []
    try:
        # The ledger before the kill: prompt packs with their items, and tool uses.
        for i in range(30):
            proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, session_id=f"before-{i:02d}",
                                                        prompt=PROMPTS[i % len(PROMPTS)]), timeout=30)
            _pack_text(proc.stdout)
        for i in range(10):
            read = payload("post_tool_use.read.json", root, session_id=f"before-tool-{i}")
            read["tool_input"]["file_path"] = str(root / "json" / "decoder.py")
            run_hook("post-tool-use", read, timeout=30)
        deliveries = _ledger(root, "SELECT * FROM deliveries ORDER BY id")
        items = _ledger(root, "SELECT * FROM delivery_items ORDER BY delivery_id, rank")
        tool_uses = _ledger(root, "SELECT * FROM tool_uses ORDER BY id")
        assert len(deliveries) == 30 and len(tool_uses) == 10 and items

        old = json.loads((run / "daemon.pid").read_text())
        old_pid = old["pid"]
        reindex = subprocess.Popen([str(Path(COGD_HOOK).with_name("cogd")), "index", "--full"], cwd=root,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill once the first batch of the full reindex has committed and before it ends.
        def mid_way() -> dict | None:
            """The reindex's progress once its first batch has committed and well before it ends."""
            assert reindex.poll() is None, "the reindex ended before it was caught mid-way"
            index = call(sock, "status", {}, timeout=10)["index"]
            progress = index["progress"]
            return progress if index["state"] == "indexing" and 200 <= progress["done"] < progress["total"] - 50 else None

        progress = wait_for(mid_way, 120, what="the reindex mid-way", step=0.01, max_step=0.01)
        parsers = _children(old_pid)
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: not _pid_alive(old_pid), 30, what="the killed daemon to be gone", step=0.01)
        reindex.communicate(timeout=60)
        # The parse workers of the dead daemon go too (their pipe to it is closed).
        try:
            wait_for(lambda: not [p for p in parsers if _pid_alive(p)], 30,
                     what="the dead daemon's parse workers to go", step=0.01)
        except AssertionError:
            pass  # asserted below with their pids, after the clean-up has killed them
        orphans = [p for p in parsers if _pid_alive(p)]
        stale = {"socket": sock.exists(), "pid_file": json.loads((run / "daemon.pid").read_text())["pid"],
                 "answers": _answers(sock)}
        killed_at = time.time_ns()

        started = run_cogd(root, "start").stdout
        new = json.loads((run / "daemon.pid").read_text())
        indexed = run_cogd(root, "index").stdout
        status = _wait_idle(root)
        yield {
            "root": root, "base": base, "killed_at": progress, "stale": stale, "old_pid": old_pid, "new": new,
            "started": started, "indexed": indexed, "status": status, "socket_replaced": sock.stat().st_ctime_ns > killed_at,
            "orphans": orphans, "parsers": parsers, "reindex_exit": reindex.returncode,
            "ledger_before": (deliveries, items, tool_uses),
        }
    finally:
        run_cogd(root, "stop", check=False)
        for pid in orphans:  # parse workers of the killed daemon, if any outlived it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_kill9_mid_index_then_start_and_index(killed_mid_index):
    k = killed_mid_index
    root = k["root"]
    print(f"\n[kill -9] daemon {k['old_pid']} killed at {k['killed_at']['done']}/{k['killed_at']['total']} files; "
          f"new daemon {k['new']['pid']}")
    # The dead daemon left its socket and pid file; the new one replaced both.
    assert k["stale"] == {"socket": True, "pid_file": k["old_pid"], "answers": False}
    assert "daemon started" in k["started"] and k["new"]["pid"] != k["old_pid"]
    assert k["socket_replaced"] and k["status"]["pid"] == k["new"]["pid"]
    assert k["reindex_exit"] != 0  # the CLI waiting on the dead daemon says so, it does not hang
    assert not k["orphans"], f"parse workers {k['orphans']} outlived the killed daemon"

    # The index is a fresh index of the tree.
    fresh = _fresh_index(root, k["base"])
    assert _entity_rows(root / ".cogd" / "index" / "index.db") == _entity_rows(fresh)

    # Everything recorded before the kill is still there, unchanged.
    deliveries, items, tool_uses = k["ledger_before"]
    assert _ledger(root, "SELECT * FROM deliveries ORDER BY id")[:len(deliveries)] == deliveries
    assert _ledger(root, "SELECT * FROM delivery_items ORDER BY delivery_id, rank")[:len(items)] == items
    assert _ledger(root, "SELECT * FROM tool_uses ORDER BY id")[:len(tool_uses)] == tool_uses
    # ...and the new daemon records more.
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, session_id="after-kill", prompt=PROMPTS[0]))
    _pack_text(proc.stdout)
    count = "SELECT count(*) FROM deliveries WHERE session_id = 'after-kill'"
    wait_for(lambda: _ledger(root, count) != [(0,)], what="the printed pack's delivery")  # see test_unicode_prompts
    assert _ledger(root, count) == [(1,)]


# A refresh cut short used to leave the files of its committed batches without
# reference edges; the index now records that resolution is pending.
def test_kill9_mid_index_keeps_reference_edges(killed_mid_index):
    root = killed_mid_index["root"]
    fresh = _fresh_index(root, killed_mid_index["base"])
    current, expected = set(_edge_rows(root / ".cogd" / "index" / "index.db")), set(_edge_rows(fresh))
    missing, extra = expected - current, current - expected
    assert not missing and not extra, (f"{len(missing)} edges missing (e.g. {sorted(missing)[:3]}), "
                                       f"{len(extra)} extra (e.g. {sorted(extra)[:3]})")


# ---------------------------------------------------------------- 6. the ledger counts exactly under load

# Knobs (environment) so a slower or faster machine can scale the run; the defaults keep it
# to a couple of minutes on a busy 2-core box.
DRIFT_HOOKS = int(os.environ.get("COGD_LOAD_DRIFT_HOOKS", "1000"))
DRIFT_WORKERS = int(os.environ.get("COGD_LOAD_DRIFT_WORKERS", "20"))
DRIFT_BURNERS = int(os.environ.get("COGD_LOAD_BURNERS", "6"))  # busy-looping processes for the test's duration
GENEROUS_MS = 30_000  # hooks whose point is counting: they must not give up
# One hook in GAVE_UP_EVERY gets a deadline of a few tens to a few hundreds of ms instead, so
# that some give up at every stage: before reading stdin, before sending, while the pack is
# built, with the pack on its way back.
GAVE_UP_EVERY = 5


@pytest.fixture
def burners():
    """DRIFT_BURNERS processes spinning on the CPU (external load), stopped by the finaliser."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(DRIFT_BURNERS)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(30)


def _hook_pid(event: str, data: dict, root: Path, deadline_ms: int) -> tuple[int, int, bytes, bytes]:
    """Run ``cogd-hook`` in ``root``; returns (pid, exit code, stdout, stderr). The pid finds its log lines."""
    started = time.monotonic()
    proc = subprocess.Popen([COGD_HOOK, event], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=root, env={**os.environ, "COGD_HOOK_DEADLINE_MS": str(deadline_ms)})
    out, err = proc.communicate(json.dumps(data).encode(), timeout=300)
    _HOOK_SECONDS.append((event, deadline_ms, time.monotonic() - started))
    return proc.pid, proc.returncode, out, err


_HOOK_SECONDS: list[tuple[str, int, float]] = []  # (event, deadline, seconds) of every _hook_pid run


def _hook_lines_by_pid(root: Path, since: float) -> dict[int, list[str]]:
    """hook.log lines (the rotated file too) written at or after ``since`` (unix s), by pid."""
    by_pid: dict[int, list[str]] = {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    for name in ("hook.log.1", "hook.log"):
        for line in _log(root, name).splitlines():
            head = line.split(" ", 2)
            if len(head) == 3 and head[0] >= stamp and head[1].startswith("pid="):
                by_pid.setdefault(int(head[1][4:]), []).append(head[2])
    return by_pid


def test_ledger_counts_exactly_under_external_load(repo, burners):
    """Printed packs == recorded deliveries and handed-over tool uses == stored tool uses, exactly.

    DRIFT_HOOKS hooks from DRIFT_WORKERS threads, half prompt-submit, half post-tool-use, while full
    reindexes run back to back and DRIFT_BURNERS processes spin on the CPU. Every hook has its own
    session, so each printed pack and each tool use can be matched one to one with the ledger.
    A tool use counts as handed over unless its hook left before it had read its payload (its log
    says so); no hook may log one lost.
    """
    prefix = f"drift-{time.time_ns()}-"
    sources = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*.py") if ".cogd" not in p.parts)
    started_at = time.time()
    done = threading.Event()
    reindexes: list[int] = []

    def reindex_loop() -> None:
        while not done.is_set():
            reindexes.append(run_cogd(repo, "index", "--full", check=False, timeout=600).returncode)

    def one(i: int):
        deadline_ms = GENEROUS_MS if i % GAVE_UP_EVERY else 20 + (i * 37) % 400
        session = f"{prefix}{i:04d}"
        if i % 2:
            data = payload("user_prompt_submit.json", repo, session_id=session, prompt=PROMPTS[i % len(PROMPTS)])
            return ("prompt", i, deadline_ms, *_hook_pid("prompt-submit", data, repo, deadline_ms))
        path = sources[i % len(sources)]
        data = payload("post_tool_use.read.range.json", repo, session_id=session, tool_use_id=f"toolu_{session}")
        data["tool_input"] = {"file_path": str(repo / path), "offset": 1, "limit": 20}
        data["tool_response"]["file"].update(filePath=str(repo / path), startLine=1, numLines=20)
        return ("tool", i, deadline_ms, *_hook_pid("post-tool-use", data, repo, deadline_ms))

    reindexer = threading.Thread(target=reindex_loop)
    reindexer.start()
    try:
        # The hooks start once the first full reindex runs.
        wait_for(lambda: call(repo / ".cogd" / "run" / "cogd.sock", "status", {}, timeout=30)["index"]["state"]
                 == "indexing", 60, what="the full reindex to start", step=0.02, max_step=0.02)
        began = time.monotonic()
        with ThreadPoolExecutor(DRIFT_WORKERS) as pool:
            results = list(pool.map(one, range(DRIFT_HOOKS)))
    finally:
        done.set()
        reindexer.join(600)
    seconds = time.monotonic() - began
    load = os.getloadavg()[0]
    _wait_idle(repo)
    sock = repo / ".cogd" / "run" / "cogd.sock"
    # Spooled tool uses are ingested within a housekeeping tick: wait for the spool to drain.
    spool = repo / ".cogd" / "run" / "tool-uses.spool"
    wait_for(lambda: not ((spool.exists() and spool.stat().st_size)
                          or spool.with_name(spool.name + ".ingesting").exists()), 60,
             what="the daemon to ingest the spool")
    call(sock, "status", {}, timeout=30)  # ...and the tick that drained it has finished its writes
    deliveries_settled(repo, 60)  # the last hooks' acknowledged packs may still be on their way in

    errors = [f"{kind} {i}: exit {code}, stderr {err[:200]!r}" for kind, i, _, _, code, _, err in results
              if code != 0 or err]
    assert not errors, f"{len(errors)} hooks failed:\n" + "\n".join(errors[:10])
    logs = _hook_lines_by_pid(repo, started_at)

    printed: dict[str, int] = {}
    for kind, i, deadline_ms, pid, code, out, err in results:
        if kind == "prompt" and out.strip():
            printed[f"{prefix}{i:04d}"] = len(_pack_text(out))
    recorded = dict(_ledger(repo, "SELECT session_id, size_chars FROM deliveries WHERE session_id LIKE ?",
                            (prefix + "%",)))
    handed, unread, lost, spooled = set(), 0, [], 0
    for kind, i, deadline_ms, pid, code, out, err in results:
        if kind != "tool":
            continue
        lines = logs.get(pid, [])
        lost += [line for line in lines if "tool use lost" in line]
        spooled += any("tool use spooled" in line for line in lines)
        if any(line.endswith("deadline reached: exit 0 with no output") for line in lines):
            unread += 1  # left before its payload was read: nothing to hand over
        else:
            handed.add(f"{prefix}{i:04d}")
    stored = [r[0] for r in _ledger(repo, "SELECT session_id FROM tool_uses WHERE session_id LIKE ?", (prefix + "%",))]

    prompts = [r for r in results if r[0] == "prompt"]
    generous_prompts = [r for r in prompts if r[2] == GENEROUS_MS]
    generous_tools = [r for r in results if r[0] == "tool" and r[2] == GENEROUS_MS]
    daemon_log = _log(repo, "daemon.log")
    tiny = {f"{prefix}{r[1]:04d}" for r in results if r[2] != GENEROUS_MS}
    tiny_prompts = sum(1 for r in prompts if r[2] != GENEROUS_MS)
    tiny_counts = (f"of them with a 20-400 ms deadline: {tiny_prompts} prompt hooks, "
                   f"{len(tiny & set(printed))} packs printed, {len(tiny & set(recorded))} recorded; "
                   f"{len(tiny) - tiny_prompts} tool-use hooks, {len(tiny & handed)} handed over, "
                   f"{len(tiny & set(stored))} stored")
    summary = (f"{DRIFT_HOOKS} hooks from {DRIFT_WORKERS} workers in {seconds:.1f} s, {len(reindexes)} full reindexes, "
               f"{DRIFT_BURNERS} burners, load average {load:.1f}: {len(prompts)} prompt hooks, {len(printed)} packs "
               f"printed, {len(recorded)} deliveries recorded; {len(results) - len(prompts)} tool-use hooks, "
               f"{len(handed)} handed over ({spooled} through the spool), {unread} left before reading stdin, "
               f"{len(stored)} stored; {tiny_counts}; withdrawn packs in the daemon log: "
               f"{daemon_log.count(' withdrawn, no delivery')}")
    for event in ("prompt-submit", "post-tool-use"):
        times = sorted(t for e, d, t in _HOOK_SECONDS if e == event and d == GENEROUS_MS)
        summary += (f"; {event} (generous deadline) p50 {_percentile(times, 50) * 1000:.0f} ms, "
                    f"p95 {_percentile(times, 95) * 1000:.0f} ms")
    print(f"\n[drift] {summary}")

    assert not lost, f"{len(lost)} tool uses lost: {lost[:5]}"
    unrecorded = sorted(set(printed) - set(recorded))
    pids = {f"{prefix}{r[1]:04d}": r[3] for r in results}
    why = "".join(f"\n{s}: hook log {logs.get(pids[s], [])}" for s in unrecorded[:5])
    why += "".join(f"\ndaemon: {line}" for line in daemon_log.splitlines()
                   if "acknowledge" in line and " withdrawn" not in line)[:3000]
    assert len(recorded) == len(printed) and recorded == printed, summary + why  # same sessions, same pack sizes
    assert len(stored) == len(set(stored)) == len(handed) and set(stored) == handed, summary
    # Every hook that had the time delivered: all its pack printed, all its tool use stored.
    assert all(f"{prefix}{r[1]:04d}" in printed for r in generous_prompts), summary
    assert all(f"{prefix}{r[1]:04d}" in handed for r in generous_tools), summary
    assert reindexes and not any(reindexes), reindexes  # each `cogd index --full` exited 0
    _still_serving(repo)
