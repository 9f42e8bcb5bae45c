"""Attacks that got through the safe-path layer, the boundary or the hook's contract, each kept here
as a regression test: a committed ``.cogd/run`` link into another repository's run folder, a memory
record of nested YAML aliases, a listener that streams an endless answer, a credential under a
run-together name (``PGPASSWORD``), and a model folder another user controls.

Real daemons on real sockets and real ``cogd-hook`` processes; every daemon a test starts is stopped
by a fixture finaliser (conftest's ``daemon``), and every listener a test opens is closed by one.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from conftest import HOOK_EXIT_SLACK_S, git, hook_log_lines, lexical_only, make_repo, run_cogd, run_hook
from cogd.config import EmbedConfig
from cogd.embed.model import ModelError, resolve_model

SAMPLE = {
    "pkg/__init__.py": '"""A tiny package."""\n',
    "pkg/geometry.py": (
        '"""Shapes and their areas."""\n\n\n'
        "def perimeter_of_square(side):\n"
        '    """Perimeter of a square with the given side."""\n'
        "    return 4 * side\n\n\n"
        "def connect_database(url):\n"
        '    """Open the database at url."""\n'
        "    return url\n"
    ),
}
HOOK_DEADLINE_MS = 3000


def _ledger_rows(root: Path) -> tuple[list[str], list[str]]:
    """(session ids of deliveries, session ids of tool uses) in ``root``'s ledger, read-only."""
    db = sqlite3.connect(f"file:{root / '.cogd' / 'state.db'}?mode=ro", uri=True)
    try:
        return ([r[0] for r in db.execute("SELECT session_id FROM deliveries ORDER BY id")],
                [r[0] for r in db.execute("SELECT session_id FROM tool_uses ORDER BY id")])
    finally:
        db.close()


def _raw_bytes_under(folder: Path) -> bytes:
    """Every regular file under ``folder`` (links not followed), concatenated: for raw-byte greps."""
    chunks = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                chunks.append(path.read_bytes())
    return b"".join(chunks)


# ---- a committed .cogd/run link into another repository's run folder ------------------------------

def test_linked_run_dir_never_reaches_another_repositorys_daemon(tmp_path, daemon):
    """The socket behind the link is ours (so the socket's own owner and peer checks pass); the hook
    must still refuse the linked folder: otherwise the hostile repository's prompts land in the other
    repository's ledger and that repository's code is injected into the hostile one's session."""
    victim = lexical_only(make_repo(tmp_path / "victim", SAMPLE))
    daemon(victim)
    hostile = make_repo(tmp_path / "hostile", {"a.py": "x = 1\n"}, commit=False)
    (hostile / ".cogd").mkdir()
    (hostile / ".cogd" / "run").symlink_to("../../victim/.cogd/run")
    git(hostile, "add", "-A")
    git(hostile, "commit", "-q", "-m", "a run folder that is somebody else's")
    before = _ledger_rows(victim)

    prompt, seconds = run_hook("prompt-submit", {"session_id": "hostile-prompt", "cwd": str(hostile),
                                                 "prompt": "connect_database perimeter_of_square"},
                               deadline_ms=HOOK_DEADLINE_MS)
    tool, _ = run_hook("post-tool-use", {"session_id": "hostile-tool", "cwd": str(hostile), "tool_name": "Read",
                                         "tool_input": {"file_path": str(hostile / "a.py")}, "tool_response": {}},
                       deadline_ms=HOOK_DEADLINE_MS)
    start, _ = run_hook("session-start", {"session_id": "hostile-start", "cwd": str(hostile), "source": "startup"},
                        deadline_ms=HOOK_DEADLINE_MS)

    for proc in (prompt, tool, start):
        assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    assert _ledger_rows(victim) == before
    link = hostile / ".cogd" / "run"
    logged = hook_log_lines(hostile, prompt.pid)
    assert logged and f"{link} is a symbolic link (to ../../victim/.cogd/run)" in logged[-1]
    assert f"rm {link}" in logged[-1]
    # The CLI refuses the same way rather than asking the other repository's daemon.
    status = run_cogd(hostile, "status", check=False)
    assert status.returncode != 0 and "perimeter_of_square" not in status.stdout
    assert f"refusing {link}: it is a symbolic link" in status.stdout + status.stderr


