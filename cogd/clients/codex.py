"""Codex CLI's adapter (see :mod:`cogd.clients`)."""

from cogd.clients import CODEX, Adapter, _short


class Codex(Adapter):
    """Codex CLI: Claude Code's payloads and answers (``turn_id`` added); tools ``Bash``,
    ``apply_patch`` (the patch in ``tool_input.command``) and ``mcp__server__tool``."""

    name = CODEX
    project_env = "CODEX_PROJECT_DIR"  # not set by Codex today: its payload always has cwd
    claude_shaped = True

    def tool(self, payload: dict) -> dict:
        slim = dict(payload)
        tool_input = payload.get("tool_input")
        if isinstance(tool_input, dict) and payload.get("tool_name") == "apply_patch":
            slim["tool_input"] = {**tool_input, "command": _short(tool_input.get("command"))}
        if isinstance(payload.get("tool_response"), str):  # a command's output: touches never read it
            slim["tool_response"] = {}
        return slim


ADAPTER = Codex()
