"""The safe-path layer: every read and write under ``.cogd/`` goes through here.

A repository is untrusted input, and so is its ``.cogd/``: it can be committed
with symbolic links (``.cogd/run`` → a directory another user owns, ``hook.log``
→ ``~/.bashrc``), and a fresh clone leaves it world-readable (0755/0644). The
rules, the same for the daemon, the CLI, the hook and ``cogd doctor``:

- ``.cogd/`` and every directory in it is a real directory (never a symbolic
  link) owned by the current user, mode 0700;
- every file in it is a regular file (or the daemon's socket) owned by the
  current user and readable by nobody else (mode 0600, the execute bit aside);
- files are opened with ``O_NOFOLLOW`` and checked with ``fstat`` after opening,
  so a link planted between a check and an open is refused too.

Something of ours that is only too open (a fresh clone) is tightened in place
(``tighten=True``); anything else — a link, another user's file, a fifo — is
refused with :class:`UnsafePath`, whose message names the path, the problem and
a fix the user can carry out.

Standard library only: ``os`` and ``stat`` (both already loaded when the
interpreter starts) and :mod:`cogd.errors` (standard library itself): the hook
client imports this module on its hot path.
Paths are plain ``str`` (or ``os.PathLike``) for the same reason.
"""

import os
import stat

from cogd.errors import CogdError

COGD_DIR = ".cogd"
DIR_MODE = 0o700
FILE_MODE = 0o600
_OPEN_TO_OTHERS = 0o077
_SEP_COGD = os.sep + COGD_DIR


class UnsafePath(CogdError, PermissionError):
    """A path under ``.cogd/`` that cogd refuses to use; kind ``unsafe_path``.

    ``path``: the offending path (str); ``problem``: what is wrong with it
    ("is a symbolic link to /x"); ``fix``: what the user can run or do.
    A PermissionError too, so code that handles OS errors refuses it as one.
    """

    def __init__(self, path: str, problem: str, fix: str):
        super().__init__("unsafe_path", f"refusing {path}: it {problem}", fix, path=path)
        self.path = path
        self.problem = problem
        self.args = (f"{path} {problem}; fix: {fix}",)  # str(): the path first, as in a log line

    def line(self) -> str:
        """One line for a terminal: :meth:`refusal`."""
        return self.refusal()

    def refusal(self) -> str:
        """The sentence a command prints when it refuses: ``refusing PATH: it PROBLEM; fix: FIX``."""
        return f"refusing {self.path}: it {self.problem}; fix: {self.fix}"


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _refusal(path: str, st: os.stat_result, want_dir: bool) -> UnsafePath | None:
    """Why ``st`` (an ``lstat`` of ``path``) may not be used, ignoring its mode; None when it may."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return UnsafePath(path, f"is a symbolic link (to {_link_target(path)})",
                          f"remove the symlink: rm {path} (cogd recreates a private one)")
    if want_dir and not stat.S_ISDIR(mode):
        return UnsafePath(path, "is not a directory", f"move it away: mv {path} {path}.bak")
    if not want_dir and not (stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return UnsafePath(path, "is not a regular file", f"move it away: mv {path} {path}.bak")
    if st.st_uid != os.getuid():
        return UnsafePath(path, f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})",
                          f"move it away: mv {path} {path}.not-mine (cogd recreates its own)")
    return None


def _too_open(path: str, st: os.stat_result, is_dir: bool, tighten: bool) -> None:
    """Tighten (or refuse) a file or directory of ours that others can read or enter."""
    mode = stat.S_IMODE(st.st_mode)
    if not mode & _OPEN_TO_OTHERS and (not is_dir or mode & DIR_MODE == DIR_MODE):
        return
    wanted = DIR_MODE if is_dir else mode & 0o700 | FILE_MODE
    if not tighten:
        why = ("other users can read it" if mode & 0o044 else "other users can use it" if mode & _OPEN_TO_OTHERS
               else "you cannot write to it")
        raise UnsafePath(path, f"has mode {mode:04o}: {why}", f"chmod {wanted:o} {path}")
    # Safe by path: the lstat just said it is ours and not a link, and its parent is
    # checked first (ours, not writable by others), so nobody else can swap it meanwhile.
    os.chmod(path, wanted)


def check_dir(path: "str | os.PathLike[str]", *, create: bool = False, tighten: bool = True,
              any_mode: bool = False) -> bool:
    """Check that ``path`` is a real directory of ours with mode 0700.

    ``create``: make a missing directory (mode 0700; its parent must exist).
    ``tighten``: chmod 0700 a directory of ours that is more open, instead of refusing it;
    ``any_mode``: neither (a reader that must change nothing, such as ``cogd status``).
    Returns True when the directory exists afterwards, False when it is missing
    (and not created). Raises :class:`UnsafePath` for a link, a non-directory,
    another user's directory, or (without ``tighten``) a too-open one; OSError
    when it cannot be created.
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            pass  # a concurrent creator: check what is there now
        st = os.lstat(path)
    refusal = _refusal(path, st, want_dir=True)
    if refusal is not None:
        raise refusal
    if not any_mode:
        _too_open(path, st, True, tighten)
    return True


