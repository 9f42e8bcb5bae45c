"""Wiring cogd's hooks into Claude Code's project settings (``.claude/settings.json``).

The merge keeps every key and every other hook already there, replaces only
cogd's own entries (recognised by their command), writes a timestamped backup
before changing anything, writes atomically, and is idempotent: a second run
with the same command changes nothing and writes no backup.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import click

from cogd.cli.base import console, layout_from
from cogd.errors import CogdError
from cogd.paths import Layout

# The Claude Code tools whose uses are evidence (cogd.usage.touches parses each); the one list.
# The subagent tool is ``Agent`` in current versions and was ``Task`` before: both are matched.
CLAUDE_TOOLS = ("Read", "Edit", "MultiEdit", "Write", "NotebookEdit", "Grep", "Glob", "Bash", "Task", "Agent")
# Claude Code event → (cogd-hook event, matcher or None, timeout in seconds)
CLAUDE_EVENTS: dict[str, tuple[str, str | None, int]] = {
    "SessionStart": ("session-start", None, 10),
    "UserPromptSubmit": ("prompt-submit", None, 10),
    "PostToolUse": ("post-tool-use", "|".join(CLAUDE_TOOLS), 10),
    "PreCompact": ("pre-compact", None, 5),
    "SessionEnd": ("session-end", None, 5),
}
_MARKERS = ("cogd-hook", "cogd.hookclient")


class SettingsError(CogdError, ValueError):
    """The existing settings file cannot be merged safely (left untouched); kind ``config``."""

    def __init__(self, message: str):
        super().__init__("config", message)


def hook_command() -> str:
    """The command prefix hooks run: the absolute ``cogd-hook`` of this installation.

    Absolute, because a ``python3`` shim (pyenv) on PATH costs ~90 ms per call
    and a hook may run where the virtual environment is not activated. The
    script is ``bin/cogd-hook``, a plain script rather than an entry-point
    wrapper (which would import ``re`` on every hook); the ``-m`` fallback pays
    ``runpy``'s imports (~3 ms) on every hook and is only for installations
    without the script.
    """
    script = Path(sys.executable).parent / "cogd-hook"
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m cogd.hookclient"


def _is_cogd(handler: object) -> bool:
    return isinstance(handler, dict) and any(m in str(handler.get("command", "")) for m in _MARKERS)


def merged_settings(existing: dict, command: str) -> dict:
    """``existing`` settings with cogd's hook entries set to run ``command EVENT``.

    Other hooks, matchers and keys are preserved in order. Raises
    SettingsError when ``hooks`` (or an event's list) has an unexpected type.
    """
    settings = json.loads(json.dumps(existing))  # deep copy
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError('"hooks" is not an object')
    for claude_event, (cogd_event, matcher, timeout) in CLAUDE_EVENTS.items():
        groups = hooks.setdefault(claude_event, [])
        if not isinstance(groups, list):
            raise SettingsError(f'"hooks.{claude_event}" is not a list')
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                handlers = [h for h in group["hooks"] if not _is_cogd(h)]
                if not handlers and any(_is_cogd(h) for h in group["hooks"]):
                    continue  # a group that held only cogd's handler
                group = {**group, "hooks": handlers}
            kept.append(group)
        entry: dict = {"hooks": [{"type": "command", "command": f"{command} {cogd_event}", "timeout": timeout}]}
        if matcher:
            entry = {"matcher": matcher, **entry}
        kept.append(entry)
        hooks[claude_event] = kept
    return settings


def install_claude_hooks(root: Path, command: str | None = None, *, local: bool = False) -> dict:
    """Merge cogd's hooks into ``root/.claude/settings.json``.

    ``local`` targets ``settings.local.json`` instead: Claude Code's private,
    uncommitted project file, the right place when teammates install cogd in
    other locations (the command is an absolute path on this machine).

    Returns ``{"path", "changed", "backup"}`` (backup is None when nothing
    changed or the file did not exist). Raises SettingsError when the existing
    file is not valid JSON or not an object — it is then left untouched.
    """
    link = root / ".claude" / ("settings.local.json" if local else "settings.json")
    try:
        if link.parent.exists() and not link.parent.is_dir():
            raise SettingsError(f"{link.parent} exists but is not a directory")
        path, existing, original, mode = _read_json_object(link)
        updated = merged_settings(existing, command or hook_command())
        if original is not None and existing == updated:
            return {"path": str(link), "changed": False, "backup": None}
        backup = _replace_with_backup(path, original, mode, updated)
    except OSError as exc:
        raise SettingsError(f"cannot update {link}: {exc}") from exc
    return {"path": str(link), "changed": True, "backup": str(backup) if backup else None}


def _read_json_object(link: Path) -> tuple[Path, dict, str | None, int]:
    """``(path, object, original text or None, permission bits)`` of a JSON settings file.

    A symlink (dotfile managers) is followed: the file is updated where it
    points. A missing or empty file gives ``{}``. Raises SettingsError when
    the file is not a regular file, not UTF-8, not JSON, or not an object.
    """
    path = link.resolve() if link.is_symlink() else link
    if path.exists() and not path.is_file():
        raise SettingsError(f"{path} exists but is not a regular file")
    if not path.exists():
        return path, {}, None, 0o644
    raw = path.read_bytes()
    mode = path.stat().st_mode & 0o777
    try:
        original = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path} is not UTF-8 text ({exc}); fix it or move it away, then run again") from exc
    try:
        existing = json.loads(original) if original.strip() else {}
    except ValueError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it or move it away, then run again") from exc
    if not isinstance(existing, dict):
        raise SettingsError(f"{path} holds a JSON {type(existing).__name__}, not an object")
    return path, existing, original, mode


def _replace_with_backup(path: Path, original: str | None, mode: int, updated: dict) -> Path | None:
    """Back up ``original`` (when there was a file) beside ``path``, then write ``updated`` atomically.

    Returns the backup's path or None. Raises OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if original is not None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.cogd-backup-{stamp}")
        n = 1
        while backup.exists():  # two changes in one second must not overwrite the older backup
            n += 1
            backup = path.with_name(f"{path.name}.cogd-backup-{stamp}-{n}")
        _write(backup, original, mode)  # as private as the original (settings may hold secrets in env)
    _write(path, json.dumps(updated, indent=2, ensure_ascii=False) + "\n", mode)
    return backup


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


# ---- MCP server registration (.mcp.json, Claude Code's project-scoped MCP servers) ----

MCP_SERVER_NAME = "cogd"


def mcp_command() -> tuple[str, list[str]]:
    """(command, args) that start ``cogd mcp``: this installation's absolute ``cogd`` script.

    Claude Code starts project MCP servers in the project directory, so no
    ``--root`` is needed (the server finds the repository around its cwd).
    """
    script = Path(sys.executable).parent / "cogd"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script), ["mcp"]
    return sys.executable, ["-m", "cogd.cli", "mcp"]


