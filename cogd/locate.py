"""Finding a repository's root and its daemon socket with nothing but ``os``.

The hook client runs this on every call; ``pathlib`` alone would add about
3 ms to its start-up (it pulls in ``urllib.parse``, ``ipaddress``, ``fnmatch``),
so these functions work on plain ``str`` paths. :mod:`cogd.paths` wraps them
with ``pathlib`` for the rest of cogd.
"""

from __future__ import annotations

import os

COGD_DIR = ".cogd"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS) including the
# trailing NUL; stay under the smaller figure so one rule works everywhere.
AF_UNIX_PATH_MAX = 103


def find_root(start: str | os.PathLike[str]) -> str | None:
    """The repository root that contains ``start`` (a file or directory), or None.

    Walks up and returns the first directory holding a ``.cogd/`` directory or
    a ``.git`` entry (a directory, or the file a worktree or submodule uses).
    Never raises for a missing or unreadable path.
    """
    try:
        here = os.path.abspath(os.fspath(start))
    except (TypeError, ValueError):
        return None
    if not os.path.isdir(here):
        here = os.path.dirname(here)
    while True:
        try:
            if os.path.isdir(os.path.join(here, COGD_DIR)) or os.path.exists(os.path.join(here, ".git")):
                return here
        except (OSError, ValueError):
            pass
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def runtime_dir() -> str:
    """The private per-user directory for hashed sockets: ``/tmp/cogd-<uid>`` (mode 0700).

    Deliberately not ``$XDG_RUNTIME_DIR``: every process that talks to the
    daemon (a hook started by an editor, a CLI in a login shell, a cron job)
    must compute the same path, and that variable differs between them.
    Raises PermissionError when the directory belongs to another user or is
    open to others, since a socket there could be hijacked.
    """
    path = os.path.join("/tmp", f"cogd-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(path) or os.path.islink(path):
        raise PermissionError(
            f"{path} must be a directory owned by uid {os.getuid()} with mode 0700 "
            f"(fix: chmod 700 {path}, or remove it)"
        )
    return path


def socket_path(root: str) -> str:
    """``<root>/.cogd/run/cogd.sock`` when it fits ``AF_UNIX``, else a hashed name.

    The hashed name lives in :func:`runtime_dir` and derives from the root's
    absolute path, so every process computes the same one.
    """
    short = os.path.join(root, COGD_DIR, "run", "cogd.sock")
    if len(os.fsencode(short)) <= AF_UNIX_PATH_MAX:
        return short
    import hashlib  # only on this rare path

    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:24]
    return os.path.join(runtime_dir(), f"{digest}.sock")


def cogd_file(root: str, *parts: str) -> str:
    """A path under ``<root>/.cogd/`` (for example ``cogd_file(root, "logs", "hook.log")``)."""
    return os.path.join(root, COGD_DIR, *parts)
