"""Shared fixtures: real git repositories built from real code, real daemons.

The "standard-library repository" copies a few packages of the running
interpreter's standard library (real code nobody here wrote) into a temporary
git repository.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
PAYLOADS = FIXTURES / "hook-payloads"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
STDLIB_PACKAGES = ("json", "email", "http", "logging", "asyncio")
BIN = Path(sys.executable).parent
COGD = str(BIN / "cogd")
COGD_HOOK = str(BIN / "cogd-hook")


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` with a fixed identity; returns stdout."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def write(root: Path, rel: str, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8, or bytes) to ``root/rel``, creating folders."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def make_repo(root: Path, files: dict[str, str | bytes] | None = None, commit: bool = True) -> Path:
    """A git repository at ``root`` holding ``files`` (path → text or bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for rel, content in (files or {}).items():
        write(root, rel, content)
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "--allow-empty", "-m", "initial")
    return root


LEXICAL_ONLY = "# this test is about something other than embeddings\n[embed]\nenabled = false\n"


def lexical_only(root: Path) -> Path:
    """Configure ``root``'s cogd without embeddings (for tests about other things)."""
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text(LEXICAL_ONLY, encoding="utf-8")
    return root


def copy_stdlib(dest: Path, packages: tuple[str, ...] = STDLIB_PACKAGES) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in packages:
        shutil.copytree(STDLIB / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return make_repo(dest)


@pytest.fixture(autouse=True)
def _restore_umask():
    """Put the process umask back after each test: an in-process ``cogd`` command (CliRunner)
    sets 077 for what it creates, and a later test's ``git clone`` would inherit it."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


@pytest.fixture(scope="session")
def stdlib_template(tmp_path_factory) -> Path:
    """A committed git repository of STDLIB_PACKAGES (do not modify: copy it)."""
    return copy_stdlib(tmp_path_factory.mktemp("stdlib") / "repo")


def run_cogd(root: Path, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real ``cogd`` console script in ``root``."""
    proc = subprocess.run([COGD, *args], cwd=root, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


_interruptions: list[int] = []  # signals that interrupted the session (SIGINT, or SIGTERM: pytest_configure)


def _note_interruption(signum, frame) -> None:  # noqa: ARG001
    """A SIGINT or SIGTERM handler: note it (click swallows the KeyboardInterrupt), then raise one."""
    _interruptions.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def cogd_in_process(root: Path, *args: str, check: bool = True,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cogd --root <root> <args>`` run in this process (click's test runner), returned as
    :func:`run_cogd` returns the real command: ``returncode``, ``stdout``, ``stderr``.

    The same command code (talking to a running daemon over its socket, or doing the work
    in-process when none runs) without a Python start-up and the CLI's imports, which cost more
    than most commands on a busy machine: for the steps around what a test is about. A test
    whose subject is the command's process (its exit, signals, the environment it reads at
    start, a crash point) runs :func:`run_cogd`. An exception the command did not turn into a
    message is appended to ``stderr`` as its traceback, so "no Traceback" assertions still
    catch it. An interruption during the command (Ctrl-C, or the SIGTERM this conftest turns into
    one), which click would print as "Aborted!" with exit 1, is raised again as KeyboardInterrupt:
    it ends the session as it does around a real process. The umask the command sets (077) is
    put back afterwards; ``env`` (name → value) is set for the call only. ``check`` raises
    AssertionError on a non-zero exit.
    """
    import traceback

    from click.testing import CliRunner

    from cogd.cli import main

    before = os.umask(0o022)
    os.umask(before)
    interruptions = len(_interruptions)
    # Ctrl-C is noted too, where it would interrupt (never where it is ignored, as in a background job)
    noted = (threading.current_thread() is threading.main_thread()
             and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if noted:
        signal.signal(signal.SIGINT, _note_interruption)
    try:
        result = CliRunner().invoke(main, ["--root", str(root), *args], env=env)
    finally:
        os.umask(before)
        if noted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(_interruptions) > interruptions:  # click made it "Aborted!" and exit 1: it is the session's
        raise KeyboardInterrupt("during an in-process cogd command")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    proc = subprocess.CompletedProcess(["cogd (in-process)", "--root", str(root), *args], result.exit_code,
                                       result.stdout, stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# Hooks whose test asserts what they print (not how fast) run with this deadline, set by the
# test (``run_hook(..., deadline_ms=HOOK_DEADLINE_MS)``): a loaded machine must not turn a
# content assertion into a timeout. Latency is measured by scripts/bench_hooks.py, not here.
HOOK_DEADLINE_MS = 30_000
# What a hook process may take beyond its own deadline, measured from outside: fork and exec
# before its clock starts, exit and pipe teardown after it stops. Generous: this bound only
# catches a hook that ignores its deadline, not a slow machine.
HOOK_EXIT_SLACK_S = 10.0


def run_hook(event: str, payload: object, *, raw: bytes | None = None, timeout: float = 60,
             env: dict | None = None, args: tuple[str, ...] = (),
             deadline_ms: int | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Pipe a payload through the real ``cogd-hook`` process; returns (process, seconds).

    ``deadline_ms`` sets ``COGD_HOOK_DEADLINE_MS`` for this hook (None: the caller's ``env``
    or the hook's own configuration decides). ``timeout`` (seconds) kills a hook that hangs.
    The returned process also carries ``pid``, to find the hook's own lines in ``hook.log``.
    """
    data = raw if raw is not None else json.dumps(payload).encode()
    extra = dict(env or {})
    if deadline_ms is not None:
        extra["COGD_HOOK_DEADLINE_MS"] = str(deadline_ms)
    started = time.monotonic()
    with subprocess.Popen([COGD_HOOK, event, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env={**os.environ, **extra}) as child:
        try:
            stdout, stderr = child.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    proc.pid = child.pid
    return proc, time.monotonic() - started


def hook_log_lines(root: Path, pid: int) -> list[str]:
    """The lines hook process ``pid`` wrote to ``root``'s ``.cogd/logs/hook.log`` (rotation aside)."""
    path = root / ".cogd" / "logs" / "hook.log"
    if not path.exists():
        return []
    marker = f" pid={pid} "
    return [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if marker in line]


def payload(name: str, cwd: Path, **overrides) -> dict:
    """A shared hook payload fixture with ``{{CWD}}`` filled in and fields overridden."""
    text = (PAYLOADS / name).read_text(encoding="utf-8").replace("{{CWD}}", str(cwd))
    data = json.loads(text)
    data.update(overrides)
    return data


# ---------------------------------------------------------------- a small real code index

# One core module every user module calls, four users, and a module nobody calls: enough for
# PageRank, edges to expand over and BM25 ties, small enough to index in well under a second.
SMALL_CORE = '''"""Core helpers everyone uses."""


def normalise(text):
    """Fold case and spaces."""
    return " ".join(text.lower().split())


def tokenise(text):
    return normalise(text).split()
'''
SMALL_USERS = {
    f"pkg/user{n}.py": f'''from pkg.core import normalise, tokenise


def handle{n}(text):
    """Handler {n}."""
    return tokenise(normalise(text))
'''
    for n in range(4)
}
SMALL_LONELY = '''def lonely_report(rows):
    """Format the lonely report table."""
    return [str(r) for r in rows]


def lonely_footer(rows):
    """Footer line of the lonely report."""
    return f"{len(rows)} rows"
'''
SMALL_REPO = {"pkg/__init__.py": "", "pkg/core.py": SMALL_CORE, "pkg/lonely.py": SMALL_LONELY, **SMALL_USERS}


@pytest.fixture
def small_index(tmp_path):
    """``(root, conn)``: :data:`SMALL_REPO` as a git repository under ``tmp_path/repo`` and a
    connection to its freshly built index (real tree-sitter, real SQLite), closed after the test."""
    from cogd.index.indexer import Indexer  # tree-sitter: only for the tests that ask

    root = make_repo(tmp_path / "repo", SMALL_REPO)
    indexer = Indexer(root, tmp_path / "index.db")
    indexer.refresh()
    yield root, indexer.conn
    indexer.close()


# ---------------------------------------------------------------- memory stores, in-process

@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository root with ``.cogd/index`` (no git): what a :class:`MemoryStore` needs."""
    (tmp_path / ".cogd" / "index").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def store(root: Path):
    """A :class:`cogd.memory.api.MemoryStore` on ``root`` (real files, real SQLite), closed after the test."""
    from cogd.memory.api import MemoryStore  # numpy and the memory package: only for the tests that ask

    s = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    yield s
    s.close()


def refused(kind: str, fn, *args, **kwargs):
    """Call ``fn`` and assert it raises a MemoryRefused of ``kind``; returns the error."""
    from cogd.memory.errors import MemoryRefused

    with pytest.raises(MemoryRefused) as info:
        fn(*args, **kwargs)
    assert info.value.kind == kind, (info.value.kind, str(info.value))
    return info.value


# ---------------------------------------------------------------- waiting on conditions

# How long a test waits for something the daemon does in the background (an index refresh,
# the watcher, embeddings of a small corpus) before it calls it a failure. Generous on purpose:
# a wait returns as soon as its condition holds, so only a broken test ever waits this long.
WAIT_S = 120.0


def interruptible() -> None:
    """``preexec_fn`` for a child a test will Ctrl-C: SIGINT back to its default disposition.

    A shell starts a background job (``pytest … &``, as ``scripts/stress_suite.sh`` and many CI
    runners do) with SIGINT ignored, every child inherits that, and Python then installs no
    KeyboardInterrupt handler: the test's Ctrl-C would be lost. A terminal's foreground program
    never starts that way, so the child is given the disposition a user's shell gives it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(condition, timeout: float = WAIT_S, what: str = "the condition", step: float = 0.05,
             max_step: float = 0.5):
    """Poll ``condition()`` until it returns something truthy, and return that value.

    ``timeout`` is in seconds; the poll interval grows from ``step`` to ``max_step`` (a
    condition that holds only briefly, such as "a reindex is running", wants both small). Raises
    AssertionError naming ``what`` and the last value seen when ``timeout`` passes. An
    exception from ``condition`` propagates (a broken probe is not a slow one).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {value!r})")
        time.sleep(step)
        step = min(step * 1.5, max_step)


@pytest.fixture(scope="module")
def stdlib_index(tmp_path_factory):
    """``(root, conn)``: the standard library's ``json`` and ``email`` packages in a folder of the
    module's own, indexed with real tree-sitter; one index per test module."""
    from cogd.index.indexer import Indexer  # tree-sitter: only for the modules that use it

    base = tmp_path_factory.mktemp("stdlib-index")
    root = copy_stdlib(base / "repo", ("json", "email"))
    indexer = Indexer(root, base / "index.db")
    indexer.refresh()
    yield root, indexer.conn
    indexer.close()


def deliveries_settled(root: Path, timeout: float = WAIT_S) -> None:
    """Wait until the daemon serving ``root`` holds no acknowledged pack whose ledger write is
    still to come (status ``deliveries``, docs/protocol.md), so a ledger read sees every pack a
    hook printed. A hook waits only a bounded time for that write before it exits, so on a busy
    machine the write can trail the hook. Returns at once when no daemon answers; raises
    AssertionError after ``timeout`` seconds."""
    from cogd.rpc.client import DaemonUnavailable, call

    sock = root / ".cogd" / "run" / "cogd.sock"
    if not sock.exists():
        return
    try:
        # "held" counts too: an acknowledgement still in the socket or the daemon's ack queue
        # leaves its pack held until the write starts (a client that never acknowledges is
        # withdrawn after [daemon] ack_wait_ms).
        wait_for(lambda: call(sock, "status", {}, timeout=30)["deliveries"] == {"held": 0, "recording": 0},
                 timeout, what="acknowledged packs to be recorded")
    except DaemonUnavailable:
        return


# ---------------------------------------------------------------- real daemons, always stopped

def daemon_processes(under: Path | None = None) -> dict[int, str]:
    """pid → ``--root`` of every live ``cogd.daemon`` process of this user, optionally only
    those whose root is ``under`` (or below) that folder.

    Found from ``/proc/*/cmdline`` the way ``cogd.rpc.control.is_daemon_process`` checks one
    pid (``cogd.daemon`` in argv, the root after ``--root``), so a daemon is found even when its
    pid file is missing or stale. Zombies and other users' processes are left out, and so is a
    child of such a daemon: between its fork and its exec (a ``git`` the history miner runs, a
    parser process) a child still shows the daemon's command line, for longer on a busy machine.
    """
    prefix = None if under is None else os.path.realpath(under)
    uid = os.getuid()
    found: dict[int, str] = {}
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b") ", 1)[-1].split()  # state, ppid, ...
            if fields[0] == b"Z":
                continue
        except (OSError, IndexError):
            continue  # gone meanwhile
        if b"cogd.daemon" not in argv or b"--root" not in argv:
            continue
        parents[pid] = int(fields[1])
        at = argv.index(b"--root") + 1
        if at >= len(argv):
            continue
        root = os.fsdecode(argv[at])
        if prefix is not None:
            real = os.path.realpath(root)
            if not any(r == prefix or r.startswith(prefix + os.sep) for r in (root, real)):
                continue
        found[pid] = root
    return {pid: root for pid, root in found.items() if parents[pid] not in found}


def stop_daemons(under: Path, timeout: float = 20.0) -> dict[int, str]:
    """Stop every cogd daemon whose root is under ``under``: SIGTERM, then SIGKILL after
    ``timeout`` seconds. Returns what was found running (pid → root); never signals a
    process that is not such a daemon (each pid is checked again right before its signal)."""
    import signal

    found = daemon_processes(under)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(daemon_processes(under)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while daemon_processes(under) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not daemon_processes(under):
            break
    return found


class Daemon:
    """A real daemon for a repository, started through the CLI, stopped on teardown."""

    def __init__(self, root: Path):
        self.root = root

    def start(self, index: bool = True) -> "Daemon":
        """``cogd start`` (the real command), then (``index``) ``cogd index`` so that the index is
        current (its code in this process, asking the daemon: :func:`cogd_in_process`)."""
        run_cogd(self.root, "start")
        if index:
            cogd_in_process(self.root, "index")
        return self

    def status(self) -> dict:
        """What ``cogd status --json`` prints, from its code in this process (tests poll it while
        they wait: a CLI process per poll took CPU from the daemon being waited for)."""
        return json.loads(cogd_in_process(self.root, "status", "--json").stdout)

    def stop(self) -> None:
        """What ``cogd stop`` does (:func:`cogd.rpc.control.stop`: SIGTERM, then wait until the
        lock is free), in this process: a teardown need not pay for a CLI's start-up (tests of
        ``cogd stop`` itself run the command). Then stop any daemon still running for this root
        (one a hook started a moment before, whose pid file could not be read yet)."""
        from cogd.paths import Layout
        from cogd.rpc import control

        try:
            control.stop(Layout(self.root))
        except Exception:  # an unsafe or missing .cogd/run: found by /proc below all the same
            pass
        finally:
            stop_daemons(self.root)


@contextlib.contextmanager
def running_daemon(root: Path, index: bool = True):
    """Context manager: a :class:`Daemon` started for ``root`` (see :meth:`Daemon.start`),
    stopped on exit even when the body or the start itself fails or times out."""
    d = Daemon(root)
    try:
        yield d.start(index=index)
    finally:
        d.stop()


@pytest.fixture
def daemon():
    """Start real daemons: ``daemon(root)`` → a started :class:`Daemon` (``index=False``
    to skip ``cogd index``). Every one is stopped at teardown, also when the test fails."""
    started: list[Daemon] = []

    def start(root: Path, index: bool = True) -> Daemon:
        d = Daemon(root)
        started.append(d)  # before the start: a start that times out still gets stopped
        return d.start(index=index)

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def daemon_factory(daemon):
    """The older name of :func:`daemon`."""
    return daemon


# ---------------------------------------------------------------- the leak guard and safety net
#
# Every daemon a test starts must be stopped by a finaliser of that test (or of the module
# fixture that started it). The guard below fails a test whose daemons outlive it, and stops
# them; at the end of the session, and again at interpreter exit, every daemon whose root is
# under this session's temporary folder is stopped, so that no daemon outlives the suite (an
# unstopped one would run until its idle exit, hours later). Daemons of other roots (a
# developer's own, another session's) are never touched.

LEAK_GRACE_S = 10.0  # a daemon told to stop may take this long to be gone
_session_tmp: list[Path] = []
_module_baseline: dict[str, set[int]] = {}


def _session_base() -> Path | None:
    return _session_tmp[0] if _session_tmp else None


def _stop_session_daemons() -> dict[int, str]:
    base = _session_base()
    return stop_daemons(base) if base is not None else {}


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin has set up its factory
def pytest_configure(config):
    import atexit
    import signal

    factory = getattr(config, "_tmp_path_factory", None)  # absent under -p no:tmpdir
    if factory is None:
        return
    _session_tmp.append(Path(factory.getbasetemp()))  # creates it: this session's folder
    atexit.register(_stop_session_daemons)
    # A SIGTERM (a CI job's timeout, scripts/stress_suite.sh interrupted) would end the
    # interpreter without atexit or finalisers: turn it into an interruption pytest handles.
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _note_interruption)


def _leaks(base: Path, within: Path | None, since: set[int]) -> dict[int, str]:
    """Daemons under ``within`` (None: anywhere under ``base``) not in ``since``, still alive
    after ``LEAK_GRACE_S``."""
    def current() -> dict[int, str]:
        return {pid: root for pid, root in daemon_processes(within or base).items() if pid not in since}

    deadline = time.monotonic() + LEAK_GRACE_S
    left = current()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = current()
    return left


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    base = _session_base()
    module = item.nodeid.split("::", 1)[0]
    if base is not None and module not in _module_baseline:
        _module_baseline.clear()  # one module at a time
        _module_baseline[module] = set(daemon_processes(base))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    result = yield
    base = _session_base()
    if base is None:
        return result
    module = item.nodeid.split("::", 1)[0]
    since = _module_baseline.get(module, set())
    leaked: dict[int, str] = {}
    if tmp is not None:  # the test's own folder is gone with the test: so must its daemons be
        leaked.update(_leaks(base, Path(tmp), since))
    if nextitem is None or nextitem.nodeid.split("::", 1)[0] != module:  # module fixtures are done
        leaked.update(_leaks(base, None, since))
    if leaked:
        for pid, root in leaked.items():
            stop_daemons(Path(root))
        listed = ", ".join(f"pid {pid} --root {root}" for pid, root in sorted(leaked.items()))
        pytest.fail(f"cogd daemons still running after the test (now stopped): {listed}", pytrace=False)
    return result


@pytest.hookimpl(trylast=True)  # after the fixtures' own teardown (an interrupted run tears down here)
def pytest_sessionfinish(session, exitstatus):
    stopped = _stop_session_daemons()
    if stopped:
        listed = ", ".join(f"pid {pid} --root {root}" for pid, root in sorted(stopped.items()))
        session.config.get_terminal_writer().line(f"cogd daemons left running at session end, stopped: {listed}",
                                                  red=True)
        if session.exitstatus == 0:
            session.exitstatus = 1
