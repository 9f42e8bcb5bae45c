"""GitHub Copilot CLI's adapter (see :mod:`cogd.clients`)."""

from cogd.clients import COPILOT, KEEP_TEXT_CHARS, Adapter, _dict, _short
from cogd.rpc.fastjson import loads


class Copilot(Adapter):
    """GitHub Copilot CLI: camelCase payloads (``sessionId``, ``toolName``, ``toolArgs``,
    ``toolResult``). Its sessionStart and userPromptSubmitted outputs are not processed, so
    no pack is made for them: context comes through MCP; tool uses and session ends are recorded."""

    name = COPILOT
    native: dict[str, str] = {}

    def session(self, payload: dict) -> object:
        return payload.get("sessionId") or payload.get("session_id")

    def tool(self, payload: dict) -> dict:
        args = payload.get("toolArgs", payload.get("tool_input"))
        if isinstance(args, str):  # "unknown" in the reference: a JSON string in practice
            try:
                args = loads(args) if len(args) <= 4 * KEEP_TEXT_CHARS else {}
            except ValueError:
                args = {}
        args = {k: _short(v) for k, v in _dict(args).items() if k not in ("file_text", "old_str")}
        return {"session_id": self.session(payload), "cwd": self.cwd(payload),
                "tool_name": payload.get("toolName") or payload.get("tool_name"), "tool_use_id": "",
                "tool_input": args, "tool_response": {}}


ADAPTER = Copilot()