def cogd_dir_of(path: "str | os.PathLike[str]") -> str | None:
    """The ``.cogd`` directory that ``path`` lies in (or is), or None when it lies in none."""
    path = os.fspath(path)
    at = path.rfind(_SEP_COGD + os.sep)
    if at < 0:
        return path if path.endswith(_SEP_COGD) else None
    return path[:at + len(_SEP_COGD)]


def check_chain(path: "str | os.PathLike[str]", *, create: bool = False, tighten: bool = True,
                any_mode: bool = False) -> bool:
    """:func:`check_dir` on every directory from the ``.cogd`` above ``path`` down to ``path``.

    A path outside any ``.cogd/`` (a test's scratch folder, say) is not
    cogd's to police: it is only created when missing. ``create`` makes missing
    directories on the way (mode 0700); without it, returns False at the first
    missing one. The repository root above ``.cogd`` is the user's own checkout
    and is not checked. Raises :class:`UnsafePath` (see :func:`check_dir`).
    """
    path = os.fspath(path).rstrip(os.sep) or os.sep
    top = cogd_dir_of(path)
    if top is None:
        if create:
            os.makedirs(path, DIR_MODE, exist_ok=True)
        return os.path.isdir(path)
    if not check_dir(top, create=create, tighten=tighten, any_mode=any_mode):
        return False
    here = top
    for part in path[len(top):].split(os.sep):
        if not part:
            continue
        here = here + os.sep + part
        if not check_dir(here, create=create, tighten=tighten, any_mode=any_mode):
            return False
    return True


def check_file(path: "str | os.PathLike[str]", *, tighten: bool = True) -> bool:
    """Check that ``path``, if it exists, is a regular file (or socket) of ours that others cannot read.

    Returns False when it does not exist, True when it does and passes.
    ``tighten``: chmod a file of ours that others can read (0644 → 0600).
    Raises :class:`UnsafePath`.
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    refusal = _refusal(path, st, want_dir=False)
    if refusal is not None:
        raise refusal
    _too_open(path, st, False, tighten)
    return True


def check_identity(path: "str | os.PathLike[str]", *, want_dir: bool = False) -> bool:
    """Check only that ``path``, if it exists, is no link and is ours (a real directory / file); not its mode.

    For a reader that must change nothing (``cogd doctor`` before it opens a
    database read-only). Returns whether it exists. Raises :class:`UnsafePath`.
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    refusal = _refusal(path, st, want_dir=want_dir)
    if refusal is not None:
        raise refusal
    return True