def install_mcp_server(root: Path, command: str | None = None, args: list[str] | None = None) -> dict:
    """Register ``cogd mcp`` in ``root/.mcp.json`` as ``mcpServers.cogd`` (stdio).

    Merged like the hooks: every other server and key is kept, a timestamped
    backup is written before a change, the write is atomic, and a second run
    changes nothing. Returns ``{"path", "changed", "backup"}``. Raises
    SettingsError when the file is not a JSON object (or ``mcpServers`` is not
    an object); the file is then left untouched.
    """
    if command is None:
        command, default_args = mcp_command()
        args = default_args if args is None else args
    entry = {"type": "stdio", "command": command, "args": list(args or []), "env": {}}
    link = root / ".mcp.json"
    try:
        path, existing, original, mode = _read_json_object(link)
        servers = existing.get("mcpServers", {})
        if not isinstance(servers, dict):
            raise SettingsError(f'{path}: "mcpServers" is not an object')
        if original is not None and servers.get(MCP_SERVER_NAME) == entry:
            return {"path": str(link), "changed": False, "backup": None}
        updated = {**existing, "mcpServers": {**servers, MCP_SERVER_NAME: entry}}
        backup = _replace_with_backup(path, original, mode, updated)
    except OSError as exc:
        raise SettingsError(f"cannot update {link}: {exc}") from exc
    return {"path": str(link), "changed": True, "backup": str(backup) if backup else None}


# ---- the commands' half: what `cogd up` and `cogd install-hooks` print ----

LOCAL_HELP = "Write the hooks to .claude/settings.local.json (private, not committed) instead of settings.json."


def install_hooks_for(layout: Layout, local: bool = False) -> None:
    """Install cogd's hooks (to ``settings.local.json`` when ``local``) and, unless ``local``, the
    MCP server for ``layout``'s repository, printing one line per file. Raises SettingsError."""

    def report(install, written: str, already: str, **kwargs) -> None:
        result = install(layout.root, **kwargs)
        backup = f" (backup: {result['backup']})" if result["backup"] else ""
        console.print(f"{written} {result['path']}{backup}" if result["changed"] else f"{already} {result['path']}")

    report(install_claude_hooks, "hooks written to", "hooks already in", local=local)
    if local:
        # .mcp.json is project-scoped and usually committed: an absolute path of this machine
        # does not belong there when the hooks went to the private settings file.
        command, args = mcp_command()
        console.print("MCP server not registered in .mcp.json (--local); to add it for yourself:")
        console.print(f"  claude mcp add cogd -- {' '.join([command, *args])}", markup=False, soft_wrap=True)
        return
    report(install_mcp_server, "MCP server `cogd mcp` registered in", "MCP server already in")


@click.command("install-hooks")
@click.option("--local", "local_hooks", is_flag=True, help=LOCAL_HELP)
@click.pass_context
def install_hooks_command(ctx: click.Context, local_hooks: bool) -> None:
    """Merge cogd's hooks into .claude/settings.json (backup first; idempotent)."""
    install_hooks_for(layout_from(ctx), local_hooks)
