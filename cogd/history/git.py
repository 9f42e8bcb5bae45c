"""Running git on an untrusted repository, and reading ``HEAD`` without running it.

A repository's own config (``.git/config``) can name programs git runs: an external diff
(``diff.external``, ``diff.<driver>.command``), a text conversion filter
(``diff.<driver>.textconv``), an fsmonitor hook (``core.fsmonitor``), a pager, hooks. cogd
only reads history, so every command gets:

* ``-c core.fsmonitor= -c core.hooksPath=/dev/null -c diff.external= -c core.pager=cat
  -c core.quotepath=off -c log.showSignature=false`` (the command-line config wins over the
  repository's), and the diff commands ``--no-ext-diff --no-textconv --no-color``;
* an environment with no ``GIT_*`` variable of the caller, ``GIT_CONFIG_NOSYSTEM=1``,
  ``GIT_TERMINAL_PROMPT=0``, ``GIT_PAGER=cat``, ``GIT_OPTIONAL_LOCKS=0`` (a read takes no
  lock, so a running ``git commit`` is never disturbed) and ``LC_ALL=C``;
* a timeout; a streamed command is killed when its consumer stops or its deadline passes.

``git -C ROOT`` resolves the tree's own ``.git`` (a directory, or a ``gitdir:`` file of a
worktree) as git always does; cogd never points git at any other git directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from cogd import gitsafe

SAFE_CONFIG = gitsafe.SAFE_CONFIG + ("diff.renames=true",)
LINE_LIMIT = 1 << 16  # bytes of one streamed line kept (a hunk line longer than this is cut)
DIFF_SAFETY = ("--no-ext-diff", "--no-textconv", "--no-color")
_HASH = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


class GitError(RuntimeError):
    """git failed, timed out or is missing; the message says which."""


def safe_env() -> dict[str, str]:
    """The environment of every git process cogd starts (:func:`cogd.gitsafe.safe_env`)."""
    return gitsafe.safe_env()


def command(root: Path, *args: str) -> list[str]:
    """``git -C root -c … args``: the argv of one safe git command (:func:`cogd.gitsafe.argv`)."""
    return gitsafe.argv(root, "-c", "diff.renames=true", *args)


def run(root: Path, *args: str, timeout: float = 30.0, input: bytes | None = None) -> bytes:
    """Run one git command; its stdout as bytes. Raises GitError (non-zero exit, timeout, no git)."""
    try:
        proc = subprocess.run(command(root, *args), input=input, capture_output=True, timeout=timeout,
                              env=safe_env(), stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git {args[0]} timed out after {timeout:.0f} s") from exc
    except OSError as exc:
        raise GitError(f"git could not run: {exc}") from exc
    if proc.returncode != 0:
        raise GitError(f"git {args[0]} exited {proc.returncode}: {proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return proc.stdout


def stream(root: Path, *args: str, timeout: float = 600.0) -> Iterator[bytes]:
    """The stdout lines of one git command (bytes, newline kept), as they come.

    The process is killed when the consumer stops iterating (``close()`` or garbage) or after
    ``timeout`` seconds in all; then the iterator raises GitError. Stderr is discarded (a
    hostile repository could fill a pipe nobody reads)."""
    proc = subprocess.Popen(command(root, *args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=safe_env())
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    try:
        assert proc.stdout is not None
        while True:  # a line is kept to its first LINE_LIMIT bytes: one 150 MB line must not be held whole
            line = proc.stdout.readline(LINE_LIMIT)
            if not line:
                break
            if len(line) == LINE_LIMIT and not line.endswith(b"\n"):
                rest = line
                while rest and not rest.endswith(b"\n"):
                    rest = proc.stdout.readline(LINE_LIMIT)
                line += b"\n"
            yield line
        if proc.wait() != 0 and not expired.is_set():
            raise GitError(f"git {args[0]} exited {proc.returncode}")
        if expired.is_set():
            raise GitError(f"git {args[0]} timed out after {timeout:.0f} s")
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class BlobReader:
    """``git cat-file --batch``: the contents of ``REV:PATH`` objects, one long-lived process.

    ``read(spec, limit)`` returns ``(object id, bytes)``, or None for a missing object, a non-blob or one
    larger than ``limit`` bytes (its content is skipped unread). Raises GitError when the
    process died. :meth:`close` ends it."""

    def __init__(self, root: Path):
        self._proc = subprocess.Popen(command(root, "cat-file", "--batch"), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=safe_env())

    def read(self, spec: str, limit: int) -> tuple[str, bytes] | None:
        proc = self._proc
        if "\n" in spec or proc.poll() is not None:
            return None if "\n" in spec else self._dead()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(spec.encode("utf-8", "surrogateescape") + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline()
        except OSError:
            return self._dead()
        fields = header.split()
        if len(fields) != 3:  # "<spec> missing" / "ambiguous"
            if not header:
                return self._dead()
            return None
        kind, size = fields[1], int(fields[2])
        data = _read_exact(proc.stdout, size + 1)  # the content and its newline
        if kind != b"blob" or size > limit:
            return None
        return fields[0].decode("ascii", "replace"), data[:-1]

    def _dead(self):
        raise GitError("git cat-file --batch stopped")

    def close(self) -> None:
        proc = self._proc
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _read_exact(stream, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------- HEAD without a process

def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8", errors="replace")[:4096] if dot.is_file() else ""
    except OSError:
        return None
    if text.startswith("gitdir:"):
        target = Path(text[len("gitdir:"):].strip())
        return target if target.is_absolute() else (root / target)
    return None


def _packed_ref(common: Path, ref: str) -> str | None:
    try:
        with open(common / "packed-refs", "rb") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[1].decode("utf-8", "replace") == ref:
                    return parts[0].decode("ascii", "replace")
    except OSError:
        return None
    return None


def head_from_files(root: Path, read: list[Path] | None = None) -> str | None:
    """The commit ``HEAD`` names, read from the tree's own ``.git`` files (tens of µs; no process).

    Follows a ``gitdir:`` file (worktree) and its ``commondir``, a symbolic ``ref:`` to a loose
    ref or ``packed-refs``. Returns None when any step is not the plain case (then the caller
    trusts the last ``git rev-parse``); never raises. ``read``: filled with every path looked
    at (existing or not), for :class:`HeadCache`."""
    read = read if read is not None else []
    try:
        read.append(root / ".git")
        git_dir = _git_dir(root)
        if git_dir is None:
            return None
        common = git_dir
        read.append(git_dir / "commondir")
        if (git_dir / "commondir").is_file():
            common = git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()
        read.append(git_dir / "HEAD")
        text = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace")[:4096].strip()
        for _ in range(5):
            if _HASH.match(text):
                return text
            if not text.startswith("ref:"):
                return None
            ref = text[4:].strip()
            if ".." in ref or not ref.startswith("refs/"):
                return None
            loose = common / ref
            read += [loose, git_dir / ref, common / "packed-refs"]
            if not loose.is_file() and (git_dir / ref).is_file():
                loose = git_dir / ref
            text = loose.read_text(encoding="utf-8", errors="replace")[:4096].strip() if loose.is_file() else (
                _packed_ref(common, ref) or "")
        return None
    except (OSError, ValueError):
        return None


class HeadCache:
    """:func:`head_from_files` answered from a cache while none of the files it read changed
    (``lstat``: inode, size, mtime; a missing file stays missing): a few µs per request."""

    def __init__(self, root: Path):
        self.root = root
        self._key: tuple | None = None
        self._head: str | None = None

    @staticmethod
    def _signature(paths: list[Path]) -> tuple:
        out = []
        for path in paths:
            try:
                st = os.lstat(path)
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def get(self) -> str | None:
        key = self._key
        if key is not None and self._signature(key[0]) == key[1]:
            return self._head
        read: list[Path] = []
        head = head_from_files(self.root, read)
        self._key, self._head = (read, self._signature(read)), head
        return head


def is_partial_clone(root: Path) -> bool:
    """Whether the repository is a partial clone (``extensions.partialClone``, or a remote with
    ``promisor`` or ``partialclonefilter``): reading its old blobs would need a fetch, which
    :data:`cogd.gitsafe.SAFE_CONFIG` refuses."""
    try:
        found = run(root, "config", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.(promisor|partialclonefilter))$",
                    timeout=10)
    except GitError:  # exit 1: none set
        return False
    return any(line.split(b" ", 1)[-1].strip().lower() not in (b"", b"false")
               for line in found.splitlines())


def rev_parse_head(root: Path, timeout: float = 10.0) -> str | None:
    """``git rev-parse --verify HEAD`` (None outside git or before the first commit)."""
    try:
        out = run(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", timeout=timeout).decode("ascii", "replace").strip()
    except GitError:
        return None
    return out if _HASH.match(out) else None
