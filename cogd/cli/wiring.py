"""Wiring cogd into every client's configuration: which files, what goes in them, and undoing it.

One :class:`Target` per configuration file cogd writes for a client (its hooks, its MCP
server). Every write follows the same rules, whatever the client:

* **merge**: cogd's entries (recognised by their command) are replaced, everything else in
  the file is kept in order; a file that cannot be merged safely (not JSON, a ``hooks`` that is
  not an object, a TOML table cogd did not write) is left untouched with a clear error;
* **backup**: the file as it was is copied to ``.cogd/wiring/backups/`` (private, out of git) before a change;
* **idempotent**: a second install changes nothing and writes no backup;
* **explicit timeouts**: every hook entry carries the client's timeout field, in its unit;
* **undo**: ``uninstall`` removes exactly cogd's entries. The first install keeps the file's
  original bytes in ``.cogd/wiring/`` (private, under the safe-path rules), and an uninstall
  that leaves the same content as that original writes those bytes back: install, reinstall,
  uninstall leaves the file byte-identical; a file cogd created is removed with the empty
  folders it made.

``--local`` keeps the wiring out of git: Claude Code has its own private file
(``.claude/settings.local.json``); for the other clients the project file is written and named
in the clone's ``.git/info/exclude`` (refused when git already tracks that file). The client
contracts, with their sources and the versions checked, are in docs/agents.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cogd import gitsafe
from cogd import safepath
from cogd.clients import CLAUDE_CODE, CLIENTS, CLINE, CODEX, COPILOT, CURSOR, GEMINI
from cogd.errors import CogdError

MARKERS = ("cogd-hook", "cogd.hookclient")
GIT_TIMEOUT_S = 10.0
WIRING_DIR = "wiring"  # under .cogd/: the original bytes of the files cogd changed


class SettingsError(CogdError, ValueError):
    """A client's configuration file cannot be merged safely (left untouched); kind ``config``."""

    def __init__(self, message: str):
        super().__init__("config", message)


@dataclass(frozen=True)
class Target:
    """One file cogd writes for ``client``.

    ``rel``: its path from the repository root. ``kind``: ``json`` (``add``/``strip`` map the
    parsed object), ``toml-block`` (a delimited block of text, ``block`` its body) or
    ``script`` (an executable of cogd's own, ``block`` its text). ``created_empty``: for a
    JSON file cogd created, the object that counts as empty once cogd's entries are gone.
    """

    client: str
    rel: str
    kind: str
    add: Callable[[dict], dict] | None = None
    strip: Callable[[dict], dict] | None = None
    block: str = ""
    created_empty: tuple = ({},)
    what: str = "hooks"


# ---------------------------------------------------------------- the entries, client by client

def _is_cogd(handler: object) -> bool:
    """Whether a hook handler (any client's shape) runs cogd-hook."""
    if not isinstance(handler, dict):
        return False
    text = " ".join(str(handler.get(k, "")) for k in ("command", "bash"))
    return any(m in text for m in MARKERS)


def _copy(obj: dict) -> dict:
    return json.loads(json.dumps(obj))


def _grouped_strip(settings: dict) -> dict:
    """Claude Code-style ``hooks: {Event: [{matcher, hooks: [handler]}]}`` without cogd's handlers
    (a group left empty by their removal is dropped, an event left empty too)."""
    out = _copy(settings)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                handlers = [h for h in group["hooks"] if not _is_cogd(h)]
                if not handlers and group["hooks"]:
                    continue
                group = {**group, "hooks": handlers}
            kept.append(group)
        hooks[event] = kept
    return out


def _grouped_add(settings: dict, entries: dict[str, tuple[str | None, dict]]) -> dict:
    """``settings`` with one cogd group per event: ``entries`` = {event: (matcher, handler)}.

    Raises SettingsError when ``hooks`` or an event's value has the wrong type.
    """
    out = _copy(settings)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError('"hooks" is not an object')
    for event, (matcher, handler) in entries.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f'"hooks.{event}" is not a list')
        kept = [g for g in _grouped_strip({"hooks": {event: groups}})["hooks"][event]]
        entry: dict = {"hooks": [handler]}
        if matcher:
            entry = {"matcher": matcher, **entry}
        hooks[event] = [*kept, entry]
    return out


