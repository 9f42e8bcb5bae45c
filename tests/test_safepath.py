"""The safe-path layer under attack: committed links in ``.cogd/``, a planted ``hook.log`` link, a fresh
clone's open modes, another local user (connecting, reading, squatting the runtime directory, listening
in the victim's place). Real daemons, real ``cogd-hook`` processes; every daemon is stopped by a finaliser.

The other-user tests fork a child that drops to ``nobody``'s uid and gid and reports through a pipe;
they need root and are skipped otherwise (they say why).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import HOOK_EXIT_SLACK_S, git, lexical_only, make_repo, payload, run_cogd, run_hook
from cogd import safepath
from cogd.rpc import locate
from cogd.rpc.client import UntrustedListener, call, encode_request, exchange
from cogd.paths import AF_UNIX_PATH_MAX, Layout

SAMPLE = {
    "pkg/__init__.py": '"""A tiny package."""\n',
    "pkg/geometry.py": (
        '"""Shapes and their areas."""\n\n\n'
        "def perimeter_of_square(side):\n"
        '    """Perimeter of a square with the given side."""\n'
        "    return 4 * side\n"
    ),
}
HOOK_DEADLINE_MS = 3000  # the hook must finish inside it (plus conftest.HOOK_EXIT_SLACK_S for its exit, seen from outside)
IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="another uid is needed: run as root to fork a child as nobody")


def daemon_pids(root: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"cogd.daemon --root {root}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture
def stop_daemons():
    """Register repository roots; their daemons are stopped (then killed) at teardown, pass or fail."""
    roots: list[Path] = []
    yield roots.append
    for root in roots:
        if (root / ".cogd").is_dir() and not (root / ".cogd").is_symlink():
            subprocess.run([str(Path(sys.executable).parent / "cogd"), "stop"], cwd=root,
                           capture_output=True, timeout=60)
        for pid in daemon_pids(root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def repo(tmp_path, stop_daemons):
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    stop_daemons(root)
    return root


@pytest.fixture
def user_state(tmp_path, monkeypatch):
    """The per-user state directory the hook logs to when a repository's log is refused."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("COGD_HOOK_DEADLINE_MS", str(HOOK_DEADLINE_MS))
    return state / "cogd" / "hook.log"


def _prompt(root: Path) -> tuple[subprocess.CompletedProcess, float]:
    return run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt="perimeter of a square"),
                    timeout=30)


def _commit_link(root: Path, name: str, target: Path) -> Path:
    """Replace ``.cogd/<name>`` by a committed symbolic link to ``target`` (what a hostile repository ships)."""
    link = root / ".cogd" / name
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif os.path.lexists(link):
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    git(root, "add", "-f", str(link.relative_to(root)))
    git(root, "commit", "-q", "-m", f"ship .cogd/{name}")
    return link


# ---- committed links ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["run", "logs", "index", "memory"])
def test_committed_link_in_cogd_is_refused_everywhere(repo, tmp_path, user_state, name):
    outside = tmp_path / "someone-elses"
    outside.mkdir()
    (outside / "marker").write_text("untouched\n")
    link = _commit_link(repo, name, outside)

    # The hook: exit 0 within its deadline, nothing printed, nothing started, nothing written outside.
    proc, seconds = _prompt(repo)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    start = run_cogd(repo, "start", check=False)
    assert start.returncode == 1 and "Traceback" not in start.stderr
    assert start.stderr == (f"Error: refusing {link}: it is a symbolic link (to {outside}); "
                            f"fix: remove the symlink: rm {link} (cogd recreates a private one)\n")
    assert f"rm {link}" in start.stderr
    assert daemon_pids(repo) == []
    assert sorted(os.listdir(outside)) == ["marker"] and (outside / "marker").read_text() == "untouched\n"

    # Why is logged somewhere safe: the repository's log when its folder is sound, else the user's.
    repo_log = repo / ".cogd" / "logs" / "hook.log"
    where = user_state if name == "logs" else repo_log
    text = where.read_text()
    assert f"{link} is a symbolic link" in text
    if name == "logs":
        assert "repository log refused" in text
    elif name == "run":  # refused before connecting: no socket behind a linked folder is ever tried
        assert f"no context: UnsafePath: {link} is a symbolic link" in text
    else:
        assert "could not start the daemon: UnsafePath" in text

    # Doctor names the path and the fix, and fails.
    doctor = run_cogd(repo, "doctor", "--json", "--no-model-load", check=False)
    assert doctor.returncode == 1
    perms = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "permissions"]
    assert [c for c in perms if "has mode" not in c["finding"]] == [{"name": "permissions", "status": "fail",
                      "finding": f"{link} is a symbolic link (to {outside})",
                      "fix": f"remove the symlink: rm {link} (cogd recreates a private one)",
                      "details": {"path": str(link)}}]

    # The user's fix works: remove the link and untrack it (committed runtime state is refused too).
    link.unlink()
    git(repo, "rm", "-r", "-q", "--cached", "--", f".cogd/{name}")
    git(repo, "commit", "-q", "-m", "untrack the link")
    run_cogd(repo, "start")
    assert len(daemon_pids(repo)) == 1
    assert sorted(os.listdir(outside)) == ["marker"]


