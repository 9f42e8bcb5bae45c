"""What a tool call touched: PostToolUse payloads → repo-relative paths and line ranges.

Claude Code's payload facts this relies on (see the shared hook-payload notes):
``file_path`` and Glob results are absolute; Grep ``filenames`` and ``content``
lines (``relpath:line:text``) are relative to ``cwd``; partial reads carry
``offset``/``limit`` and ``startLine``/``numLines``; Edit responses carry
``structuredPatch`` hunks (``newStart``/``newLines``); paths in Bash commands
and subagent summaries are free text and count only as weak mentions.

Only paths inside the work tree count: each is resolved (``..`` and symlinks,
see :func:`cogd.index.boundary.tree_relpath`) before it is kept, so a Read of
``/etc/passwd``, ``../outside.py`` or a link that leads out yields no touch and
nothing of it reaches the ledger. A path reached through a symlink inside the
tree is recorded under its real path.

Standard library only, and tolerant: any field may be missing or of the wrong
type; a malformed payload yields fewer touches, never an exception.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from cogd.index.boundary import tree_relpath

# Strength of the evidence, strongest first (cogd.usage.outcomes maps them to hit weights).
ACTIONS = ("edit", "write", "read", "search", "mention")

# A token of free text that looks like a file path: no quadratic backtracking,
# because tokens are split on whitespace and quotes first and capped in length.
_PATHISH = re.compile(r"^[\w./\\-]{1,400}\.[A-Za-z0-9]{1,8}$")
_TOKEN_SPLIT = re.compile(r"[\s'\"`(),;:=<>|&]+")
MAX_TEXT_PARTS = 20
# Line numbers are capped at 9 digits: int() of a 5,000-digit string raises.
_GREP_LINE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d{1,9})(?::|$)")
_GREP_LINE_NO_PATH = re.compile(r"^(?P<line>\d{1,9})[:-]")


@dataclass(frozen=True)
class Touch:
    """One touched file. ``start_line``/``end_line`` are 1-based inclusive, or None for the whole file."""

    path: str
    action: str
    start_line: int | None = None
    end_line: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _relative(root: Path, cwd: Path, raw: object) -> str | None:
    """``raw`` (absolute, or relative to ``cwd``) as a real POSIX path inside ``root``, or None."""
    return tree_relpath(root, raw, cwd)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _is_file(path: Path) -> bool:
    """Whether ``path`` (real: :func:`_relative` resolved it) is a regular file; a symlink is not."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):  # e.g. a name longer than the file system allows
        return False


class _Collector:
    """The touches of one payload so far, kept only when they resolve inside the work tree."""

    __slots__ = ("root", "cwd", "found")

    def __init__(self, root: Path, cwd: Path):
        self.root, self.cwd = root, cwd
        self.found: list[Touch] = []

    def add(self, raw: object, action: str, start: int | None = None, end: int | None = None) -> None:
        """Keep ``raw`` (a path as the payload wrote it) if it lies inside the tree."""
        rel = _relative(self.root, self.cwd, raw)
        if rel is not None:
            self.found.append(Touch(rel, action, start, end))


def _read(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Read: the lines it returned when it was a partial read, else the whole file."""
    info = _dict(response.get("file"))
    start = _int(info.get("startLine")) or _int(tool_input.get("offset"))
    count = _int(info.get("numLines")) or _int(tool_input.get("limit"))
    partial = tool_input.get("offset") is not None or tool_input.get("limit") is not None
    if partial and start and count:
        out.add(tool_input.get("file_path"), "read", start, start + count - 1)
    else:
        out.add(tool_input.get("file_path"), "read")


def _edit(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """An Edit/MultiEdit: one touch per patch hunk (new side); a Write, or no hunks: the whole file."""
    path = tool_input.get("file_path") or response.get("filePath")
    hunks = response.get("structuredPatch")
    ranges = []
    if isinstance(hunks, list):
        for hunk in hunks:
            hunk = _dict(hunk)
            start, lines = _int(hunk.get("newStart")), hunk.get("newLines")
            if start and isinstance(lines, int) and lines >= 0:
                ranges.append((start, start + max(lines, 1) - 1))
    action = "write" if tool == "Write" else "edit"
    if ranges and tool != "Write":
        for start, end in ranges:
            out.add(path, action, start, end)
    else:
        out.add(path, action)


def _notebook_edit(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A NotebookEdit: the whole notebook."""
    out.add(tool_input.get("notebook_path"), "edit")


def _grep(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Grep: matched file names, and matched lines in ``content`` mode.

    When the search was of one file, content lines carry no path
    (``line:text``); a search of one file that found nothing still touched it.
    """
    base = tool_input.get("path")
    base_rel = _relative(out.root, out.cwd, base) if isinstance(base, str) else None
    base_is_file = base_rel is not None and _is_file(out.root / base_rel)
    for name in _list(response.get("filenames")):
        out.add(name, "search")
    content = response.get("content")
    if isinstance(content, str):
        for line in content.splitlines()[:2000]:
            if base_is_file:
                match = _GREP_LINE_NO_PATH.match(line)
                if match:
                    n = int(match.group("line"))
                    out.add(base, "search", n, n)
                continue
            match = _GREP_LINE.match(line)
            if match:
                # `count` mode prints path:count, not path:line.
                n = int(match.group("line")) if response.get("mode") == "content" else None
                out.add(match.group("path"), "search", n, n)
    if base_is_file and not out.found:
        out.add(base, "search")


def _glob(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Glob: every file it listed."""
    for name in _list(response.get("filenames")):
        out.add(name, "search")


def _mentions(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Bash command or a subagent's Task: path-like words of its text that name existing files (weak)."""
    texts = [tool_input.get("command"), tool_input.get("prompt")]
    content = response.get("content")
    for part in (content if isinstance(content, list) else [])[:MAX_TEXT_PARTS]:
        if isinstance(part, dict):
            texts.append(part.get("text"))
    for text in texts:
        if not isinstance(text, str):
            continue
        for token in _TOKEN_SPLIT.split(text[:20_000]):
            token = token.rstrip(".!?]}")  # sentence punctuation after a path
            if len(token) > 400 or not _PATHISH.match(token):
                continue
            rel = _relative(out.root, out.cwd, token)
            if rel is not None and _is_file(out.root / rel):
                out.found.append(Touch(rel, "mention"))


# tool_name -> what its payload touched (other tools, MCP tools included, touch nothing).
_BY_TOOL = {
    "Read": _read, "Edit": _edit, "MultiEdit": _edit, "Write": _edit, "NotebookEdit": _notebook_edit,
    "Grep": _grep, "Glob": _glob, "Bash": _mentions, "Task": _mentions,
}


def touches_from_tool_use(payload: dict, root: Path) -> list[Touch]:
    """Parse one PostToolUse payload (a dict as Claude Code sends it) into touches.

    ``root`` is the repository root; paths outside it are dropped. Unknown
    tools (MCP tools included) yield []. Duplicates are removed, order kept.
    """
    tool = payload.get("tool_name")
    parse = _BY_TOOL.get(tool) if isinstance(tool, str) else None
    cwd_raw = payload.get("cwd")
    out = _Collector(root, Path(cwd_raw) if isinstance(cwd_raw, str) and cwd_raw else root)
    if parse is not None:
        parse(out, tool, _dict(payload.get("tool_input")), _dict(payload.get("tool_response")))
    return list(dict.fromkeys(out.found))
