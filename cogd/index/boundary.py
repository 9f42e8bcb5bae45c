"""The work tree boundary: nothing cogd reads about code comes from outside the working tree.

A repository is untrusted input. A committed symlink such as
``notes.py -> ~/.ssh/id_rsa`` or ``evil.py -> /etc/passwd`` must never get its
target read, stored in the index, returned by a method or put into a pack
(that is, sent to a model provider). The rules, applied by every reader of a
repository file (the indexer, pack excerpts, ``go.mod`` for import resolution,
ignore files, ``cogd doctor``'s drift check):

* The boundary is the repository root cogd serves (the directory holding
  ``.git`` or ``.cogd/``), taken by its real path. ``.git/`` and ``.cogd/``
  are inside it but are not work tree content: a link into them counts as
  leading outside.
* A file is read only when its real path lies inside the boundary and it is a
  regular file. A symlink whose target lies inside is read at the target; one
  that leads outside is refused (:class:`OutsideTree`), which the indexer
  records as the skip reason ``symlink_outside``.
* The check is made when the file is opened, not only when the tree was
  listed: :func:`open_tree_file` opens the root directory and then each path
  component relative to its parent with ``O_NOFOLLOW`` (``openat``), so a
  directory or file swapped for a symlink after the check is refused by the
  kernel rather than followed.

Paths named by tool payloads and save events are mapped into the tree by
:func:`tree_relpath`, which resolves symlinks and ``..`` first and drops
anything that ends up outside.

Standard library only (the ledger's touch parser uses it).
"""

from __future__ import annotations

import errno
import os
import stat

SYMLINK_OUTSIDE = "symlink_outside"  # the skip reason counted for links that leave the tree
PRIVATE_DIRS = (".git", ".cogd")  # inside the root, but never work tree content
READ_CHUNK = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class OutsideTree(OSError):
    """A repository path whose real location is outside the work tree (or in ``.git/``/``.cogd/``).

    An OSError, so a caller that treats an unreadable file as absent does the
    same here without a new ``except`` clause. ``rel`` is the path asked for.
    """

    def __init__(self, rel: str, why: str):
        super().__init__(errno.EXDEV, why, rel)
        self.rel = rel


def real_root(root: str | os.PathLike[str]) -> str:
    """The real (symlink-free, absolute) path of the repository root ``root``."""
    return os.path.realpath(os.fspath(root))


def inside(root_real: str, real: str) -> str | None:
    """``real`` (an absolute real path) relative to ``root_real`` as a POSIX path, or None when outside.

    The root itself gives None too: it is a directory, never a file cogd reads.
    """
    prefix = root_real if root_real.endswith(os.sep) else root_real + os.sep
    if not real.startswith(prefix) or real == prefix:
        return None
    return real[len(prefix):].replace(os.sep, "/")


def _lexical(rel: str) -> str:
    """``rel`` normalised; raises OutsideTree for an absolute path or a ``..`` that leaves the root."""
    if not rel or "\0" in rel or os.path.isabs(rel):
        raise OutsideTree(rel, "not a path relative to the repository root")
    norm = os.path.normpath(rel).replace(os.sep, "/")
    if norm in (".", "..") or norm.startswith("../"):
        raise OutsideTree(rel, "leaves the repository root")
    return norm


def _private(rel: str) -> bool:
    return rel.split("/", 1)[0] in PRIVATE_DIRS


def resolve_tree_path(root: str | os.PathLike[str], rel: str, *, root_real: str | None = None) -> str:
    """The real root-relative POSIX path that repository path ``rel`` stands for.

    Follows symlinks (in any component) as long as they stay inside the work
    tree. Raises OutsideTree when ``rel`` is absolute, escapes with ``..``, or
    resolves outside the root or into ``.git/``/``.cogd/`` (unless ``rel``
    itself names a path there). The target need not exist.
    """
    norm = _lexical(rel)
    base = root_real or real_root(root)
    real = os.path.realpath(os.path.join(base, norm))
    found = inside(base, real)
    if found is None or (_private(found) and not _private(norm)):
        raise OutsideTree(rel, "a symlink leads out of the work tree")
    return found