def test_cogd_dir_itself_a_link_is_refused(repo, tmp_path, user_state):
    outside = tmp_path / "elsewhere"
    shutil.move(repo / ".cogd", outside)
    (repo / ".cogd").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    proc, _ = _prompt(repo)
    assert proc.returncode == 0 and proc.stdout == b""
    start = run_cogd(repo, "start", check=False)
    assert start.returncode == 1 and f"refusing {repo / '.cogd'}: it is a symbolic link" in start.stderr
    assert sorted(p.name for p in outside.iterdir()) == before
    assert "repository log refused" in user_state.read_text()


def test_planted_hook_log_link_leaves_its_target_alone(repo, tmp_path, user_state):
    bashrc = tmp_path / "home" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_text("export PATH=/usr/bin\n")
    link = _commit_link(repo, "logs/hook.log", bashrc)
    proc, seconds = _prompt(repo)
    assert proc.returncode == 0 and proc.stdout == b"" and seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    assert bashrc.read_text() == "export PATH=/usr/bin\n"
    assert os.path.islink(link)
    logged = user_state.read_text()
    assert f"repository log refused ({link} is a symbolic link (to {bashrc})" in logged
    assert daemon_pids(repo) == []  # the daemon refuses the tree too (its walk finds the link)


def test_daemon_log_handler_refuses_a_link(tmp_path):
    from cogd.daemon.server import SafeRotatingFileHandler

    target = tmp_path / "bashrc"
    target.write_text("keep\n")
    (tmp_path / "daemon.log").symlink_to(target)
    with pytest.raises(safepath.UnsafePath, match="is a symbolic link"):
        SafeRotatingFileHandler(tmp_path / "daemon.log", maxBytes=100, backupCount=1)
    (tmp_path / "daemon.log").unlink()
    handler = SafeRotatingFileHandler(tmp_path / "daemon.log", maxBytes=100, backupCount=1, encoding="utf-8")
    try:
        for i in range(10):
            handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, f"line {i} " + "x" * 20, None, None))
    finally:
        handler.close()
    assert stat.S_IMODE(os.lstat(tmp_path / "daemon.log").st_mode) == 0o600
    assert (tmp_path / "daemon.log.1").exists() and target.read_text() == "keep\n"


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_sqlite_files_are_checked_before_connecting(tmp_path, suffix):
    from cogd.usage.ledger import Ledger

    cogd = tmp_path / ".cogd"
    cogd.mkdir(mode=0o700)
    target = tmp_path / "secret"
    target.write_bytes(b"private key\n")
    (cogd / f"state.db{suffix}").symlink_to(target)
    with pytest.raises(safepath.UnsafePath, match=f"state.db{suffix} is a symbolic link"):
        Ledger(cogd / "state.db")
    assert target.read_bytes() == b"private key\n"