def _flat_strip(settings: dict) -> dict:
    """Cursor/Copilot-style ``hooks: {event: [handler]}`` without cogd's handlers."""
    out = _copy(settings)
    hooks = out.get("hooks")
    if isinstance(hooks, dict):
        for event, handlers in list(hooks.items()):
            if isinstance(handlers, list):
                hooks[event] = [h for h in handlers if not _is_cogd(h)]
    return out


def _flat_add(settings: dict, entries: dict[str, dict], version: int = 1) -> dict:
    out = _flat_strip(settings)
    out.setdefault("version", version)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError('"hooks" is not an object')
    for event, handler in entries.items():
        handlers = hooks.setdefault(event, [])
        if not isinstance(handlers, list):
            raise SettingsError(f'"hooks.{event}" is not a list')
        handlers.append(handler)
    return out


def _mcp_add(settings: dict, key: str, entry: dict) -> dict:
    out = _copy(settings)
    servers = out.setdefault(key, {})
    if not isinstance(servers, dict):
        raise SettingsError(f'"{key}" is not an object')
    servers["cogd"] = entry
    return out


def _mcp_strip(settings: dict, key: str, entry_is_ours: Callable[[object], bool]) -> dict:
    out = _copy(settings)
    servers = out.get(key)
    if isinstance(servers, dict) and entry_is_ours(servers.get("cogd")):
        del servers["cogd"]
    return out


def _runs_cogd(entry: object) -> bool:
    """Whether an MCP server entry is cogd's own (``cogd mcp`` or ``python -m cogd.cli mcp``)."""
    if not isinstance(entry, dict):
        return False
    words = [str(entry.get("command", "")), *[str(a) for a in entry.get("args", []) or []]]
    return "mcp" in words and any(w.endswith("cogd") or w == "cogd.cli" for w in words)


# The Claude Code tools whose uses are evidence (cogd.usage.touches parses each); the one list.
# The subagent tool is ``Agent`` in current versions and was ``Task`` before: both are matched.
CLAUDE_TOOLS = ("Read", "Edit", "MultiEdit", "Write", "NotebookEdit", "Grep", "Glob", "Bash", "Task", "Agent")
# client's event → (cogd-hook event, matcher or None, timeout in the client's unit)
CLAUDE_EVENTS: dict[str, tuple[str, str | None, int]] = {  # seconds
    "SessionStart": ("session-start", None, 10),
    "UserPromptSubmit": ("prompt-submit", None, 10),
    "PostToolUse": ("post-tool-use", "|".join(CLAUDE_TOOLS), 10),
    "PreCompact": ("pre-compact", None, 5),
    "SessionEnd": ("session-end", None, 5),
}
CODEX_EVENTS = {  # seconds
    "SessionStart": ("session-start", None, 10),
    "UserPromptSubmit": ("prompt-submit", None, 10),
    "PostToolUse": ("post-tool-use", "apply_patch|Bash", 10),
    "PreCompact": ("pre-compact", None, 5),
}
GEMINI_TOOLS = ("read_file", "read_many_files", "write_file", "replace", "glob", "grep_search",
                "search_file_content", "run_shell_command")
GEMINI_EVENTS = {  # timeouts in milliseconds
    "SessionStart": ("session-start", None, 10_000),
    "BeforeAgent": ("prompt-submit", None, 10_000),
    "AfterTool": ("post-tool-use", "|".join(GEMINI_TOOLS), 10_000),
    "PreCompress": ("pre-compact", None, 5_000),
    "SessionEnd": ("session-end", None, 5_000),
}
CURSOR_TOOLS = ("Read", "Write", "Edit", "StrReplace", "Delete", "Shell")
CURSOR_EVENTS = {  # timeouts in seconds; beforeSubmitPrompt cannot add context: not wired
    "sessionStart": ("session-start", None, 10),
    "postToolUse": ("post-tool-use", "|".join(CURSOR_TOOLS), 10),
    "afterFileEdit": ("post-tool-use", None, 10),
    "preCompact": ("pre-compact", None, 5),
    "sessionEnd": ("session-end", None, 5),
}
COPILOT_EVENTS = {  # timeoutSec; sessionStart and userPromptSubmitted outputs are not processed
    "postToolUse": ("post-tool-use", None, 10),
    "preCompact": ("pre-compact", None, 5),
    "sessionEnd": ("session-end", None, 5),
}
# Cline runs the executable named after the event; it has no per-hook timeout setting, and
# cogd-hook's own deadline ([hook] deadline_ms) bounds every run.
CLINE_HOOKS = {
    "TaskStart": "session-start", "TaskResume": "session-start", "UserPromptSubmit": "prompt-submit",
    "PostToolUse": "post-tool-use", "PreCompact": "pre-compact", "TaskComplete": "session-end",
    "TaskCancel": "session-end",
}
SCRIPT_MARK = "# cogd: written by `cogd install-hooks --client cline`; `cogd install-hooks --uninstall` removes it"
TOML_BEGIN = "# >>> cogd: written by `cogd install-hooks`; `cogd install-hooks --uninstall` removes this block"
TOML_END = "# <<< cogd"


