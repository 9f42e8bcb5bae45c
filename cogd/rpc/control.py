"""Daemon lifecycle from the outside: is it running, start it, stop it.

Standard library only (the hook client starts the daemon from here).

Liveness is the lock, never a ping: the daemon holds an exclusive ``flock`` on
``.cogd/run/daemon.lock`` for its whole life, so a daemon busy in a long
reindex is still alive, and a crashed one (even ``kill -9``) releases it. To
start a daemon, the starter takes that lock itself and hands the locked file
descriptor to the child it spawns: the lock is held across the spawn, so many
hooks racing to start the daemon yield exactly one.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

from cogd import safepath
from cogd.rpc import locate
from cogd.paths import Layout


def try_lock(layout: Layout) -> int | None:
    """Take the daemon lock without waiting; return the locked fd, or None if held.

    The caller owns the fd: closing it (or exiting) releases the lock.
    Raises :class:`cogd.safepath.UnsafePath` when ``.cogd/``, ``.cogd/run`` or
    the lock is a link or not ours (nothing is created then), OSError when
    ``.cogd/run`` cannot be created.
    """
    safepath.check_chain(layout.run_dir, create=True)
    fd = safepath.open_file(layout.lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def read_pid(layout: Layout) -> dict | None:
    """The daemon's pid file (``pid``, ``started_at``, ``socket``, ``runtime``), or None.

    Read without following links (see :func:`cogd.safepath.read_bytes`); a pid
    file that is a link or not ours counts as missing.
    """
    try:
        if not safepath.check_chain(layout.run_dir, any_mode=True):
            return None
        raw = safepath.read_bytes(layout.pid_file, 64 * 1024)
        return json.loads(raw) if raw is not None else None
    except (OSError, ValueError):
        return None


def is_running(layout: Layout) -> bool:
    """True when some process holds the daemon lock.

    Raises :class:`cogd.safepath.UnsafePath` when ``.cogd/run`` or the lock is a link or not ours.
    """
    if not safepath.check_chain(layout.run_dir, any_mode=True) or not safepath.check_identity(layout.lock_file):
        return False
    fd = try_lock(layout)
    if fd is None:
        return True
    os.close(fd)
    return False


START_FAILED = "start-failed.json"  # in .cogd/run/: the last failed start (time, reason, count)
MAX_BACKOFF_S = 3600.0


def _failure_file(layout: Layout) -> str:
    return os.path.join(layout.run_dir, START_FAILED)


def start_failure(layout: Layout) -> dict | None:
    """The marker of the last failed daemon start, or None.

    ``{"at": unix s, "reason": str, "fix": str, "failures": consecutive failed
    starts, "retry_after": unix s, "pid": int}``. Written by the daemon that
    failed (:func:`record_start_failure`), removed by the next one that starts.
    """
    try:
        raw = safepath.read_bytes(_failure_file(layout), 65536)  # never through a link
        data = json.loads(raw.decode("utf-8", errors="replace")) if raw is not None else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def backoff_remaining(info: dict | None, now: float | None = None) -> float:
    """Seconds until an automatic start may be tried again after the failure ``info`` (0 = now)."""
    if not info:
        return 0.0
    retry_after = info.get("retry_after")
    if type(retry_after) not in (int, float):
        return 0.0
    remaining = float(retry_after) - (time.time() if now is None else now)
    if remaining > MAX_BACKOFF_S:  # no daemon writes that: a planted or clock-skewed marker is ignored
        return 0.0
    return max(0.0, remaining)


def record_start_failure(layout: Layout, reason: str, fix: str = "", backoff_s: float = 60.0) -> dict:
    """Write the failed-start marker (called by a daemon that could not start, lock still held).

    The back-off doubles with each consecutive failure (``backoff_s`` × 2^(n−1),
    at most MAX_BACKOFF_S), so a broken repository costs one daemon per window,
    not one per prompt. Returns the marker written.
    """
    previous = start_failure(layout) or {}
    failures = int(previous.get("failures", 0)) + 1 if isinstance(previous.get("failures"), int) else 1
    now = time.time()
    window = min(max(float(backoff_s), 0.0) * (2 ** min(max(failures - 1, 0), 20)), MAX_BACKOFF_S)
    info = {"at": now, "reason": reason[:2000], "fix": fix[:1000], "failures": failures,
            "retry_after": now + window, "pid": os.getpid()}
    safepath.write_atomic(_failure_file(layout), json.dumps(info).encode("utf-8"))  # 0600, no link followed
    return info


def clear_start_failure(layout: Layout) -> None:
    """Remove the failed-start marker (a daemon started successfully)."""
    try:
        os.unlink(_failure_file(layout))
    except FileNotFoundError:
        pass


def spawn(layout: Layout, python: str | None = None, *, force: bool = False) -> bool:
    """Start the daemon in the background unless one runs. Returns True if started.

    Does not wait for the socket: callers that need it use :func:`wait_ready`.
    The child runs in its own session with stdio on /dev/null, so it survives
    the hook or terminal that started it. Raises :class:`cogd.safepath.UnsafePath`
    when ``.cogd/`` fails its checks (:meth:`Layout.ensure`), and
    :class:`cogd.rpc.locate.RuntimeDirError` when a deep root has no private
    runtime directory for its socket, both before anything is spawned. Unless
    ``force`` (a person asked: ``cogd start``), nothing is started while the
    back-off of a failed start runs (:func:`start_failure`): automatic starters
    (hooks, the MCP server) would otherwise start one crashing daemon per prompt.
    """
    if not force and backoff_remaining(start_failure(layout)) > 0:
        return False
    layout.ensure()
    locate.socket_path(str(layout.root))  # a deep root: some runtime directory is usable
    fd = try_lock(layout)
    if fd is None:
        return False
    try:
        os.set_inheritable(fd, True)
        subprocess.Popen(
            [python or sys.executable, "-m", "cogd.daemon", "--root", str(layout.root), "--lock-fd", str(fd)],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(layout.root),
            env=daemon_environment(os.environ),
        )
    finally:
        os.close(fd)  # the child holds its own copy of the locked descriptor
    return True


MALLOC_ARENAS = "2"  # glibc malloc arenas in the daemon, unless the environment sets MALLOC_ARENA_MAX


def daemon_environment(env: "os._Environ[str] | dict[str, str]") -> dict[str, str]:
    """The daemon's environment: ``env`` with ``MALLOC_ARENA_MAX`` set to MALLOC_ARENAS unless it has one.

    glibc gives each thread that allocates concurrently an arena of its own (up to 8 per core),
    and memory freed in one is not reused by another. The daemon's native libraries (LanceDB's
    and onnxruntime's thread pools) allocate from many threads, so the resident size only grew:
    on 60,000 vectors written the way the embedding pass writes them, 426 MB at the end with
    the default arenas, 371 MB with two, at the same speed (measured on this kind of machine).
    """
    out = dict(env)
    out.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)
    return out


def wait_ready(layout: Layout, timeout: float = 30.0) -> bool:
    """Wait until the daemon answers ``status`` (True) or ``timeout`` seconds pass."""
    from cogd.rpc.client import DaemonUnavailable, RemoteError, call

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            call(layout.socket_path, "status", {}, timeout=2.0)
            return True
        except RemoteError:
            return True  # it answers (with an error, e.g. a damaged index it is about to move aside)
        except DaemonUnavailable:
            if not is_running(layout):
                time.sleep(0.05)
                if not is_running(layout):
                    return False  # the daemon died (see .cogd/logs/daemon.log)
            time.sleep(0.05)
    return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ", 1)[-1][:1] != "Z"
    except OSError:
        return True


def is_daemon_process(pid: int, layout: Layout) -> bool:
    """True when ``pid`` runs ``cogd.daemon`` for this repository (never signal anything else).

    A stale pid file (after ``kill -9``) may name a pid the system has since
    given to an unrelated process.
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"cogd.daemon" in argv and os.fsencode(str(layout.root)) in argv