def open_tree_file(root: str | os.PathLike[str], rel: str, *, follow_inside: bool = True,
                   root_real: str | None = None) -> int:
    """Open repository file ``rel`` read-only, never leaving the work tree; returns a file descriptor.

    ``rel``: root-relative. ``follow_inside``: a symlink (in any component)
    whose target stays inside the tree is followed to that target; with False
    any symlink is refused (as git does for ``.gitignore``). The target is
    then opened component by component from a descriptor of the root, each
    with ``O_NOFOLLOW``, so a path changed into a symlink after it was
    resolved is refused, not followed. Opens without blocking (a FIFO cannot
    hang the caller). The caller closes the descriptor.

    Raises OutsideTree for a path that leads (or was swapped to lead) out of
    the tree or is a symlink where none is allowed, and OSError when it is
    missing or not a regular file (``errno.EINVAL``).
    """
    base = root_real or real_root(root)
    target = resolve_tree_path(root, rel, root_real=base) if follow_inside else _lexical(rel)
    parts = target.split("/")
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, rel, dir_fd, part) from exc
            os.close(dir_fd)
            dir_fd = next_fd
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(exc, rel, dir_fd, parts[-1]) from exc
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", rel)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refusal(exc: OSError, rel: str, dir_fd: int, name: str) -> OSError:
    """The error to raise when opening ``name`` under ``dir_fd`` failed with ``exc``.

    ``O_NOFOLLOW`` reports a symlink as ELOOP (a file) or ENOTDIR (with
    ``O_DIRECTORY``); either way the path is a symlink that was not there, or
    not allowed, when it was resolved: OutsideTree. Anything else stands.
    """
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                return OutsideTree(rel, "a symlink where the work tree had none (changed while being read)")
        except OSError:
            pass
    return exc


def read_tree_file(root: str | os.PathLike[str], rel: str, limit: int, *, follow_inside: bool = True,
                   root_real: str | None = None) -> bytes:
    """Up to ``limit`` bytes of repository file ``rel``, opened by :func:`open_tree_file`.

    Raises what :func:`open_tree_file` raises, and OSError when reading fails.
    """
    fd = open_tree_file(root, rel, follow_inside=follow_inside, root_real=root_real)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from open descriptor ``fd``, read in chunks of READ_CHUNK bytes.

    Stops at end of file; does not close ``fd``. Raises OSError when a read fails.
    """
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(READ_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def exists_in_tree(root: str | os.PathLike[str], rel: str) -> bool:
    """Whether repository path ``rel`` names something inside the work tree (a stat only, never a read).

    False for a path that escapes the root or a symlink leading out, as if
    it did not exist. Never raises.
    """
    try:
        base = real_root(root)
        return os.path.lexists(os.path.join(base, resolve_tree_path(root, rel, root_real=base)))
    except (OSError, ValueError):
        return False


def tree_relpath(root: str | os.PathLike[str], raw: object, cwd: str | os.PathLike[str] | None = None, *,
                 root_real: str | None = None) -> str | None:
    """A path named by a tool payload or a save event, as a real root-relative POSIX path; None when outside.

    ``raw``: absolute, or relative to ``cwd`` (default: the root). Symlinks and
    ``..`` are resolved first, so ``../outside.py``, ``/etc/passwd`` and a
    link (file or directory) that leads out all give None, as do the root
    itself and anything that is not a string of at most 4,096 characters.
    The path need not exist (a file being written). ``root_real``: the
    root's real path when the caller has it already. Never raises.
    """
    if not isinstance(raw, str) or not raw or "\0" in raw or len(raw) > 4096:
        return None
    try:
        base = root_real or real_root(root)
        start = os.fspath(cwd) if cwd is not None else base
        # Resolved, not just normalised: a link from elsewhere into the root (a cwd like
        # ~/proj -> /work/proj) counts as inside, a link out of it as outside.
        return inside(base, os.path.realpath(os.path.join(start, raw)))
    except (OSError, ValueError):
        return None
