"""What a tool call touched: PostToolUse payloads → repo-relative paths and line ranges.

Every client's tool use arrives Claude Code-shaped (:mod:`cogd.clients` maps
the payloads) with its own tool names and argument names, and ``client``
naming the agent; each client has its own table of tool parsers below. Where a
client's tool result carries no line numbers (a Codex ``apply_patch``, a
Gemini ``replace``, a Copilot ``edit``, a Cursor file edit, a Cline
``replace_in_file``), the lines are found by locating the text the tool wrote
in the file as it is now (the hook runs after the tool), the way Claude Code's
``structuredPatch`` gives them; text that cannot be found touches the whole file.

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

from cogd.index.boundary import read_tree_file, tree_relpath

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
# Locating written text: files larger than this, or snippets of more lines, touch the whole file.
LOCATE_MAX_BYTES = 4 << 20
LOCATE_MAX_LINES = 2000
MAX_LOCATED = 50  # snippets located per tool use (a patch of many hunks)


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


def _locate(out: _Collector, rel: str, snippet: object) -> tuple[int, int] | None:
    """The 1-based inclusive line range where ``snippet`` (lines of text) now stands in tree file
    ``rel``: its first occurrence, or None (not found, empty, too big, unreadable)."""
    lines = snippet if isinstance(snippet, list) else snippet.splitlines() if isinstance(snippet, str) else []
    want = [line.rstrip() for line in lines]
    while want and not want[0]:
        want.pop(0)
    while want and not want[-1]:
        want.pop()
    if not want or len(want) > LOCATE_MAX_LINES:
        return None
    try:
        raw = read_tree_file(out.root, rel, LOCATE_MAX_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(raw) > LOCATE_MAX_BYTES:
        return None
    have = [line.rstrip() for line in raw.decode("utf-8", errors="replace").splitlines()]
    n = len(want)
    for i in range(len(have) - n + 1):
        if have[i] == want[0] and have[i:i + n] == want:
            return i + 1, i + n
    return None


def _written(out: _Collector, raw: object, action: str, snippets: list) -> None:
    """A file written by a tool whose result has no line numbers: one touch per located snippet
    (``snippets``: texts as the tool wrote them), the whole file when none is located."""
    rel = _relative(out.root, out.cwd, raw)
    if rel is None:
        return
    ranges = [r for r in (_locate(out, rel, s) for s in snippets[:MAX_LOCATED]) if r is not None]
    if not ranges:
        out.found.append(Touch(rel, action))
    for start, end in ranges:
        out.found.append(Touch(rel, action, start, end))


def _patch_files(text: str) -> list[tuple[str, str, list[list[str]]]]:
    """The files of a Codex ``apply_patch`` envelope: ``(op, path, hunks)`` with op ``add``,
    ``update`` or ``delete``, each hunk the new side of one ``@@`` section (context and
    added lines, in order); a ``*** Move to:`` line renames the file being updated."""
    files: list[tuple[str, str, list[list[str]]]] = []
    heads = (("*** Add File: ", "add"), ("*** Update File: ", "update"), ("*** Delete File: ", "delete"))
    for line in text.splitlines()[:20_000]:
        op = next((kind for head, kind in heads if line.startswith(head)), None)
        if op is not None:
            files.append((op, line.split(": ", 1)[1].strip(), [[]]))
            continue
        if not files:
            continue
        op, path, hunks = files[-1]
        if line.startswith("*** Move to: "):
            files[-1] = (op, line.split(": ", 1)[1].strip(), hunks)
        elif line.startswith("*** "):  # *** End Patch, *** End of File
            continue
        elif line.startswith("@@"):
            if hunks[-1]:
                hunks.append([])
        elif line.startswith((" ", "+")) or line == "":
            hunks[-1].append(line[1:])
    return files


def _apply_patch(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Codex ``apply_patch``: added files are writes; updated ones, the lines each hunk now holds."""
    text = next((v for v in (tool_input.get("command"), tool_input.get("input"), tool_input.get("patch"))
                 if isinstance(v, str)), None)
    if text is None:
        return
    for op, path, hunks in _patch_files(text):
        if op == "add":
            out.add(path, "write")
        elif op == "delete":
            out.add(path, "edit")
        else:
            _written(out, path, "edit", [h for h in hunks if h])