def _command(hook: str, client: str, event: str) -> str:
    return f"{hook} {event}" if client == CLAUDE_CODE else f"{hook} --client {client} {event}"


def targets(client: str, hook: str, mcp: tuple[str, list[str]], *, local: bool = False) -> list[Target]:
    """The files cogd writes for ``client`` (a :data:`cogd.clients.CLIENTS` name).

    ``hook``: the shell-quoted cogd-hook command; ``mcp``: (command, args) of ``cogd mcp``.
    Raises ValueError for an unknown client.
    """
    mcp_cmd, mcp_args = mcp
    if client == CLAUDE_CODE:
        entries = {e: (m, {"type": "command", "command": _command(hook, client, ev), "timeout": t})
                   for e, (ev, m, t) in CLAUDE_EVENTS.items()}
        settings = Target(client, ".claude/settings.local.json" if local else ".claude/settings.json", "json",
                          lambda s: _grouped_add(s, entries), _grouped_strip)
        if local:  # .mcp.json is committed: an absolute path of this machine does not belong there
            return [settings]
        entry = {"type": "stdio", "command": mcp_cmd, "args": list(mcp_args), "env": {}}
        return [settings, Target(client, ".mcp.json", "json", lambda s: _mcp_add(s, "mcpServers", entry),
                                 lambda s: _mcp_strip(s, "mcpServers", _runs_cogd),
                                 created_empty=({}, {"mcpServers": {}}), what="MCP server")]
    if client == CODEX:
        entries = {e: (m, {"type": "command", "command": _command(hook, client, ev), "timeout": t})
                   for e, (ev, m, t) in CODEX_EVENTS.items()}
        block = (f"[mcp_servers.cogd]\ncommand = {json.dumps(mcp_cmd)}\n"
                 f"args = [{', '.join(json.dumps(a) for a in mcp_args)}]\n")
        return [Target(client, ".codex/hooks.json", "json", lambda s: _grouped_add(s, entries), _grouped_strip,
                       created_empty=({}, {"hooks": {}})),
                Target(client, ".codex/config.toml", "toml-block", block=block, what="MCP server")]
    if client == GEMINI:
        entries = {e: (m, {"type": "command", "command": _command(hook, client, ev), "name": f"cogd {ev}",
                           "timeout": t}) for e, (ev, m, t) in GEMINI_EVENTS.items()}
        entry = {"command": mcp_cmd, "args": list(mcp_args)}
        return [Target(client, ".gemini/settings.json", "json",
                       lambda s: _mcp_add(_grouped_add(s, entries), "mcpServers", entry),
                       lambda s: _mcp_strip(_grouped_strip(s), "mcpServers", _runs_cogd),
                       created_empty=({}, {"hooks": {}}, {"mcpServers": {}}, {"hooks": {}, "mcpServers": {}}),
                       what="hooks and MCP server")]
    if client == CURSOR:
        entries = {e: {"command": _command(hook, client, ev), "timeout": t, **({"matcher": m} if m else {})}
                   for e, (ev, m, t) in CURSOR_EVENTS.items()}
        entry = {"command": mcp_cmd, "args": list(mcp_args)}
        return [Target(client, ".cursor/hooks.json", "json", lambda s: _flat_add(s, entries), _flat_strip,
                       created_empty=({}, {"version": 1, "hooks": {}})),
                Target(client, ".cursor/mcp.json", "json", lambda s: _mcp_add(s, "mcpServers", entry),
                       lambda s: _mcp_strip(s, "mcpServers", _runs_cogd), created_empty=({}, {"mcpServers": {}}),
                       what="MCP server")]
    if client == COPILOT:
        entries = {e: {"type": "command", "bash": _command(hook, client, ev), "timeoutSec": t}
                   for e, (ev, _m, t) in COPILOT_EVENTS.items()}
        return [Target(client, ".github/hooks/cogd.json", "json", lambda s: _flat_add(s, entries), _flat_strip,
                       created_empty=({}, {"version": 1, "hooks": {}}))]
    if client == CLINE:
        return [Target(client, f".clinerules/hooks/{name}", "script",
                       block=f"#!/bin/sh\n{SCRIPT_MARK}\nexec {_command(hook, client, event)}\n")
                for name, event in CLINE_HOOKS.items()]
    raise ValueError(f"unknown client {client!r}; expected one of {', '.join(CLIENTS)}")


