"""``cogd install-hooks``: wiring cogd's hooks and MCP server into every client a repository uses.

Which clients: those given (``--client NAME[,NAME]``, ``--all``), else those the repository
or the user already uses (:func:`detect`: their configuration folders), Claude Code always.
What each file receives and how it is merged, backed up, made idempotent and undone is
:mod:`cogd.cli.wiring`; this module picks the clients, guards against installing Claude
Code's hooks into both of its project files, and prints one line per file.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import click

from cogd.cli import wiring
from cogd.cli.base import console, layout_from
from cogd.cli.wiring import CLAUDE_EVENTS, CLAUDE_TOOLS, SettingsError
from cogd.clients import CLAUDE_CODE, CLIENTS, CLINE, CODEX, COPILOT, CURSOR, GEMINI
from cogd.paths import Layout

__all__ = ["CLAUDE_EVENTS", "CLAUDE_TOOLS", "SettingsError", "LOCAL_HELP", "detect", "hook_command",
           "install_claude_hooks", "install_hooks_command", "install_hooks_for", "install_mcp_server",
           "mcp_command", "merged_settings"]

NAMES = {CLAUDE_CODE: "Claude Code", CODEX: "Codex CLI", GEMINI: "Gemini CLI", CURSOR: "Cursor",
         COPILOT: "GitHub Copilot CLI", CLINE: "Cline"}


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


MCP_SERVER_NAME = "cogd"


def mcp_command() -> tuple[str, list[str]]:
    """(command, args) that start ``cogd mcp``: this installation's absolute ``cogd`` script.

    Clients start project MCP servers in the project directory, so no ``--root``
    is needed (the server finds the repository around its cwd).
    """
    script = Path(sys.executable).parent / "cogd"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script), ["mcp"]
    return sys.executable, ["-m", "cogd.cli", "mcp"]


def merged_settings(existing: dict, command: str) -> dict:
    """``existing`` Claude Code settings with cogd's hook entries set to run ``command EVENT``.

    Other hooks, matchers and keys are preserved in order. Raises SettingsError
    when ``hooks`` (or an event's list) has an unexpected type.
    """
    target = wiring.targets(CLAUDE_CODE, command, ("cogd", ["mcp"]))[0]
    return target.add(existing)


def _as_dict(outcome: wiring.Outcome, root: Path) -> dict:
    return {"path": str(root / outcome.target.rel), "changed": outcome.changed,
            "backup": str(outcome.backup) if outcome.backup else None}


def install_claude_hooks(root: Path, command: str | None = None, *, local: bool = False) -> dict:
    """Merge cogd's hooks into ``root/.claude/settings.json`` (``settings.local.json`` when ``local``).

    Returns ``{"path", "changed", "backup"}`` (backup is None when nothing
    changed or the file did not exist). Raises SettingsError when the existing
    file is not valid JSON or not an object — it is then left untouched.
    """
    target = wiring.targets(CLAUDE_CODE, command or hook_command(), mcp_command(), local=local)[0]
    return _as_dict(wiring.install(Path(root), target), Path(root))


def install_mcp_server(root: Path, command: str | None = None, args: list[str] | None = None) -> dict:
    """Register ``cogd mcp`` in ``root/.mcp.json`` as ``mcpServers.cogd`` (stdio), merged like
    the hooks. Returns ``{"path", "changed", "backup"}``. Raises SettingsError."""
    default_command, default_args = mcp_command()
    mcp = (command or default_command, list(default_args if args is None else args))
    target = wiring.targets(CLAUDE_CODE, hook_command(), mcp)[1]
    return _as_dict(wiring.install(Path(root), target), Path(root))


# ---- which clients ----

def _home() -> Path:
    return Path(os.environ.get("HOME") or os.path.expanduser("~"))


def detect(root: Path, home: Path | None = None) -> list[str]:
    """The clients the repository or the user already uses, by their configuration folders
    (Claude Code always: cogd's first client). ``home``: the user's home (default ``$HOME``)."""
    home = home or _home()
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    signs = {
        CODEX: (root / ".codex", codex_home),
        GEMINI: (root / ".gemini", home / ".gemini"),
        CURSOR: (root / ".cursor", home / ".cursor"),
        COPILOT: (root / ".github" / "hooks", home / ".copilot"),
        CLINE: (root / ".clinerules", home / "Documents" / "Cline", home / ".cline"),
    }
    return [CLAUDE_CODE, *[c for c in CLIENTS[1:] if any(p.is_dir() for p in signs[c])]]


def parse_clients(value: str) -> list[str]:
    """``NAME[,NAME]`` → client names in :data:`CLIENTS` order. Raises click.BadParameter."""
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown or not names:
        raise click.BadParameter(f"unknown client {', '.join(unknown) or repr(value)}; "
                                 f"expected one of {', '.join(CLIENTS)}", param_hint="--client")
    return [c for c in CLIENTS if c in names]


# ---- the commands' half: what `cogd up` and `cogd install-hooks` print ----

LOCAL_HELP = ("Keep the wiring out of git: Claude Code's hooks go to .claude/settings.local.json, other "
              "clients' files are listed in the clone's .git/info/exclude.")

MANUAL_MCP = {
    COPILOT: "Copilot CLI reads MCP servers from ~/.copilot/mcp-config.json; add",
    CLINE: "Cline reads MCP servers from its cline_mcp_settings.json (MCP Servers → Configure); add",
}
NOTES = {
    CODEX: "Codex runs a project's hooks and config only once the project is trusted; review them with /hooks.",
    GEMINI: "Gemini CLI uses a project's settings (its MCP servers at least) only in a trusted folder.",
    CURSOR: "Cursor cannot add context to a prompt: prompts get code through the MCP server (tool `get_context`).",
    COPILOT: "Copilot CLI does not read context from hooks: its packs come through the MCP server.",
}


def _double_claude(root: Path, local: bool) -> Path | None:
    """The other Claude Code settings file when it already holds cogd's hooks (never both)."""
    other = wiring.targets(CLAUDE_CODE, "cogd-hook", ("cogd", ["mcp"]), local=not local)[0]
    return root / other.rel if wiring.holds_cogd(root, other) else None


def plugin_enabled(root: Path, home: Path | None = None) -> Path | None:
    """The Claude Code settings file that enables the cogd plugin (``enabledPlugins`` ``cogd@…``),
    or None: its hooks and the settings' would both run (different commands are not de-duplicated)."""
    home = home or _home()
    for path in (root / ".claude" / "settings.json", root / ".claude" / "settings.local.json",
                 home / ".claude" / "settings.json"):
        try:
            enabled = json.loads(path.read_text(encoding="utf-8")).get("enabledPlugins") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(enabled, dict) and any(str(k).startswith("cogd@") and v for k, v in enabled.items()):
            return path
    return None


def _report(client: str, outcome: wiring.Outcome, removing: bool) -> None:
    label, what = NAMES[client], outcome.target.what
    backup = f" (backup: {outcome.backup})" if outcome.backup else ""
    if outcome.note:
        console.print(f"{label}: {outcome.note}", markup=False)
    elif removing:
        console.print(f"{label}: {what} removed from {outcome.path}{backup}" if outcome.changed
                      else f"{label}: no {what} of cogd's in {outcome.path}", markup=False)
    else:
        verb = "`cogd mcp` registered in" if what == "MCP server" else "written to"
        console.print(f"{label}: {what} {verb} {outcome.path}{backup}" if outcome.changed
                      else f"{label}: {what} already in {outcome.path}", markup=False)


def _wire(root: Path, client: str, local: bool, removing: bool) -> None:
    """Install (or remove) one client's files, printing one line per file. Raises SettingsError."""
    if not removing and client == CLAUDE_CODE:
        other = _double_claude(root, local)
        if other is not None:
            console.print(f"{NAMES[client]}: cogd's hooks are already in {other}; not adding them again "
                          f"(run `cogd install-hooks --uninstall{'' if local else ' --local'}` first to move them)",
                          markup=False)
            found = wiring.targets(client, hook_command(), mcp_command(), local=local)[1:]
            for target in found:
                _report(client, wiring.install(root, target), False)
            return
    if removing and client == CLAUDE_CODE:
        # An uninstall removes cogd's hooks from whichever of the two settings files holds them.
        other = _double_claude(root, local)  # the settings file of the other scope, if it holds them
        if other is not None:
            for target in wiring.targets(client, hook_command(), mcp_command(), local=not local):
                _report(client, wiring.uninstall(root, target), True)
                wiring.exclude(root, target.rel, add=False)
    found = wiring.targets(client, hook_command(), mcp_command(), local=local)
    if local and client != CLAUDE_CODE and not removing:
        held = [t.rel for t in found if wiring.tracked(root, t.rel)]
        if held:
            raise SettingsError(f"{', '.join(held)} is tracked by git: --local cannot keep cogd's wiring out of "
                                f"commits; install without --local, or untrack it first")
    scripts = [t for t in found if t.kind == "script"]
    for target in found:
        outcome = (wiring.uninstall if removing else wiring.install)(root, target)
        if removing:
            wiring.exclude(root, target.rel, add=False)  # an uninstall takes back a --local install's lines too
        elif local and not (client == CLAUDE_CODE and wiring.tracked(root, target.rel)):
            wiring.exclude(root, target.rel, add=True)  # Claude Code's private file included: nothing ignores it
        if target.kind != "script" or outcome.note:
            _report(client, outcome, removing)
    if scripts:
        changed = removing or any(wiring.holds_cogd(root, t) for t in scripts)
        verb = "removed from" if removing else "written to"
        console.print(f"{NAMES[client]}: hooks {verb if changed else 'already in'} "
                      f"{root / '.clinerules' / 'hooks'} ({', '.join(Path(t.rel).name for t in scripts)})",
                      markup=False, soft_wrap=True)
    if removing:
        return
    command, args = mcp_command()
    if client in MANUAL_MCP:
        console.print(f"{NAMES[client]}: {MANUAL_MCP[client]} "
                      f"{json.dumps({'mcpServers': {MCP_SERVER_NAME: {'command': command, 'args': args}}})}",
                      markup=False, soft_wrap=True)
    plugin = plugin_enabled(root) if client == CLAUDE_CODE else None
    if plugin is not None:
        console.print(f"Claude Code: the cogd plugin is enabled in {plugin}: its hooks and these would both run; "
                      f"keep one (disable the plugin, or `cogd install-hooks --uninstall`)", markup=False)
    if client == CLAUDE_CODE and local:
        console.print("Claude Code: MCP server not registered in .mcp.json (--local); to add it for yourself:")
        console.print(f"  claude mcp add cogd -- {' '.join([command, *args])}", markup=False, soft_wrap=True)
    if client in NOTES:
        console.print(f"{NAMES[client]}: {NOTES[client]}", markup=False)


def install_hooks_for(layout: Layout, local: bool = False, clients: list[str] | None = None,
                      uninstall: bool = False) -> list[str]:
    """Wire (or, ``uninstall``, unwire) ``clients`` (default: :func:`detect`) for ``layout``'s
    repository, printing one line per file. Returns the clients handled. Raises SettingsError
    naming every client whose file could not be merged, after wiring all the others."""
    root = Path(layout.root)
    chosen = clients or detect(root)
    failed = []
    for client in chosen:  # one client's unmergeable file does not keep the others unwired
        try:
            _wire(root, client, local, uninstall)
        except SettingsError as exc:
            failed.append(f"{NAMES[client]}: {exc.message}")
    if failed:
        raise SettingsError("; ".join(failed))
    return chosen


def list_clients(root: Path) -> None:
    """Print each client: detected or not, and the files that hold cogd's wiring."""
    found = set(detect(root))
    for client in CLIENTS:
        targets = wiring.targets(client, hook_command(), mcp_command())
        if client == CLAUDE_CODE:
            targets += wiring.targets(client, hook_command(), mcp_command(), local=True)
        held = sorted({t.rel if t.kind != "script" else ".clinerules/hooks/" for t in targets
                       if wiring.holds_cogd(root, t)})
        state = ("wired in " + ", ".join(held)) if held else "not wired"
        console.print(f"{client:12} {'detected' if client in found else '-':9} {state}", markup=False)


@click.command("install-hooks")
@click.option("--client", "client_names", metavar="NAME[,NAME]",
              help=f"Wire these clients ({', '.join(CLIENTS)}); default: the ones this repository or you use.")
@click.option("--all", "all_clients", is_flag=True, help="Wire every client cogd knows.")
@click.option("--list", "list_only", is_flag=True, help="List the clients, which are detected and where cogd is wired.")
@click.option("--local", "local_hooks", is_flag=True, help=LOCAL_HELP)
@click.option("--uninstall", is_flag=True, help="Remove cogd's wiring (the files' other content is kept).")
@click.pass_context
def install_hooks_command(ctx: click.Context, client_names: str | None, all_clients: bool, list_only: bool,
                          local_hooks: bool, uninstall: bool) -> None:
    """Wire cogd's hooks and MCP server into your agents' settings (merged, backed up, idempotent)."""
    layout = layout_from(ctx)
    if list_only:
        list_clients(Path(layout.root))
        return
    if client_names and all_clients:
        raise click.UsageError("give --client or --all, not both")
    clients = list(CLIENTS) if all_clients else parse_clients(client_names) if client_names else None
    install_hooks_for(layout, local_hooks, clients, uninstall)
