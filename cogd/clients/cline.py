"""Cline's adapter (see :mod:`cogd.clients`)."""

import os

from cogd.clients import CLINE, Adapter, _dict, _first, _short, _str
from cogd.rpc.fastjson import quote


class Cline(Adapter):
    """Cline: one executable per hook in ``.clinerules/hooks/``; camelCase payloads with the
    event's data under its own key (``postToolUse: {toolName, parameters, ...}``); every hook
    answers ``{"cancel": false}`` and adds context as ``contextModification``."""

    name = CLINE
    native = {"session-start": "TaskStart", "prompt-submit": "UserPromptSubmit"}
    quiet = '{"cancel": false}'

    def cwd(self, payload: dict) -> str | None:
        return _first(payload.get("workspaceRoots")) or _str(os.getcwd())

    def session(self, payload: dict) -> object:
        return payload.get("taskId")

    def _data(self, payload: dict) -> dict:
        name = payload.get("hookName")
        return _dict(payload.get(name[:1].lower() + name[1:])) if isinstance(name, str) and name else {}

    def fields(self, event: str, payload: dict) -> dict:
        session, data, hook = self.session(payload), self._data(payload), payload.get("hookName")
        if event == "session-start":
            return {"session_id": session, "source": "resume" if hook == "TaskResume" else "startup"}
        if event == "prompt-submit":
            return {"session_id": session, "prompt": data.get("prompt")}
        if event == "pre-compact":
            return {"session_id": session, "trigger": "auto"}
        return {"session_id": session, "reason": "cancel" if hook == "TaskCancel" else "complete"}

    def tool(self, payload: dict) -> dict:
        data = self._data(payload)
        params = {k: _short(v) for k, v in _dict(data.get("parameters")).items() if k != "content"}
        return {"session_id": self.session(payload), "cwd": self.cwd(payload), "tool_name": data.get("toolName"),
                "tool_use_id": "", "tool_input": params, "tool_response": {}}

    def render(self, event: str, text: str) -> str:
        return f'{{"cancel": false, "contextModification": {quote(text)}}}'


ADAPTER = Cline()