def _prune(obj: dict, like: dict | None) -> dict:
    """``obj`` without the empty lists and objects cogd's removal left that ``like`` (the
    original, None when cogd created the file) did not have."""
    out = _copy(obj)
    hooks = out.get("hooks")
    original_hooks = (like or {}).get("hooks") if isinstance((like or {}).get("hooks"), dict) else {}
    if isinstance(hooks, dict):
        for event in [e for e, v in hooks.items() if v == [] and e not in original_hooks]:
            del hooks[event]
        if not hooks and "hooks" not in (like or {}):
            del out["hooks"]
    for key in ("mcpServers",):
        if out.get(key) == {} and key not in (like or {}):
            del out[key]
    if "version" not in (like or {}) and set(out) == {"version"}:  # cogd's own file, or its version key
        del out["version"]
    return out


# ---------------------------------------------------------------- files: read, write, remember


@dataclass
class Outcome:
    """What one target's install or uninstall did: ``changed``, ``backup`` (a path or None),
    ``note`` (one line for the user, or '')."""

    target: Target
    path: Path
    changed: bool
    backup: Path | None = None
    note: str = ""


def _read(path: Path) -> tuple[str | None, int]:
    """``(text or None when absent, permission bits)``. Raises SettingsError for a non-file or non-UTF-8."""
    if path.exists() and not path.is_file():
        raise SettingsError(f"{path} exists but is not a regular file")
    if not path.exists():
        return None, 0o644
    try:
        return path.read_bytes().decode("utf-8"), path.stat().st_mode & 0o777
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path} is not UTF-8 text ({exc}); fix it or move it away, then run again") from exc