# ---- a memory record of nested YAML aliases ----------------------------------------------------------

def _alias_bomb(record_id: str, depth: int = 9, width: int = 9) -> str:
    """A record whose unknown key stands for width**depth strings in well under 1 KB."""
    lines = ["a: &a [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, depth):
        name, prev = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * width) + "]")
    front = f"id: {record_id}\ntype: rule\ntitle: nested aliases\nstatus: active\n" + "\n".join(lines)
    return f"---\n{front}\n---\nthe body of a crafted record\n"


def test_memory_record_of_nested_aliases_is_refused_not_expanded(tmp_path, daemon):
    record_id = "01JD0000000000000000000000"
    root = lexical_only(make_repo(tmp_path / "repo", {
        **SAMPLE, f".cogd/memory/rules/{record_id}.md": _alias_bomb(record_id)}))
    bomb = (root / ".cogd" / "memory" / "rules" / f"{record_id}.md").read_bytes()
    assert len(bomb) < 1024  # 9**9 = 387,420,489 strings once expanded

    # Before: `cogd memory list` walked every expanded string and ran for minutes (killed at 60 s).
    listed = run_cogd(root, "memory", "list", "--json", timeout=60)
    assert json.loads(listed.stdout) == []
    d = daemon(root)
    assert d.status()["root"] == str(root)  # the daemon started and answers
    prompt, seconds = run_hook("prompt-submit", {"session_id": "s1", "cwd": str(root),
                                                 "prompt": "perimeter_of_square"}, deadline_ms=HOOK_DEADLINE_MS)
    assert prompt.returncode == 0 and b"perimeter_of_square" in prompt.stdout
    assert b"nested aliases" not in prompt.stdout  # the refused record is never injected
    doctor = run_cogd(root, "doctor", "--json", "--no-model-load", check=False, timeout=120)
    problems = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "memory files"]
    assert problems and problems[0]["status"] == "fail"
    assert problems[0]["details"]["problems"] == [{
        "path": f"rules/{record_id}.md", "kind": "broken_frontmatter",
        "message": "line 7, column 8: YAML: aliases (*name) are not allowed in a memory record",
        "fix": "fix the frontmatter at that line and column"}]
    # The canonical file is left as it was: refused, never rewritten.
    assert (root / ".cogd" / "memory" / "rules" / f"{record_id}.md").read_bytes() == bomb


def test_records_cogd_writes_hold_no_alias(tmp_path):
    """The loader refuses aliases, so the writer must never emit one, even for a value shared twice."""
    from cogd.memory import record

    shared = {"session": "s1", "at": "2026-12-01"}
    text = "---\nid: 01JD0000000000000000000001\ntype: rule\ntitle: shared values\nstatus: active\n---\nbody\n"
    rec = record.parse(text)
    rec.extra = {"evidence": [shared, shared]}
    written = record.serialise(rec)
    assert "&id" not in written and "*id" not in written
    assert record.parse(written).extra == {"evidence": [shared, shared]}


# ---- a listener that streams an endless answer -------------------------------------------------------