def open_file(path: "str | os.PathLike[str]", flags: int, mode: int = FILE_MODE, *, tighten: bool = True,
              any_mode: bool = False) -> int:
    """``os.open`` that never follows a symbolic link and only returns a regular file of ours.

    ``flags``: ``os.O_*`` flags (``O_NOFOLLOW`` and ``O_CLOEXEC`` are added);
    ``mode``: for a created file (0600). A file of ours that others can read is
    tightened to 0600 (``tighten``) or refused; ``any_mode`` leaves its mode
    alone (a reader that must not change anything). The parent directory is not
    checked here: use :func:`check_chain` first. Returns the descriptor.
    Raises :class:`UnsafePath` for a link or another user's file, OSError otherwise.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symbolic link
            raise UnsafePath(path, f"is a symbolic link (to {_link_target(path)})",
                             f"remove the symlink: rm {path}") from None
        raise
    try:
        st = os.fstat(fd)
        refusal = _refusal(path, st, want_dir=False) if stat.S_ISREG(st.st_mode) else UnsafePath(
            path, "is not a regular file", f"move it away: mv {path} {path}.bak")
        if refusal is not None:
            raise refusal
        if stat.S_IMODE(st.st_mode) & _OPEN_TO_OTHERS and not any_mode:
            if not tighten:
                raise UnsafePath(path, f"has mode {stat.S_IMODE(st.st_mode):04o}: other users can read it",
                                 f"chmod 600 {path}")
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700 | FILE_MODE)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: "str | os.PathLike[str]", limit: int = 1 << 20) -> bytes | None:
    """At most ``limit`` bytes of the file at ``path`` (opened as :func:`open_file` does), or None if missing.

    Its mode is left alone (tightening is :func:`secure_tree`'s job). Raises
    :class:`UnsafePath` for a link or another user's file, OSError otherwise.
    """
    try:
        fd = open_file(path, os.O_RDONLY, any_mode=True)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomic(path: "str | os.PathLike[str]", data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` (mode 0600) through a temporary file and a rename.

    The rename replaces whatever name is there (a link included) without
    following it. The parent directory is not checked: use :func:`check_chain`.
    Raises :class:`UnsafePath` or OSError.
    """
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)  # a leftover (or a planted link) of that name: unlink never follows
    except FileNotFoundError:
        pass
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def prepare_db(path: "str | os.PathLike[str]", *, create: bool = True) -> bool:
    """Make a SQLite database's files safe to open: call before ``sqlite3.connect(path)``.

    SQLite follows symbolic links for the database and its ``-wal``, ``-shm``
    and ``-journal`` files, so each is checked with ``lstat`` (see
    :func:`check_file`), and the directories from ``.cogd`` down to its folder
    with :func:`check_chain`. ``create``: make missing folders and an empty
    database file with mode 0600 (SQLite gives the side files the database
    file's mode), for a writer; a reader passes False and only has links and
    other users' files refused (modes are left alone: the reader changes
    nothing). Returns True when the database file exists afterwards. Raises :class:`UnsafePath`.
    """
    path = os.fspath(path)
    if not create:  # a reader changes nothing: links and other owners are refused, modes left alone
        if not check_chain(os.path.dirname(path) or ".", any_mode=True):
            return False
        for suffix in SQLITE_SIDE_FILES:
            check_identity(path + suffix)
        return check_identity(path)
    if not check_chain(os.path.dirname(path) or ".", create=create):
        return False
    for suffix in SQLITE_SIDE_FILES:
        check_file(path + suffix)
    if check_file(path):
        return True
    try:
        os.close(open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        check_file(path)
    return True


def audit(cogd_dir: "str | os.PathLike[str]", *, tighten: bool) -> list[UnsafePath]:
    """Every problem in the tree under ``cogd_dir`` (``.cogd/`` itself included), walking without following links.

    ``tighten``: fix what is only too open (chmod 700 / 600) rather than
    report it; the rest is reported, never changed. Links are reported and not
    entered; directories that fail are not entered, except one of ours that is
    only too open (its contents are reported too). Returns the problems (empty
    when all is well, or when ``cogd_dir`` does not exist).
    """
    cogd_dir = os.fspath(cogd_dir)
    problems: list[UnsafePath] = []
    try:
        if not check_dir(cogd_dir, any_mode=True):
            return problems
        check_dir(cogd_dir, tighten=tighten)
    except UnsafePath as exc:
        problems.append(exc)
        if not exc.problem.startswith("has mode"):
            return problems  # a link or not ours: never entered
    stack = [cogd_dir]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            problems.append(UnsafePath(folder, f"cannot be listed ({exc.strerror})",
                                       f"check its permissions: ls -ld {folder}"))
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                is_dir = stat.S_ISDIR(st.st_mode)
                refusal = _refusal(entry.path, st, want_dir=is_dir)
                if refusal is not None:
                    problems.append(refusal)
                    continue
                _too_open(entry.path, st, is_dir, tighten)
            except UnsafePath as exc:
                problems.append(exc)
                if not (is_dir and exc.problem.startswith("has mode")):
                    continue
                # A folder of ours that is only too open (a fresh clone's 0755) is entered:
                # what lies inside has its own problems, each named.
            except FileNotFoundError:
                continue  # removed meanwhile (a daemon's temporary file)
            if is_dir:
                stack.append(entry.path)
    return problems


def secure_tree(cogd_dir: "str | os.PathLike[str]") -> None:
    """Tighten ``.cogd/`` (see :func:`audit`) and raise the first problem left, as :class:`UnsafePath`.

    What a process that is about to write there (the daemon at start, a CLI
    command that opens the stores) runs first. The whole tree is walked: a
    fresh clone's 0644 memory files and 0755 folders become 0600 and 0700.
    """
    problems = audit(cogd_dir, tighten=True)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        first = problems[0]
        raise UnsafePath(first.path, first.problem, f"{first.fix}; and {len(problems) - 1} more under "
                         f"{os.fspath(cogd_dir)}: `cogd doctor` lists them")
