"""Where a repository's cogd files live (docs/architecture.md, "Records, ledger, projection"), as ``pathlib`` paths.

The path rules themselves are in :mod:`cogd.rpc.locate` (plain strings, for the
hook client's start-up time); this module gives the rest of cogd ``Path``s.
"""

from __future__ import annotations

import os
from pathlib import Path

from cogd import committed, safepath
from cogd.rpc import locate
from cogd.rpc.locate import AF_UNIX_PATH_MAX, COGD_DIR  # noqa: F401 (re-exported)

GITIGNORE_TEXT = """\
# cogd: the memory records, the config and query overrides are meant for git; the rest is rebuilt locally.
*
!.gitignore
!config.toml
!memory/
!memory/**
!queries/
!queries/**
"""

# What earlier versions of cogd wrote as .cogd/.gitignore, byte for byte. One of these is cogd's own
# and is replaced by GITIGNORE_TEXT; any other text is the user's and is never touched.
OLD_GITIGNORE_TEXTS = (
    """\
# cogd: only the memory records and the config are meant for git; the rest is rebuilt locally.
*
!.gitignore
!config.toml
!memory/
!memory/**
""",
)


def find_root(start: str | os.PathLike[str]) -> Path | None:
    """The repository root that contains ``start``, or None (see :func:`cogd.rpc.locate.find_root`)."""
    found = locate.find_root(start)
    return Path(found) if found is not None else None


def runtime_dir(create: bool = True) -> Path:
    """The private per-user socket directory (see :func:`cogd.rpc.locate.runtime_dir`)."""
    return Path(locate.runtime_dir(create))


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
        """``.cogd/run/cogd.sock``, or a hashed name in the runtime dir for deep roots."""
        return Path(locate.socket_path(str(self.root)))

    def ensure(self) -> "Layout":
        """Create ``.cogd/`` and its folders and ``.gitignore`` if missing, and make it private.

        A ``.gitignore`` that is exactly one cogd wrote before (:data:`OLD_GITIGNORE_TEXTS`) is
        brought up to :data:`GITIGNORE_TEXT`; one with any other content is the user's and is left alone.

        Walks the whole existing ``.cogd/`` first (:func:`cogd.safepath.secure_tree`):
        what is ours but too open (a fresh clone's 0755/0644) is tightened to
        0700/0600; a symbolic link, another user's entry or a special file
        anywhere in it raises :class:`cogd.safepath.UnsafePath` naming the path
        and the fix, before anything is written. So does a root every user may
        write, or runtime state that git tracks under ``.cogd/``
        (:func:`cogd.committed.refusal`). Idempotent; raises OSError when the
        repository is not writable.
        """
        safepath.secure_tree(self.cogd_dir)
        refused = committed.refusal(self.root)  # a root others may write, or runtime state committed to git
        if refused is not None:
            raise refused
        for folder in (self.cogd_dir, self.run_dir, self.logs_dir, self.index_dir):
            safepath.check_dir(folder, create=True)
        gitignore = self.cogd_dir / ".gitignore"
        if not os.path.lexists(gitignore) or _generated_before(gitignore):
            safepath.write_atomic(gitignore, GITIGNORE_TEXT.encode("utf-8"))
        return self


def _generated_before(gitignore: Path) -> bool:
    """True when ``gitignore`` (a regular file: :meth:`Layout.ensure` checked the tree) holds exactly
    a text an earlier cogd wrote. Reads at most a few hundred bytes; False when it cannot be read."""
    limit = max(len(text) for text in OLD_GITIGNORE_TEXTS) + 1
    try:
        with open(gitignore, "rb") as f:
            held = f.read(limit)
    except OSError:
        return False
    return any(held == text.encode("utf-8") for text in OLD_GITIGNORE_TEXTS)
