"""Finding a repository's root and its daemon socket with nothing but ``os``.

The hook client runs this on every call; ``pathlib`` alone would add about
3 ms to its start-up (it pulls in ``urllib.parse``, ``ipaddress``, ``fnmatch``),
so these functions work on plain ``str`` paths. :mod:`cogd.paths` wraps them
with ``pathlib`` for the rest of cogd.
"""

from __future__ import annotations

import os
import stat

from cogd.safepath import UnsafePath, check_chain, read_bytes

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


RUNTIME_TMP_ENV = "COGD_RUNTIME_TMP"  # where ``cogd-<uid>`` is made instead of /tmp (tests)


class RuntimeDirError(UnsafePath):
    """No candidate runtime directory is private to this user (see :func:`runtime_choice`)."""


def runtime_candidates() -> list[str]:
    """The per-user runtime directories cogd may put hashed sockets in, best first.

    ``$XDG_RUNTIME_DIR/cogd`` when that variable is set; ``/tmp/cogd-<uid>``
    (``$COGD_RUNTIME_TMP`` replaces ``/tmp``); ``$XDG_CACHE_HOME/cogd/run``
    (default ``~/.cache/cogd/run``), which nobody else can squat.
    """
    found = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        found.append(os.path.join(xdg, "cogd"))
    found.append(os.path.join(os.environ.get(RUNTIME_TMP_ENV) or "/tmp", f"cogd-{os.getuid()}"))
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache or not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    found.append(os.path.join(cache, "cogd", "run"))
    return found


def _runtime_problem(path: str, create: bool) -> str | None:
    """Why ``path`` cannot hold this user's sockets (None when it can, or can be created)."""
    if len(os.fsencode(os.path.join(path, HASHED_SOCKET_EXAMPLE))) > AF_UNIX_PATH_MAX:
        return "is too long for a socket path"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"cannot be created ({exc.strerror})"
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you"
    if stat.S_IMODE(st.st_mode) != 0o700:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def runtime_choice(create: bool = True) -> tuple[str | None, list[tuple[str, str]]]:
    """``(directory, skipped)``: the first usable :func:`runtime_candidates` entry, and why earlier ones were not.

    A candidate is usable when it is a real directory owned by this user with
    mode 0700 (anything else — a squatter's directory or link in /tmp — is
    skipped, never trusted). ``create``: make a missing candidate (mode 0700)
    and check it; without, a missing candidate counts as usable. ``directory``
    is None when none is; ``skipped`` is ``[(path, problem)]``. Never raises.
    """
    skipped = []
    for path in runtime_candidates():
        problem = _runtime_problem(path, create)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def runtime_dir(create: bool = True) -> str:
    """The private per-user directory for hashed sockets (see :func:`runtime_choice`).

    Raises RuntimeDirError (an :class:`~cogd.safepath.UnsafePath`) naming every
    candidate and its problem when none is usable.
    """
    path, skipped = runtime_choice(create)
    if path is None:
        raise _no_runtime_dir(skipped)
    return path


def _no_runtime_dir(skipped: list[tuple[str, str]]) -> RuntimeDirError:
    return RuntimeDirError(skipped[0][0], "and the other runtime directories are unusable: "
                           + "; ".join(f"{p} {why}" for p, why in skipped),
                           f"make one of them yours with mode 0700 (e.g. mv {skipped[-1][0]} {skipped[-1][0]}.bad; "
                           f"mkdir -m 700 {skipped[-1][0]})")


def runtime_note(path: str | None, skipped: list[tuple[str, str]]) -> str:
    """One line for ``cogd status`` and doctor from a :func:`runtime_choice` answer:
    ``"<dir>"``, ``"<dir> (skipped: <path> <problem>; …)"`` or ``"no usable runtime directory (…)"``."""
    why = "; ".join(f"{p} {problem}" for p, problem in skipped)
    if path is None:
        return f"no usable runtime directory ({why})"
    return f"{path} (skipped: {why})" if skipped else path


def runtime_status() -> str:
    """:func:`runtime_note` for the directory a daemon started now would choose (nothing is created)."""
    return runtime_note(*runtime_choice(create=False))


def _hashed_name(root: str) -> str:
    import hashlib  # only on this rare path

    return hashlib.sha256(os.fsencode(root)).hexdigest()[:24] + ".sock"


HASHED_SOCKET_EXAMPLE = "0" * 24 + ".sock"


def short_socket(root: str) -> str | None:
    """``<root>/.cogd/run/cogd.sock`` when that path fits ``AF_UNIX``, else None (a deep root)."""
    short = os.path.join(root, COGD_DIR, "run", "cogd.sock")
    return short if len(os.fsencode(short)) <= AF_UNIX_PATH_MAX else None


def recorded_socket(root: str) -> str | None:
    """The hashed socket the running daemon recorded in ``.cogd/run/daemon.pid``, or None.

    Every process of the user must reach the same socket even when their
    environments (``XDG_RUNTIME_DIR``) differ, so clients read the daemon's
    choice rather than recompute it. The pid file lives in the checked
    ``.cogd/run/``; it is read without following links, only when ours, and
    its ``socket`` is used only when it is an absolute path ending in this
    root's hashed name.
    """
    run_dir = os.path.join(root, COGD_DIR, "run")
    try:
        if not check_chain(run_dir, any_mode=True):
            return None
        raw = read_bytes(os.path.join(run_dir, "daemon.pid"), 64 * 1024)
        if raw is None:
            return None
        from cogd.rpc.fastjson import loads

        info = loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    sock = info.get("socket") if isinstance(info, dict) else None
    if isinstance(sock, str) and os.path.isabs(sock) and os.path.basename(sock) == _hashed_name(root):
        return sock
    return None


def socket_path(root: str) -> str:
    """Where a client finds the daemon of ``root``: ``<root>/.cogd/run/cogd.sock`` when it fits ``AF_UNIX``.

    A deeper root's daemon binds a hashed name in a runtime directory
    (:func:`daemon_socket_path`); clients take it from the pid file
    (:func:`recorded_socket`), else from the first usable candidate (nothing
    is created). Raises RuntimeDirError for a deep root with no usable
    candidate, and :class:`~cogd.safepath.UnsafePath` when ``.cogd`` or
    ``.cogd/run`` is a symbolic link, not a directory, or another user's:
    a committed ``.cogd/run`` → another repository's run folder would
    otherwise hand this repository's prompts to that repository's daemon
    (the socket there is ours, so the socket's own checks pass).
    """
    short = short_socket(root)
    if short is not None:
        check_chain(os.path.dirname(short), any_mode=True)  # two lstat calls; a missing folder is fine
        return short
    return recorded_socket(root) or os.path.join(runtime_dir(create=False), _hashed_name(root))


def daemon_socket_path(root: str) -> tuple[str, str]:
    """``(socket, note)``: where the daemon of ``root`` binds, and the :func:`runtime_note` of that choice.

    The short socket (note ``""``), or a hashed name in the first usable
    runtime directory, created (mode 0700) when needed. Raises RuntimeDirError.
    """
    short = short_socket(root)
    if short is not None:
        return short, ""
    path, skipped = runtime_choice(create=True)
    if path is None:
        raise _no_runtime_dir(skipped)
    return os.path.join(path, _hashed_name(root)), runtime_note(path, skipped)


def cogd_file(root: str, *parts: str) -> str:
    """A path under ``<root>/.cogd/`` (for example ``cogd_file(root, "logs", "hook.log")``)."""
    return os.path.join(root, COGD_DIR, *parts)