@pytest.fixture
def endless_listener(tmp_path):
    """A listener of ours in a repository's socket path that answers every request with an endless line
    (no daemon runs). Yields the repository root; the listener is closed at teardown."""
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    run_dir = root / ".cogd" / "run"
    run_dir.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(run_dir / "cogd.sock"))
    server.listen(8)
    stop = threading.Event()
    sent = []

    def stream(conn):
        with conn:
            try:
                conn.recv(65536)
                chunk = b"A" * (1 << 20)
                while not stop.is_set():
                    conn.sendall(chunk)
                    sent.append(len(chunk))
            except OSError:
                pass

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=stream, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield root, sent
    stop.set()
    # close() alone does not wake a thread blocked in accept() on Linux (the join then waited its
    # whole 10 s); shutdown() does, with an OSError the loop returns on.
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.parametrize("event", ["prompt-submit", "post-tool-use", "session-end"])
def test_hook_stops_reading_an_endless_answer(endless_listener, event):
    root, sent = endless_listener
    proc, seconds = run_hook(event, {"session_id": "s1", "cwd": str(root), "prompt": "perimeter_of_square",
                                     "tool_name": "Read", "tool_input": {"file_path": str(root / "pkg/geometry.py")},
                                     "reason": "other"}, deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    lines = hook_log_lines(root, proc.pid)
    # Before: the hook read until its deadline (885 MB resident after 1.5 s) and overran it.
    assert any("AnswerTooLarge" in line and f"an answer over {4 << 20} bytes" in line for line in lines), lines


# ---- a credential under a run-together name ------------------------------------------------------------

def test_run_together_secret_names_are_masked_in_the_ledger(tmp_path, daemon):
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    daemon(root)
    secrets = {"PGPASSWORD: Zq7Kx2Mn9LpQv5": b"Kx2Mn9LpQv5", "export CLIENTSECRET=Qw8Rt5Yu2IoPx3": b"Rt5Yu2IoPx3"}
    for i, text in enumerate(secrets):
        proc, _ = run_hook("prompt-submit", {"session_id": f"s{i}", "cwd": str(root),
                                             "prompt": f"connect_database fails with {text}"},
                           deadline_ms=HOOK_DEADLINE_MS)
        assert proc.returncode == 0 and b"connect_database" in proc.stdout  # a delivery: the prompt is stored
    assert _ledger_rows(root)[0] == ["s0", "s1"]
    raw = _raw_bytes_under(root / ".cogd")
    for middle in secrets.values():
        assert middle not in raw
    assert b"PGPASSWORD: Zq7\xe2\x80\xa6[secret:secret_assignment]" in raw


# ---- a model folder another user controls --------------------------------------------------------------

def _model_dir(folder: Path) -> Path:
    folder.mkdir(mode=0o755)
    (folder / "model.onnx").write_bytes(b"not really a model")
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.mark.skipif(os.geteuid() != 0, reason="another uid is needed: run as root to chown to nobody")
def test_model_dir_owned_by_another_user_is_refused(tmp_path):
    folder = _model_dir(tmp_path / "shared-model")
    nobody = pwd.getpwnam("nobody")
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(ModelError, match=f"{folder} belongs to uid {nobody.pw_uid}, not to you or root"):
        resolve_model(EmbedConfig(model_dir=str(folder)))
    os.chown(folder, 0, 0)
    os.chown(folder / "tokenizer.json", nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(ModelError, match="tokenizer.json belongs to uid"):
        resolve_model(EmbedConfig(model_dir=str(folder)))


def test_model_dir_others_can_write_is_refused(tmp_path):
    folder = _model_dir(tmp_path / "open-model")
    os.chmod(folder, 0o777)
    with pytest.raises(ModelError, match=r"can be changed by other users \(mode 0777\)"):
        resolve_model(EmbedConfig(model_dir=str(folder)))
    os.chmod(folder, 0o755)
    with pytest.raises(ModelError) as refused:  # past the checks: the fake weights themselves are refused
        resolve_model(EmbedConfig(model_dir=str(folder)))
    assert "can be changed by other users" not in str(refused.value)
    shutil.rmtree(folder)


# ---- state committed under .cogd/, a root every user may write, a config that lifts the parse guard --

def _forged_spool_line(root: Path) -> str:
    payload = {"session_id": "forged", "tool_use_id": "toolu_forged", "cwd": str(root), "hook_event_name": "PostToolUse",
               "tool_name": "Edit", "tool_input": {"file_path": str(root / "pkg" / "geometry.py")},
               "tool_response": {"structuredPatch": [{"oldStart": 4, "oldLines": 3, "newStart": 4, "newLines": 3}]}}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "usage.tool_use", "params": {"payload": payload}}) + "\n"