START_GRACE_S = 5.0  # how long stop() waits for a starting daemon to name itself in its pid file


def _lock_holder(layout: Layout, grace: float) -> int | None:
    """The pid of the daemon holding the lock, or None when the holder is no daemon of this
    repository. A daemon takes the lock before it writes its pid file, so for its first moments
    the file is missing or still names the previous daemon (after ``kill -9``, or a hook that
    started a new one): the file is read again for up to ``grace`` seconds while the lock stays
    held. A command working without a daemon holds the lock and never writes one."""
    deadline = time.monotonic() + grace
    while True:
        info = read_pid(layout)
        pid = info.get("pid") if info else None
        if isinstance(pid, int) and is_daemon_process(pid, layout):
            return pid
        if time.monotonic() >= deadline or not is_running(layout):
            return None
        time.sleep(0.05)


def stop(layout: Layout, timeout: float = 15.0, grace: float = START_GRACE_S) -> bool:
    """Stop the running daemon: SIGTERM, then wait for the lock to be released.

    Returns True when no daemon runs afterwards, False when the lock's holder is not a daemon
    of this repository (after ``grace`` seconds for a starting daemon to write its pid file, see
    :func:`_lock_holder`). Falls back to SIGKILL after ``timeout`` seconds.
    """
    if not is_running(layout):
        return True
    pid = _lock_holder(layout, grace)
    if pid is None:
        return not is_running(layout)  # the holder finished meanwhile, or is something else
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Stopped means the lock is free *and* the process is gone (it
        # releases the lock a moment before the interpreter exits).
        if not is_running(layout) and not alive(pid):
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    time.sleep(0.2)
    return not is_running(layout)
