"""Cursor's adapter (see :mod:`cogd.clients`)."""

from cogd.clients import CURSOR, Adapter, _dict, _first, _short, _str
from cogd.rpc.fastjson import quote


class Cursor(Adapter):
    """Cursor: ``.cursor/hooks.json`` events with snake_case payloads. Context only on
    ``sessionStart`` (``additional_context``); ``beforeSubmitPrompt`` cannot add context,
    so prompts are served through MCP. Tool evidence from ``postToolUse`` and ``afterFileEdit``."""

    name = CURSOR
    native = {"session-start": "sessionStart"}
    quiet = "{}"  # Cursor reads a JSON object from every hook
    project_env = "CURSOR_PROJECT_DIR"

    def cwd(self, payload: dict) -> str | None:
        return _str(payload.get("cwd")) or _first(payload.get("workspace_roots")) or super().cwd(payload)

    def session(self, payload: dict) -> object:
        return payload.get("session_id") or payload.get("conversation_id")

    def fields(self, event: str, payload: dict) -> dict:
        found = super().fields(event, payload)
        if event == "session-start":
            found["source"] = "startup"  # Cursor's sessionStart carries no source
        if event == "session-end" and not found.get("reason"):
            found["reason"] = payload.get("status")
        return found

    def tool(self, payload: dict) -> dict:
        base = {"session_id": self.session(payload), "cwd": self.cwd(payload)}
        if payload.get("hook_event_name") == "afterFileEdit":
            edits = payload.get("edits")
            kept = [{"new_string": _short(e.get("new_string"))} for e in edits[:50]
                    if isinstance(e, dict)] if isinstance(edits, list) else []
            return {**base, "tool_name": "afterFileEdit", "tool_use_id": payload.get("generation_id") or "",
                    "tool_input": {"file_path": payload.get("file_path"), "edits": kept}, "tool_response": {}}
        tool_input = _dict(payload.get("tool_input"))
        return {**base, "tool_name": payload.get("tool_name"), "tool_use_id": payload.get("tool_use_id") or "",
                "tool_input": {k: _short(v) for k, v in tool_input.items() if k not in ("contents", "content")},
                "tool_response": {}}

    def render(self, event: str, text: str) -> str:
        return f'{{"additional_context": {quote(text)}}}'


ADAPTER = Cursor()
