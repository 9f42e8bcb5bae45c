"""Tool uses that no daemon took at the time, spooled by the hook, ingested by the daemon.

A PostToolUse hook that finds no daemon (none running, the connection refused,
its deadline before the request was sent) appends the request line it would
have sent to ``.cogd/run/tool-uses.spool`` (:func:`cogd.hookclient._spool`).
The daemon drains it at start and on every housekeeping tick:

1. under the same exclusive ``flock`` the hook appends with, copy the spool
   to ``tool-uses.spool.ingesting`` (fsynced) and truncate the spool, so no
   append is lost and hooks wait at most for one copy;
2. replay each line as a ``usage.tool_use`` request, then delete the copy.

A daemon that dies during step 2 finds the copy at its next start and replays
it again; lines whose ``tool_use_id`` the session already recorded are skipped,
so a replay does not record a tool use twice. Only a regular file owned by the
daemon's user is read (no symlinks), at most MAX_INGEST_BYTES per drain, and a
line that is not a ``usage.tool_use`` request is logged and dropped: a crafted
``.cogd/`` can add tool uses of its own making, nothing else.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

SPOOL_NAME = "tool-uses.spool"  # as cogd.hookclient.SPOOL_NAME
MAX_INGEST_BYTES = 16 << 20


def _open_ours(path: Path, flags: int) -> int | None:
    """A descriptor for ``path`` if it is a regular file of this user (not a symlink), else None."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("spool %s not read: %s", path, exc)
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        log.warning("spool %s is not a regular file of this user: not read", path)
        return None
    return fd


def _take(spool: Path, work: Path) -> bool:
    """Move the spool's lines to ``work`` under the hook's lock. Returns whether there were any."""
    fd = _open_ours(spool, os.O_RDWR)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.read(fd, MAX_INGEST_BYTES + 1)
        if not data:
            return False
        if len(data) > MAX_INGEST_BYTES:  # the hook caps it lower; a bigger file is not the hook's
            log.warning("spool %s is over %d bytes: only its first lines are ingested", spool, MAX_INGEST_BYTES)
            data = data[:data.rfind(b"\n", 0, MAX_INGEST_BYTES) + 1]
        out = os.open(work, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(out, data)
            os.fsync(out)
        finally:
            os.close(out)
        os.ftruncate(fd, 0)
        return True
    finally:
        os.close(fd)  # releases the lock


def ingest(run_dir: Path, service) -> int:
    """Replay the spooled tool uses into ``service`` (a :class:`cogd.daemon.service.Service`).

    Returns how many were recorded. Never raises for a bad line (it is logged
    and dropped); OSError on the spool files is logged too.
    """
    spool, work = run_dir / SPOOL_NAME, run_dir / (SPOOL_NAME + ".ingesting")
    recorded = 0
    try:
        if not work.exists() and not _take(spool, work):
            return 0
        fd = _open_ours(work, os.O_RDONLY)
        if fd is None:
            return 0
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_INGEST_BYTES + 1)
        for number, line in enumerate(data.splitlines(), 1):
            recorded += _replay(service, line, number)
        work.unlink()
    except OSError as exc:
        log.warning("spooled tool uses not ingested: %s", exc)
    if recorded:
        log.info("ingested %d spooled tool uses", recorded)
    return recorded


def _replay(service, line: bytes, number: int) -> int:
    try:
        message = json.loads(line)
        params = message["params"]
        if message.get("method") != "usage.tool_use" or not isinstance(params, dict):
            raise ValueError("not a usage.tool_use request")
        payload = params["payload"]
        tool_use_id = payload.get("tool_use_id")
        session = payload.get("session_id")
        if isinstance(tool_use_id, str) and tool_use_id and isinstance(session, str) \
                and service.ledger.has_tool_use(session, tool_use_id):
            return 0  # replayed after a crash: already recorded
        service.call("usage.tool_use", params)
        return 1
    except Exception as exc:  # one bad line must not stop the others
        log.warning("spooled line %d dropped: %s: %s", number, exc.__class__.__name__, str(exc)[:200])
        return 0
