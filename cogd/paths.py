"""Where a repository's cogd files live (DESIGN.md §1, §2).

Standard library only: the hook client imports this module on every call.
"""

from __future__ import annotations

import os
from pathlib import Path

COGD_DIR = ".cogd"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS) including the
# trailing NUL; stay under the smaller figure so one rule works everywhere.
AF_UNIX_PATH_MAX = 103

GITIGNORE_TEXT = """\
# cogd: only the canonical memory and the config are meant for git (DESIGN.md §1).
*
!.gitignore
!config.toml
!memory/
!memory/**
"""


def find_root(start: str | os.PathLike[str]) -> Path | None:
    """Return the repository root that contains ``start``, or None.

    Walks up from ``start`` (a file or directory path) and returns the first
    directory holding a ``.cogd/`` directory or a ``.git`` entry (a directory,
    or the file a worktree or submodule uses). Never raises for a missing or
    unreadable path; returns None outside any repository.
    """
    try:
        here = Path(os.path.abspath(os.fspath(start)))
    except (TypeError, ValueError):
        return None
    if not here.is_dir():
        here = here.parent
    for candidate in (here, *here.parents):
        try:
            if (candidate / COGD_DIR).is_dir() or (candidate / ".git").exists():
                return candidate
        except OSError:
            continue
    return None


def runtime_dir() -> Path:
    """Return the private per-user directory for hashed sockets (mode 0700).

    ``$XDG_RUNTIME_DIR/cogd`` when that variable is set, else
    ``/tmp/cogd-<uid>``. Created on first use; raises PermissionError when the
    directory exists but belongs to another user or is open to others, since a
    socket there could be hijacked.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "cogd" if base else Path("/tmp") / f"cogd-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} must be owned by uid {os.getuid()} with mode 0700")
    return path


class Layout:
    """Every path cogd uses for one repository, derived from its root.

    A plain class rather than a dataclass: importing ``dataclasses`` costs the
    hook client about 5 ms per call.
    """

    __slots__ = ("root",)

    def __init__(self, root: Path):
        self.root = Path(root)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Layout({str(self.root)!r})"

    @property
    def cogd_dir(self) -> Path:
        return self.root / COGD_DIR

    @property
    def run_dir(self) -> Path:
        return self.cogd_dir / "run"

    @property
    def logs_dir(self) -> Path:
        return self.cogd_dir / "logs"

    @property
    def index_dir(self) -> Path:
        return self.cogd_dir / "index"

    @property
    def index_db(self) -> Path:
        return self.index_dir / "index.db"

    @property
    def state_db(self) -> Path:
        return self.cogd_dir / "state.db"

    @property
    def config_file(self) -> Path:
        return self.cogd_dir / "config.toml"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "daemon.lock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "daemon.pid"

    @property
    def daemon_log(self) -> Path:
        return self.logs_dir / "daemon.log"

    @property
    def hook_log(self) -> Path:
        return self.logs_dir / "hook.log"

    @property
    def socket_path(self) -> Path:
        """``.cogd/run/cogd.sock`` when it fits ``AF_UNIX``, else a hashed name.

        The hashed name lives in :func:`runtime_dir` and is derived from the
        root's absolute path, so every process computes the same one.
        """
        short = self.run_dir / "cogd.sock"
        if len(os.fsencode(str(short))) <= AF_UNIX_PATH_MAX:
            return short
        import hashlib  # only on this rare path: keeps the hook's import cost low

        digest = hashlib.sha256(os.fsencode(str(self.root))).hexdigest()[:24]
        return runtime_dir() / f"{digest}.sock"

    def ensure(self) -> "Layout":
        """Create ``.cogd/`` and its folders and ``.gitignore`` if missing.

        Idempotent; raises OSError when the repository is not writable.
        """
        for folder in (self.cogd_dir, self.run_dir, self.logs_dir, self.index_dir):
            folder.mkdir(parents=True, exist_ok=True)
        gitignore = self.cogd_dir / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text(GITIGNORE_TEXT, encoding="utf-8")
        return self