def test_memory_file_link_is_not_read(tmp_path):
    from cogd.memory.record import read

    secret = tmp_path / "id_rsa"
    secret.write_text("---\ntitle: stolen\n---\nBEGIN PRIVATE KEY\n")
    (tmp_path / "x.md").symlink_to(secret)
    with pytest.raises(safepath.UnsafePath, match="x.md is a symbolic link"):
        read(tmp_path / "x.md")


# ---- modes -------------------------------------------------------------------------------------

def _modes(cogd: Path) -> dict[str, str]:
    found = {}
    for dirpath, dirs, files in os.walk(cogd):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, cogd)] = f"{stat.S_IMODE(os.lstat(path).st_mode):04o}"
    return found


def test_fresh_clone_modes_are_tightened_at_start(repo):
    cogd = repo / ".cogd"
    db = cogd / "state.db"
    old = os.umask(0o022)
    try:  # what a clone plus an earlier careless version leave behind: 0755 folders, 0644 files
        (cogd / "memory" / "observations").mkdir(parents=True)
        (cogd / "memory" / "observations" / "note.md").write_text("not a record yet\n")
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE prompts(text)")
        conn.commit()
        conn.close()
        os.chmod(cogd, 0o755)
    finally:
        os.umask(old)
    assert stat.S_IMODE(db.stat().st_mode) == 0o644
    doctor = run_cogd(repo, "doctor", "--json", "--no-model-load", check=False)
    # Modes of ours that are only too open are warnings (the next start tightens them), each path
    # named, the folders' contents too. Only the stray note (no frontmatter) fails.
    assert [c["name"] for c in json.loads(doctor.stdout)["checks"] if c["status"] == "fail"] == ["memory files"]
    perms = {c["details"]["path"]: c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "permissions"}
    assert {c["status"] for c in perms.values()} == {"warn"}
    assert perms[str(db)]["finding"] == f"{db} has mode 0644: other users can read it"
    assert perms[str(db)]["fix"] == f"chmod 600 {db} (or `cogd start`, which tightens every mode under .cogd/)"
    assert perms[str(cogd)]["fix"].startswith(f"chmod 700 {cogd}")
    note = cogd / "memory" / "observations" / "note.md"
    assert perms[str(note)]["finding"] == f"{note} has mode 0644: other users can read it"
    assert perms[str(note.parent)]["finding"] == f"{note.parent} has mode 0755: other users can read it"
    assert stat.S_IMODE(db.stat().st_mode) == 0o644  # doctor only reads: the modes are start's to fix

    run_cogd(repo, "start")
    run_cogd(repo, "index")
    modes = _modes(cogd)
    assert modes["state.db"] == "0600" and modes["config.toml"] == "0600"
    assert modes["memory/observations/note.md"] == "0600"
    assert {k: v for k, v in modes.items() if (cogd / k).is_dir() and v != "0700"} == {}
    assert {k: v for k, v in modes.items() if not (cogd / k).is_dir() and v != "0600"} == {}
    assert "index/index.db" in modes and "logs/daemon.log" in modes and "run/cogd.sock" in modes
    assert stat.S_IMODE(cogd.stat().st_mode) == 0o700
    checks = json.loads(run_cogd(repo, "doctor", "--json", "--no-model-load", check=False).stdout)["checks"]
    assert [c["status"] for c in checks if c["name"] == "permissions"] == ["ok"]


# ---- another local user ------------------------------------------------------------------------

NOBODY = pwd.getpwnam("nobody") if IS_ROOT else None


def as_nobody(fn, *args) -> object:
    """Run ``fn(*args)`` in a forked child as nobody (uid and gid); return what it returns (JSON-able)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges for good, run, report, leave without cleanup
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            try:
                result = {"ok": fn(*args)}
            except OSError as exc:
                result = {"errno": exc.errno, "error": str(exc)}
            os.write(write_end, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _connect_and_ask(path: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    try:
        s.sendall(encode_request("status", {}))
        answer = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):  # closed with our request unread
        answer = b""
    s.close()
    return answer.decode() or "closed without an answer"


def _read(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read(100).decode(errors="replace")


@pytest.fixture
def shared_base(stop_daemons):
    """A directory under /tmp that nobody may traverse (0711), unlike pytest's 0700 tmp_path."""
    base = Path(tempfile.mkdtemp(prefix="cogd-safepath-", dir="/tmp"))
    os.chmod(base, 0o711)
    yield base
    for root in base.glob("*"):
        for pid in daemon_pids(root):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(base, ignore_errors=True)