def _codex_shell(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A Codex shell command (a string, or an argv list): path-like words (weak)."""
    command = tool_input.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command[:200])
    _mentions(out, tool, {"command": command}, {})


def _path_of(tool_input: dict) -> object:
    """The file a tool names, under any of the argument names the clients use."""
    for key in ("file_path", "absolute_path", "path", "target_file", "filePath"):
        if isinstance(tool_input.get(key), str):
            return tool_input[key]
    return None


def _read_range(out: _Collector, raw: object, start: object, count: object) -> None:
    """A read of ``count`` lines from line ``start`` (1-based), or of the whole file."""
    start, count = _int(start), _int(count)
    if start and count:
        out.add(raw, "read", start, start + count - 1)
    else:
        out.add(raw, "read")


def _gemini_read(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Gemini ``read_file``: ``offset`` is 0-based, ``limit`` a line count."""
    offset = tool_input.get("offset")
    start = offset + 1 if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0 else None
    if isinstance(tool_input.get("start_line"), int):
        end = _int(tool_input.get("end_line"))
        start = _int(tool_input["start_line"])
        _read_range(out, _path_of(tool_input), start, end - start + 1 if start and end and end >= start else None)
        return
    _read_range(out, _path_of(tool_input), start, tool_input.get("limit"))


def _gemini_read_many(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Gemini ``read_many_files``: its ``paths`` that name files (globs name none)."""
    for raw in _list(tool_input.get("paths"))[:200]:
        rel = _relative(out.root, out.cwd, raw)
        if rel is not None and _is_file(out.root / rel):
            out.found.append(Touch(rel, "read"))


def _write_whole(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A tool that writes a whole file (Gemini ``write_file``, Copilot ``create``, Cline ``write_to_file``)."""
    out.add(_path_of(tool_input), "write")


def _replace(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A search-and-replace edit: the lines its new text now holds (``new_string``/``new_str``)."""
    new = tool_input.get("new_string", tool_input.get("new_str"))
    _written(out, _path_of(tool_input), "edit", [new] if isinstance(new, str) and new.strip() else [])


def _gemini_glob(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Gemini ``glob``: the absolute paths its answer lists, one a line."""
    text = response.get("llmContent")
    for line in (text.splitlines()[1:2001] if isinstance(text, str) else []):
        if line.startswith("/"):
            out.add(line.strip(), "search")


def _gemini_grep(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Gemini ``search_file_content``: ``File: path`` blocks of ``L<n>: text`` lines (paths relative
    to the searched directory)."""
    text = response.get("llmContent")
    base = tool_input.get("path") if isinstance(tool_input.get("path"), str) else str(out.cwd)
    current = None
    for line in (text.splitlines()[:4000] if isinstance(text, str) else []):
        if line.startswith("File: "):
            current = os.path.join(base, line[6:].strip())
            out.add(current, "search")
        elif current is not None and line.startswith("L"):
            head = line[1:].split(":", 1)[0]
            if head.isdigit() and len(head) <= 9:
                out.add(current, "search", int(head), int(head))


def _copilot_view(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Copilot ``view``: ``view_range`` ``[start, end]`` (1-based; end -1 = to the end)."""
    span = tool_input.get("view_range")
    if isinstance(span, list) and len(span) == 2 and _int(span[0]) and _int(span[1]) and span[1] >= span[0]:
        out.add(_path_of(tool_input), "read", span[0], span[1])
    else:
        out.add(_path_of(tool_input), "read")


def _copilot_editor(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Copilot's combined ``str_replace_editor``: by its ``command``."""
    command = tool_input.get("command")
    if command == "view":
        _copilot_view(out, tool, tool_input, response)
    elif command == "create":
        _write_whole(out, tool, tool_input, response)
    elif command in ("str_replace", "insert"):
        _replace(out, tool, {**tool_input, "new_str": tool_input.get("new_str") or tool_input.get("insert_text")},
                 response)


def _cursor_file_edit(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Cursor ``afterFileEdit``: the lines each edit's ``new_string`` now holds."""
    snippets = [e.get("new_string") for e in _list(tool_input.get("edits")) if isinstance(e, dict)]
    _written(out, _path_of(tool_input), "edit", [s for s in snippets if isinstance(s, str) and s.strip()])


def _cursor_read(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Cursor ``Read``: ``offset`` (1-based) and ``limit`` when partial."""
    _read_range(out, _path_of(tool_input), tool_input.get("offset"), tool_input.get("limit"))


_CLINE_REPLACE = "======="


def _cline_replace(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """Cline ``replace_in_file``: the REPLACE side of each SEARCH/REPLACE block of its ``diff``."""
    diff = tool_input.get("diff")
    snippets: list[list[str]] = []
    side = None
    for line in (diff.splitlines()[:20_000] if isinstance(diff, str) else []):
        marker = line.strip()
        if marker.endswith("SEARCH") and marker.startswith("-"):
            side = "search"
        elif marker == _CLINE_REPLACE and side == "search":
            side = "replace"
            snippets.append([])
        elif marker.endswith("REPLACE") and marker.startswith("+"):
            side = None
        elif side == "replace":
            snippets[-1].append(line)
    _written(out, _path_of(tool_input), "edit", [s for s in snippets if any(x.strip() for x in s)])


def _generic_mentions(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A shell command of another client (``command``): path-like words (weak)."""
    _mentions(out, tool, {"command": tool_input.get("command")}, {})


def _path_read(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A whole-file read named by its path argument."""
    out.add(_path_of(tool_input), "read")


def _path_edit(out: _Collector, tool: str, tool_input: dict, response: dict) -> None:
    """A whole-file change named by its path argument (a deletion)."""
    out.add(_path_of(tool_input), "edit")


# tool_name -> what its payload touched (other tools, MCP tools included, touch nothing).
_BY_TOOL = {
    "Read": _read, "Edit": _edit, "MultiEdit": _edit, "Write": _edit, "NotebookEdit": _notebook_edit,
    "Grep": _grep, "Glob": _glob, "Bash": _mentions, "Task": _mentions, "Agent": _mentions,
}


# client (cogd.clients) -> its tool names -> parser; docs/agents.md lists the sources.
BY_CLIENT = {
    "claude-code": _BY_TOOL,
    "codex": {"apply_patch": _apply_patch, "Bash": _codex_shell, "shell": _codex_shell,
              "exec_command": _codex_shell},
    "gemini": {"read_file": _gemini_read, "read_many_files": _gemini_read_many, "write_file": _write_whole,
               "replace": _replace, "glob": _gemini_glob, "search_file_content": _gemini_grep,
               "grep_search": _gemini_grep, "run_shell_command": _generic_mentions},
    "cursor": {"afterFileEdit": _cursor_file_edit, "Read": _cursor_read, "Write": _write_whole,
               "Edit": _replace, "StrReplace": _replace, "Delete": _path_edit,
               "Shell": _generic_mentions},
    "copilot": {"view": _copilot_view, "create": _write_whole, "edit": _replace,
                "str_replace_editor": _copilot_editor, "bash": _generic_mentions},
    "cline": {"read_file": _path_read, "write_to_file": _write_whole, "replace_in_file": _cline_replace,
              "execute_command": _generic_mentions},
}


def touches_from_tool_use(payload: dict, root: Path) -> list[Touch]:
    """Parse one PostToolUse payload (a dict shaped as Claude Code sends it) into touches.

    ``payload["client"]`` picks the client's tool table (:data:`BY_CLIENT`;
    Claude Code's when absent or unknown). ``root`` is the repository root;
    paths outside it are dropped. Unknown tools (MCP tools included) yield [].
    Duplicates are removed, order kept.
    """
    tool = payload.get("tool_name")
    client = payload.get("client")
    table = BY_CLIENT.get(client, _BY_TOOL) if isinstance(client, str) else _BY_TOOL
    parse = table.get(tool) if isinstance(tool, str) else None
    cwd_raw = payload.get("cwd")
    out = _Collector(root, Path(cwd_raw) if isinstance(cwd_raw, str) and cwd_raw else root)
    if parse is not None:
        parse(out, tool, _dict(payload.get("tool_input")), _dict(payload.get("tool_response")))
    return list(dict.fromkeys(out.found))
