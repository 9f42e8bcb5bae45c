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


def touches_from_tool_use(payload: dict, root: Path) -> list[Touch]:
    """Parse one PostToolUse payload (a dict as Claude Code sends it) into touches.

    ``root`` is the repository root; paths outside it are dropped. Unknown
    tools (MCP tools included) yield []. Duplicates are removed, order kept.
    """
    tool = payload.get("tool_name")
    tool_input = _dict(payload.get("tool_input"))
    response = _dict(payload.get("tool_response"))
    cwd_raw = payload.get("cwd")
    cwd = Path(cwd_raw) if isinstance(cwd_raw, str) and cwd_raw else root
    found: list[Touch] = []

    def add(raw: object, action: str, start: int | None = None, end: int | None = None) -> None:
        rel = _relative(root, cwd, raw)
        if rel is not None:
            found.append(Touch(rel, action, start, end))

    if tool == "Read":
        info = _dict(response.get("file"))
        start = _int(info.get("startLine")) or _int(tool_input.get("offset"))
        count = _int(info.get("numLines")) or _int(tool_input.get("limit"))
        partial = tool_input.get("offset") is not None or tool_input.get("limit") is not None
        if partial and start and count:
            add(tool_input.get("file_path"), "read", start, start + count - 1)
        else:
            add(tool_input.get("file_path"), "read")
    elif tool in ("Edit", "MultiEdit", "Write"):
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
                add(path, action, start, end)
        else:
            add(path, action)
    elif tool == "NotebookEdit":
        add(tool_input.get("notebook_path"), "edit")
    elif tool == "Grep":
        base = tool_input.get("path")
        base_rel = _relative(root, cwd, base) if isinstance(base, str) else None
        base_is_file = base_rel is not None and _is_file(root / base_rel)
        for name in _list(response.get("filenames")):
            add(name, "search")
        content = response.get("content")
        if isinstance(content, str):
            for line in content.splitlines()[:2000]:
                if base_is_file:
                    match = _GREP_LINE_NO_PATH.match(line)
                    if match:
                        n = int(match.group("line"))
                        add(base, "search", n, n)
                    continue
                match = _GREP_LINE.match(line)
                if match:
                    # `count` mode prints path:count, not path:line.
                    n = int(match.group("line")) if response.get("mode") == "content" else None
                    add(match.group("path"), "search", n, n)
        if base_is_file and not found:
            add(base, "search")
    elif tool == "Glob":
        for name in _list(response.get("filenames")):
            add(name, "search")
    elif tool in ("Bash", "Task"):
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
                rel = _relative(root, cwd, token)
                if rel is not None and _is_file(root / rel):
                    found.append(Touch(rel, "mention"))
    return list(dict.fromkeys(found))