@NEEDS_ROOT
def test_another_user_can_neither_connect_nor_read(shared_base, stop_daemons):
    root = lexical_only(make_repo(shared_base / "repo", SAMPLE))
    os.chmod(root, 0o755)
    stop_daemons(root)
    run_cogd(root, "start")
    run_cogd(root, "index")
    layout = Layout(root)
    sock = str(layout.socket_path)
    secrets = [str(layout.state_db), str(layout.index_db), str(layout.daemon_log)]

    # As the daemon left it: .cogd/ is 0700, so not even the path can be reached.
    assert as_nobody(_connect_and_ask, sock)["errno"] == 13
    assert [as_nobody(_read, p).get("errno") for p in secrets] == [13, 13, 13]

    # Folders opened for traversal by mistake: the files and the socket are still 0600.
    for folder in (layout.cogd_dir, layout.run_dir, layout.index_dir, layout.logs_dir):
        os.chmod(folder, 0o711)
    assert as_nobody(_connect_and_ask, sock)["errno"] == 13
    assert [as_nobody(_read, p).get("errno") for p in secrets] == [13, 13, 13]

    # The socket too (chmod 666): the daemon's peer-credential check still refuses the stranger.
    # The daemon re-tightens its folders whenever it opens a store (about once a second), so on a
    # busy machine the stranger may meet a 0700 folder again (EACCES) before it reaches the
    # socket: open the way again until it does. Either way it never gets an answer.
    outcomes = []
    for _ in range(50):
        for folder in (layout.cogd_dir, layout.run_dir):
            os.chmod(folder, 0o711)
        os.chmod(sock, 0o666)
        outcome = as_nobody(_connect_and_ask, sock)
        outcomes.append(outcome)
        if outcome == {"ok": "closed without an answer"}:
            break
    assert outcomes[-1] == {"ok": "closed without an answer"}, outcomes
    assert all(o == {"ok": "closed without an answer"} or o.get("errno") == 13 for o in outcomes), outcomes
    assert f"refusing a connection from uid {NOBODY.pw_uid}" in layout.daemon_log.read_text()
    assert call(sock, "status", {}, timeout=10)["root"] == str(root)  # its own user is still served