def test_runtime_state_committed_to_git_is_refused(tmp_path, daemon):
    """A clone that carries a tool-use spool (or a ledger, or a marker) under .cogd/ ships state of the
    author's making as this user's own files: the daemon does not start on it, the hook injects nothing,
    doctor names the files and how to untrack them, and nothing of the spool reaches a ledger."""
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    run_dir = root / ".cogd" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "tool-uses.spool").write_text(_forged_spool_line(root), encoding="utf-8")
    (root / ".cogd" / "ledger.json").write_text('{"max_event_id": 999}', encoding="utf-8")
    git(root, "add", "-f", ".cogd/run/tool-uses.spool", ".cogd/ledger.json", ".cogd/config.toml")
    git(root, "commit", "-q", "-m", "runtime state that is not the repository's to ship")

    started = run_cogd(root, "start", check=False)
    assert started.returncode != 0
    said = started.stdout + started.stderr
    assert "holds files committed to git that only cogd may write: .cogd/ledger.json .cogd/run/tool-uses.spool" in said
    assert "git rm -r --cached -- .cogd/ledger.json .cogd/run/tool-uses.spool" in said
    assert "Traceback" not in said

    prompt, _ = run_hook("prompt-submit", {"session_id": "s", "cwd": str(root), "prompt": "perimeter_of_square"},
                         deadline_ms=HOOK_DEADLINE_MS)
    assert prompt.returncode == 0 and not prompt.stdout
    assert not (root / ".cogd" / "state.db").exists()  # no daemon ever ingested the forged tool use

    report = json.loads(run_cogd(root, "doctor", "--json", check=False).stdout)
    found = [c for c in report["checks"] if c["name"] == "committed state"]
    assert [c["status"] for c in found] == ["fail"]
    assert ".cogd/run/tool-uses.spool" in found[0]["finding"]

    # Untracked (the user's fix), then deleted because it came with the clone: the daemon starts.
    git(root, "rm", "-q", "-r", "--cached", "--", ".cogd/ledger.json", ".cogd/run/tool-uses.spool")
    (run_dir / "tool-uses.spool").unlink()
    (root / ".cogd" / "ledger.json").unlink()
    daemon(root)
    assert _ledger_rows(root)[1] == []


def test_a_root_every_user_may_write_is_refused(tmp_path):
    """o+w without the sticky bit lets any user rename .cogd/ away between two checks."""
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    os.chmod(root, 0o777)
    try:
        started = run_cogd(root, "start", check=False)
        assert started.returncode != 0
        said = started.stdout + started.stderr
        assert f"refusing {root}: it is writable by every user (mode 0777)" in said and f"chmod o-w {root}" in said
        report = json.loads(run_cogd(root, "doctor", "--json", check=False).stdout)
        assert [c["status"] for c in report["checks"] if c["name"] == "committed state"] == ["fail"]
        os.chmod(root, 0o1777)  # sticky, as /tmp: entries can only be renamed by their owner
        from cogd.committed import root_problem

        assert root_problem(root) is None
    finally:
        os.chmod(root, 0o755)


def test_a_committed_config_cannot_lift_the_parse_guard(tmp_path):
    from cogd.config import MAX_PARSE_TIMEOUT_MS, load_config

    config_file = tmp_path / "config.toml"
    config_file.write_text("[index]\nparse_timeout_ms = 999999999\n", encoding="utf-8")
    os.chmod(config_file, 0o600)
    assert load_config(config_file).index.parse_timeout_ms == MAX_PARSE_TIMEOUT_MS == 60_000
