"""``git log -p --unified=0`` parsed into commits and their hunks (pure; no git here).

The log is asked for with one header per commit (:func:`log_format`: ``\\x1e`` and a nonce, hash,
parents, commit time, author name and e-mail, the raw message, closed by ``\\x1d`` and the nonce),
then the patch. A commit message may itself hold ``\\x1e``/``\\x1d`` bytes, so the separators
alone would let a message end its header early and forge the next commit's; the miner draws a
fresh random nonce per ``git log`` run, which no message written before it can contain, and
names the hashes it asked for, so a header for any other commit is ignored.
A hunk header ``@@ -a,b +c,d @@`` says which lines of the parent (``a`` … ``a+b-1``) were
replaced by which lines of the commit; ``b = 0`` is an insertion after line ``a``. The parser
reads exactly ``b`` removed and ``d`` added lines after each header, so a removed line that
itself starts with ``--`` cannot pass for a file header.

Bounds (a hostile repository can make any commit huge): at most :data:`MAX_FILES` files and
:data:`MAX_HUNKS` hunks are kept per commit (``truncated`` says more were seen), a message is
kept up to :data:`MAX_MESSAGE_CHARS` (the caller masks secrets *before* cutting it: a key cut in
half is no longer recognised).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

def log_format(nonce: str) -> str:
    """The ``git log --format`` of :func:`parse_log` for one run; ``nonce``: hex, drawn per run."""
    return f"%x1e{nonce}%H%x1f%P%x1f%ct%x1f%aN%x1f%aE%x1f%B%x1d{nonce}"


LOG_FORMAT = log_format("")  # without a nonce: for trusted input only (tests of the parser)
MAX_FILES = 2000
MAX_HUNKS = 20_000
MAX_MESSAGE_CHARS = 8000
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileChange:
    """One file of a commit: ``old_path`` at the parent (None: added), ``new_path`` at the commit
    (None: deleted), hunks as ``(old_start, old_count, new_start, new_count)``."""

    old_path: str | None
    new_path: str | None
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)
    binary: bool = False


@dataclass
class Commit:
    """One commit of the log: ``time`` in unix seconds (committer time), ``parents`` hashes."""

    hash: str
    parents: list[str]
    time: int
    author: str
    email: str
    message: str
    files: list[FileChange] = field(default_factory=list)
    truncated: bool = False

    @property
    def subject(self) -> str:
        return self.message.strip().split("\n", 1)[0][:200] if self.message.strip() else ""


def _path(raw: bytes, prefix: bytes) -> str | None:
    """The path of a ``--- a/x`` / ``+++ b/x`` line (None for /dev/null or a C-quoted name)."""
    raw = raw.rstrip(b"\n")
    if raw.endswith(b"\t"):  # git adds a tab after names with spaces
        raw = raw[:-1]
    if raw == b"/dev/null" or raw.startswith(b'"') or not raw.startswith(prefix):
        return None
    return raw[len(prefix):].decode("utf-8", "surrogateescape")


def _header(block: bytes) -> Commit | None:
    fields = block.split(b"\x1f", 5)
    if len(fields) != 6:
        return None
    hash_ = fields[0].decode("ascii", "replace").strip()
    if not re.fullmatch(r"[0-9a-f]{40}(?:[0-9a-f]{24})?", hash_):
        return None
    try:
        when = int(fields[2])
    except ValueError:
        when = 0
    message = fields[5].decode("utf-8", "replace")[:2 * MAX_MESSAGE_CHARS]  # cut again after masking
    return Commit(hash_, fields[1].decode("ascii", "replace").split(), when,
                  fields[3].decode("utf-8", "replace")[:200], fields[4].decode("utf-8", "replace")[:200], message)


def parse_log(lines: Iterable[bytes], nonce: str = "",  # long: one state machine over the stream
              expected: set[str] | None = None) -> Iterator[Commit]:
    """Commits of a ``git log --format=log_format(nonce) -p -U0`` stream, in stream order.

    ``lines``: the stream's lines as bytes (newline kept). A commit is yielded once its
    patch has ended (the next header or the end of the stream). ``expected``: the hashes asked
    for; a header naming any other hash, or one already yielded, is dropped with its patch."""
    start, stop = b"\x1e" + nonce.encode("ascii"), b"\x1d" + nonce.encode("ascii")
    seen: set[str] = set()

    def accept(found: Commit | None) -> Commit | None:
        if found is None or (expected is not None and found.hash not in expected) or found.hash in seen:
            return None
        seen.add(found.hash)
        return found

    commit: Commit | None = None
    header: list[bytes] | None = None
    current: FileChange | None = None
    pending_old: str | None = None
    minus = plus = 0  # body lines still to skip of the current hunk
    hunks = 0
    for line in lines:
        if header is not None:  # inside a multi-line header, until \x1d
            end = line.find(stop)
            if end < 0:
                if sum(map(len, header)) < 4 * MAX_MESSAGE_CHARS:
                    header.append(line)
                continue
            header.append(line[:end])
            commit = accept(_header(b"".join(header)))
            header, current, minus, plus, hunks = None, None, 0, 0, 0
            continue
        if minus or plus:
            if line.startswith(b"-") and minus:
                minus -= 1
                continue
            if line.startswith(b"+") and plus:
                plus -= 1
                continue
            if line.startswith(b"\\"):  # "\ No newline at end of file"
                continue
            minus = plus = 0  # a malformed hunk: resynchronise on this line
        if line.startswith(start):
            if commit is not None:
                yield commit
            commit = None
            rest = line[len(start):]
            end = rest.find(stop)
            if end >= 0:
                commit = accept(_header(rest[:end]))
                current, hunks = None, 0
            else:
                header = [rest]
            continue
        if commit is None:
            continue
        if line.startswith(b"diff --git "):
            current, pending_old = None, None
            continue
        if line.startswith(b"--- "):
            pending_old = _path(line[4:], b"a/")
            current = None
            if line[4:].rstrip(b"\n") == b"/dev/null":
                pending_old = ""
            continue
        if line.startswith(b"+++ ") and pending_old is not None:
            new = _path(line[4:], b"b/")
            old = pending_old or None
            pending_old = None
            if old is None and new is None:
                continue
            if len(commit.files) >= MAX_FILES:
                commit.truncated = True
                continue
            current = FileChange(old, new)
            commit.files.append(current)
            continue
        if line.startswith(b"Binary files "):
            commit.files.append(FileChange(None, None, binary=True)) if len(commit.files) < MAX_FILES else None
            continue
        match = _HUNK.match(line)
        if match:
            a, b, c, d = (int(g) if g is not None else 1 for g in match.groups())
            minus, plus = b, d
            if current is not None:
                hunks += 1
                if hunks > MAX_HUNKS:
                    commit.truncated = True
                else:
                    current.hunks.append((a, b, c, d))
    if commit is not None:
        yield commit