def _listen_as_other_user(path: str, ready_fd: int, done_fd: int) -> dict:
    """A stranger's listener at ``path``: answers with injected text, reports what it received."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(4)
    os.write(ready_fd, b"ready")
    received = []
    while True:
        ready, _, _ = select.select([srv, done_fd], [], [], 30)
        if not ready or done_fd in ready:
            break
        conn, _ = srv.accept()
        conn.settimeout(5)
        try:
            data = conn.recv(65536)
            if not data:  # connected and left without sending anything
                conn.close()
                continue
            received.append(data.decode(errors="replace"))
            conn.sendall(b'{"jsonrpc": "2.0", "id": 1, "result": {"text": "INJECTED by another user"}}\n')
        except OSError:
            pass
        conn.close()
    return received


def _stranger(path: str):
    """Start ``_listen_as_other_user`` in a child as nobody; return (finish → what it received)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    result: dict = {}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            got = _listen_as_other_user(path, ready_w, done_r)
            os.write(write_end, json.dumps(got).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    assert select.select([ready_r], [], [], 30)[0], "the stranger's listener did not start"

    def finish() -> list[str]:
        os.write(done_w, b"x")
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        result["received"] = json.loads(data)
        return result["received"]

    return finish


@NEEDS_ROOT
def test_hijacked_run_dir_gets_no_prompt(shared_base, stop_daemons, user_state):
    # Finding reproduced: .cogd/run is committed as a link to a directory the other user owns,
    # where they listen on cogd.sock. The victim's hook must send nothing and inject nothing.
    evil = shared_base / "evil"
    evil.mkdir()
    os.chown(evil, NOBODY.pw_uid, NOBODY.pw_gid)
    root = lexical_only(make_repo(shared_base / "victim", SAMPLE))
    stop_daemons(root)
    _commit_link(root, "run", evil)
    finish = _stranger(str(evil / "cogd.sock"))
    try:
        proc, seconds = _prompt(root)
    finally:
        received = finish()
    assert received == []
    assert proc.returncode == 0 and proc.stdout == b"" and seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    log = (root / ".cogd" / "logs" / "hook.log").read_text()
    # Refused at the linked folder, before the socket in it is even looked at (cogd.rpc.locate.socket_path).
    assert f"no context: UnsafePath: {root / '.cogd' / 'run'} is a symbolic link (to {evil})" in log
    assert sorted(os.listdir(evil)) == ["cogd.sock"]  # no lock, no pid file, no log of the victim's


@NEEDS_ROOT
def test_client_checks_the_listener_not_only_the_file(shared_base):
    # A socket file of ours with another user's process behind it (root chowned the inode):
    # the lstat check passes, SO_PEERCRED does not.
    evil = shared_base / "evil"
    evil.mkdir()
    os.chown(evil, NOBODY.pw_uid, NOBODY.pw_gid)
    path = str(evil / "s.sock")
    finish = _stranger(path)
    try:
        os.chown(path, os.getuid(), os.getgid())
        with pytest.raises(UntrustedListener, match=f"runs as uid {NOBODY.pw_uid}, not as you"):
            exchange(path, encode_request("context.prompt", {"prompt": "the secret prompt"}), timeout=10)
    finally:
        received = finish()
    assert received == []  # connected, checked, closed: the prompt never left


# ---- the per-user runtime directory ------------------------------------------------------------

def _deep_repo(base: Path) -> Path:
    deep = base
    while len(str(deep / ".cogd" / "run" / "cogd.sock")) <= AF_UNIX_PATH_MAX + 10:
        deep = deep / "a-rather-long-directory-name"
    return lexical_only(make_repo(deep, SAMPLE))


@pytest.fixture
def runtime_env(tmp_path, monkeypatch):
    """A test-controlled stand-in for /tmp (COGD_RUNTIME_TMP) and a private cache home; no XDG_RUNTIME_DIR."""
    fake_tmp = Path(tempfile.mkdtemp(prefix="cogd-rt-", dir="/tmp"))
    os.chmod(fake_tmp, 0o1777)  # like /tmp: anyone may create, the sticky bit keeps others' entries theirs
    cache_home = Path(tempfile.mkdtemp(prefix="cogd-home-", dir="/tmp"))  # short, as ~/.cache is (AF_UNIX)
    cache = cache_home / "cache"
    monkeypatch.setenv(locate.RUNTIME_TMP_ENV, str(fake_tmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield fake_tmp, cache
    shutil.rmtree(fake_tmp, ignore_errors=True)
    shutil.rmtree(cache_home, ignore_errors=True)


def _squat(path: Path, how: str, elsewhere: Path) -> str:
    if how == "link":
        elsewhere.mkdir(mode=0o700)
        path.symlink_to(elsewhere)
        return "is a symbolic link"
    path.mkdir(mode=0o777)
    os.chmod(path, 0o777)
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return f"belongs to uid {NOBODY.pw_uid}, not to you"


@pytest.mark.parametrize("how", ["link", pytest.param("other-user", marks=NEEDS_ROOT)])
def test_squatted_tmp_runtime_dir_falls_back_to_the_cache(tmp_path, runtime_env, stop_daemons, monkeypatch, how):
    fake_tmp, cache = runtime_env
    squatted = fake_tmp / f"cogd-{os.getuid()}"
    problem = _squat(squatted, how, tmp_path / "squatter")
    root = _deep_repo(tmp_path / "r")
    stop_daemons(root)

    start = run_cogd(root, "start", check=False)
    assert start.returncode == 0, start.stderr
    status = json.loads(run_cogd(root, "status", "--json").stdout)
    sock = Path(status["socket"])
    assert sock.parent == cache / "cogd" / "run"
    assert len(os.fsencode(str(sock))) <= AF_UNIX_PATH_MAX
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700 and stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert status["runtime"] == f"{sock.parent} (skipped: {squatted} {problem})"
    assert "runtime dir" in run_cogd(root, "status").stdout
    assert os.listdir(squatted) == []  # nothing of ours in the squatter's directory

    # A hook started by an editor with another environment (its own XDG_RUNTIME_DIR, no cache
    # variable) finds the same socket: the daemon recorded it in .cogd/run/daemon.pid.
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert Layout(root).socket_path == sock
    run_cogd(root, "index")
    proc, _ = _prompt(root)
    assert "pkg/geometry.py::perimeter_of_square" in proc.stdout.decode()
    assert list(xdg.iterdir()) == []

    checks = json.loads(run_cogd(root, "doctor", "--json", "--no-model-load", check=False).stdout)["checks"]
    [runtime] = [c for c in checks if c["name"] == "runtime dir"]
    assert runtime["status"] == "warn"
    assert runtime["finding"] == f"the daemon's socket is in {sock.parent} (skipped: {squatted} {problem})"


@NEEDS_ROOT
def test_every_runtime_dir_squatted_gives_a_clear_message(tmp_path, runtime_env, stop_daemons):
    fake_tmp, cache = runtime_env
    _squat(fake_tmp / f"cogd-{os.getuid()}", "other-user", tmp_path / "unused")
    (cache / "cogd").mkdir(parents=True)
    _squat(cache / "cogd" / "run", "other-user", tmp_path / "unused2")
    root = _deep_repo(tmp_path / "r")
    stop_daemons(root)
    start = run_cogd(root, "start", check=False)
    assert start.returncode == 1 and "Traceback" not in start.stderr + start.stdout
    assert "the other runtime directories are unusable" in start.stderr
    assert str(cache / "cogd" / "run") in start.stderr
    assert daemon_pids(root) == []
    status = run_cogd(root, "status", check=False)
    assert "Traceback" not in status.stderr and "no usable runtime directory" in status.stdout
    checks = json.loads(run_cogd(root, "doctor", "--json", "--no-model-load", check=False).stdout)["checks"]
    [runtime] = [c for c in checks if c["name"] == "runtime dir"]
    assert runtime["status"] == "fail" and f"{fake_tmp}/cogd-{os.getuid()} belongs to uid" in runtime["finding"]


def test_runtime_dir_prefers_xdg(tmp_path, runtime_env, monkeypatch):
    fake_tmp, cache = runtime_env
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert locate.runtime_candidates() == [str(xdg / "cogd"), f"{fake_tmp}/cogd-{os.getuid()}",
                                           str(cache / "cogd" / "run")]
    assert locate.runtime_dir() == str(xdg / "cogd")
    assert stat.S_IMODE(os.lstat(xdg / "cogd").st_mode) == 0o700
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert locate.runtime_dir() == f"{fake_tmp}/cogd-{os.getuid()}"


def test_recorded_socket_must_be_this_roots_hashed_name(tmp_path, runtime_env):
    # A pid file is read only from the checked .cogd/run/, and its socket only when it carries this
    # root's hashed name: a copied .cogd/ (or a crafted one) cannot point clients elsewhere.
    root = _deep_repo(tmp_path / "r")
    run_dir = root / ".cogd" / "run"
    run_dir.mkdir(parents=True, mode=0o700)
    os.chmod(root / ".cogd", 0o700)
    good = os.path.join(locate.runtime_dir(), locate._hashed_name(str(root)))
    cases = (("/tmp/elsewhere.sock", None), (good + "x", None), ("relative/" + os.path.basename(good), None),
             (good, good))
    for recorded, expected in cases:
        (run_dir / "daemon.pid").write_text(json.dumps({"pid": 1, "socket": recorded}))
        assert locate.recorded_socket(str(root)) == expected
    (run_dir / "daemon.pid").unlink()
    (run_dir / "daemon.pid").symlink_to(tmp_path / "elsewhere.pid")
    (tmp_path / "elsewhere.pid").write_text(json.dumps({"pid": 1, "socket": good}))
    assert locate.recorded_socket(str(root)) is None  # a linked pid file is not read