def _parse(path: Path, text: str | None) -> dict:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        if _has_comments(text):  # JSON with comments (Gemini CLI reads such files): merging would drop them
            raise SettingsError(f"{path} holds comments, which cogd cannot keep when it merges (it writes plain "
                                "JSON); remove the comments, or add cogd's entries by hand "
                                "(`cogd install-hooks --list` names the file)") from exc
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it or move it away, then run again") from exc
    if not isinstance(value, dict):
        raise SettingsError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def _without_comments(text: str) -> str:
    """``text`` with its ``//`` and ``/* */`` comments outside JSON strings blanked (a quick
    scan: the caller only chooses which message to give for a file that did not parse)."""
    out, i, in_string, n = [], 0, False, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _has_comments(text: str) -> bool:
    """Whether ``text`` is JSON once its comments are removed, and had some (JSON with comments)."""
    stripped = _without_comments(text)
    if stripped == text:
        return False
    try:
        json.loads(stripped)
    except ValueError:
        return False
    return True


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _write(path: Path, text: str, mode: int) -> None:
    """Write ``text`` atomically (temp file, fsync, rename) with permission bits ``mode``."""
    tmp = path.with_name(f".{path.name}.cogd-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _backup(root: Path, rel: str, original: str) -> Path:
    """Keep ``original`` (the file ``rel`` as it was) in ``.cogd/wiring/backups/`` before a change.

    Not beside the file: a backup next to each client file showed up in ``git status`` and was
    never cleaned up. ``.cogd/`` stays out of git (its own ``.gitignore``), and the copy is
    private (0600): settings may hold secrets in an ``env`` block.
    """
    folder = root / ".cogd" / WIRING_DIR / "backups"
    safepath.check_chain(folder, create=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = rel.replace("/", "__")
    backup, n = folder / f"{name}.{stamp}", 1
    while backup.exists():  # two changes in one second must not overwrite the older backup
        n += 1
        backup = folder / f"{name}.{stamp}-{n}"
    safepath.write_atomic(backup, original.encode("utf-8"))
    return backup


def _memo_path(root: Path, rel: str) -> Path:
    return root / ".cogd" / WIRING_DIR / (rel.replace("/", "__") + ".orig")


def _remember(root: Path, rel: str, original: str | None) -> None:
    """Keep the file's bytes from before cogd's first change (``None``: it did not exist)."""
    memo = _memo_path(root, rel)
    if memo.exists() or memo.with_suffix(".absent").exists():
        return
    safepath.check_chain(memo.parent, create=True)
    if original is None:
        safepath.write_atomic(memo.with_suffix(".absent"), b"")
    else:
        safepath.write_atomic(memo, original.encode("utf-8"))


def _recall(root: Path, rel: str) -> tuple[bool, str | None]:
    """``(known, original text or None when the file did not exist)``; forgets nothing."""
    memo = _memo_path(root, rel)
    try:
        if memo.with_suffix(".absent").exists():
            return True, None
        raw = safepath.read_bytes(memo, 16 << 20) if memo.exists() else None
    except OSError:
        return False, None
    return (raw is not None), (raw.decode("utf-8", errors="replace") if raw is not None else None)


def _forget(root: Path, rel: str) -> None:
    for memo in (_memo_path(root, rel), _memo_path(root, rel).with_suffix(".absent")):
        try:
            memo.unlink()
        except FileNotFoundError:
            pass


def _resolve(root: Path, rel: str) -> Path:
    """The file to write: ``root/rel``, through a symlink (dotfile managers) to where it points."""
    link = root / rel
    for parent in reversed(Path(rel).parents):
        here = root / parent
        if here != root and here.exists() and not here.is_dir():
            raise SettingsError(f"{here} exists but is not a directory")
    return link.resolve() if link.is_symlink() else link


# ---------------------------------------------------------------- install and uninstall


def _new_text(target: Target, path: Path, original: str | None) -> str:
    if target.kind == "json":
        return _dump(target.add(_parse(path, original)))
    if target.kind == "script":
        if original is not None and SCRIPT_MARK not in original:
            raise SettingsError(f"{path} is not cogd's (a hook of yours): left as it is")
        return target.block
    text = _toml_without(original or "")
    block = f"{TOML_BEGIN}\n{target.block}{TOML_END}\n"
    merged = (text + ("" if not text or text.endswith("\n") else "\n") + block) if text else block
    try:
        parsed = tomllib.loads(merged)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: adding cogd's MCP server would make it invalid TOML ({exc}); "
                            f"an [mcp_servers.cogd] of yours may be there already") from exc
    if "cogd" not in parsed.get("mcp_servers", {}):
        raise SettingsError(f"{path}: cogd's block did not register mcp_servers.cogd")
    return merged


def _toml_without(text: str) -> str:
    """``text`` without cogd's delimited block (and the newline cogd put before it)."""
    start = text.find(TOML_BEGIN)
    if start < 0:
        return text
    end = text.find(TOML_END, start)
    end = len(text) if end < 0 else end + len(TOML_END)
    if text[end:end + 1] == "\n":
        end += 1
    return text[:start] + text[end:]


def install(root: Path, target: Target) -> Outcome:
    """Write ``target`` under ``root``: merged, backed up, atomic, idempotent. Raises SettingsError."""
    path = _resolve(root, target.rel)
    try:
        original, mode = _read(path)
        updated = _new_text(target, path, original)
        if original is not None and (original == updated or (
                target.kind == "json" and _parse(path, original) == _parse(path, updated))):
            return Outcome(target, path, False)
        _remember(root, target.rel, original)
        made = [p for p in reversed(path.parents) if not p.exists()]
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in made:  # remembered so an uninstall removes what cogd made
            _note_made(root, folder)
        backup = _backup(root, target.rel, original) if original is not None else None
        _write(path, updated, 0o755 if target.kind == "script" else mode)
    except OSError as exc:
        raise SettingsError(f"cannot update {path}: {exc}") from exc
    return Outcome(target, path, True, backup)


def _note_made(root: Path, folder: Path) -> None:
    memo = root / ".cogd" / WIRING_DIR / "made-folders"
    safepath.check_chain(memo.parent, create=True)
    try:
        rel = folder.relative_to(root).as_posix()
    except ValueError:
        return
    raw = safepath.read_bytes(memo, 1 << 20) if memo.exists() else b""
    lines = (raw or b"").decode("utf-8", errors="replace").splitlines()
    if rel not in lines:
        safepath.write_atomic(memo, ("\n".join([*lines, rel]) + "\n").encode("utf-8"))


def _made_folders(root: Path) -> list[str]:
    memo = root / ".cogd" / WIRING_DIR / "made-folders"
    raw = safepath.read_bytes(memo, 1 << 20) if memo.exists() else None
    return (raw or b"").decode("utf-8", errors="replace").splitlines()


def uninstall(root: Path, target: Target) -> Outcome:
    """Remove cogd's entries from ``target``'s file; restore its original bytes when nothing else
    changed since, remove it when cogd created it. Raises SettingsError."""
    path = _resolve(root, target.rel)
    try:
        current, mode = _read(path)
        if current is None:
            _forget(root, target.rel)
            return Outcome(target, path, False)
        known, original = _recall(root, target.rel)
        if target.kind == "script":
            if SCRIPT_MARK not in current:
                return Outcome(target, path, False, note=f"{path} is not cogd's: left as it is")
            path.unlink()
            _forget(root, target.rel)
            _remove_made(root, path.parent)
            return Outcome(target, path, True)
        if target.kind == "json":
            stripped = target.strip(_parse(path, current))
            like = _parse(path, original) if known and original is not None else None
            stripped = _prune(stripped, like)
            if stripped == _parse(path, current):
                return Outcome(target, path, False)
            same = like is not None and stripped == like
            empty = known and original is None and stripped in target.created_empty
            text = original if same else _dump(stripped)
        else:
            text = _toml_without(current)
            if text == current:
                return Outcome(target, path, False)
            same = known and original is not None and text == original
            empty = known and original is None and not text.strip()
            text = original if same else text
        backup = _backup(root, target.rel, current)
        if empty:
            path.unlink()
            backup.unlink()  # it held only cogd's entries
            backup = None
            _remove_made(root, path.parent)
        else:
            _write(path, text, mode)
        _forget(root, target.rel)
    except OSError as exc:
        raise SettingsError(f"cannot update {path}: {exc}") from exc
    return Outcome(target, path, True, backup)


def _remove_made(root: Path, folder: Path) -> None:
    """Remove ``folder`` and its parents while empty and made by cogd."""
    made = set(_made_folders(root))
    while folder != root:
        try:
            rel = folder.relative_to(root).as_posix()
        except ValueError:
            return
        if rel not in made:
            return
        try:
            folder.rmdir()
        except OSError:  # not empty (another file of the user's, or another target)
            return
        folder = folder.parent


def holds_cogd(root: Path, target: Target) -> bool:
    """Whether ``target``'s file already holds cogd's wiring (never raises)."""
    try:
        text, _mode = _read(_resolve(root, target.rel))
    except (OSError, SettingsError):
        return False
    if text is None:
        return False
    if target.kind != "json":
        return (SCRIPT_MARK if target.kind == "script" else TOML_BEGIN) in text
    try:
        parsed = _parse(root / target.rel, text)
    except SettingsError:
        return False
    return parsed != target.strip(parsed)


# ---------------------------------------------------------------- --local: kept out of git


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(gitsafe.argv(root, *args), capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          env=gitsafe.safe_env(), stdin=subprocess.DEVNULL)


def exclude_file(root: Path) -> Path | None:
    """The clone's ``info/exclude`` (per clone, never committed), or None outside a git work tree."""
    try:
        proc = _git(root, "rev-parse", "--git-path", "info/exclude")
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    found = Path(proc.stdout.strip())
    return found if found.is_absolute() else root / found


def tracked(root: Path, rel: str) -> bool:
    """Whether git tracks ``rel`` (then ``info/exclude`` cannot keep it out of commits)."""
    try:
        return _git(root, "ls-files", "--error-unmatch", "--", rel).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


EXCLUDE_MARK = "# cogd --local wiring (cogd install-hooks --uninstall removes it):"


def exclude(root: Path, rel: str, *, add: bool) -> bool:
    """Add (or remove) ``/rel`` with cogd's comment line in the clone's ``info/exclude``. Returns
    whether the file changed."""
    path = exclude_file(root)
    if path is None:
        return False
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    entry = f"{EXCLUDE_MARK}\n/{rel}\n"
    if add:
        if entry in text:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, text + ("" if not text or text.endswith("\n") else "\n") + entry, 0o644)
        return True
    if entry not in text:
        return False
    _write(path, text.replace(entry, "", 1), 0o644)
    return True


