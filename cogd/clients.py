"""The agents cogd serves, as seen by the hook: each client's payload → cogd's events, and back.

cogd has one internal event set — ``session-start`` (source), ``prompt-submit``
(text), ``post-tool-use`` (tool, input, response), ``pre-compact`` (trigger),
``session-end`` (reason) — and one :class:`Adapter` per client that reads the
client's stdin payload into those events and renders a context pack in the
client's own output form (docs/agents.md lists the contracts, the sources and
the client versions each adapter was checked against).

What an adapter produces is what the daemon already speaks: a context or
session event becomes ``{"session_id", "source" | "prompt" | "trigger" |
"reason", "client"}``, a tool use becomes a Claude Code-shaped tool payload
(``session_id``, ``cwd``, ``tool_name``, ``tool_input``, ``tool_response``,
``tool_use_id``) with ``client`` added, the tool named as the client names it:
:mod:`cogd.usage.touches` maps each client's own tool names to touches.

On the hook's hot path (cogd/hookclient.py): standard library only and nothing
that imports ``re``, ``json`` or ``enum`` — plain dictionary work, and
:mod:`cogd.rpc.fastjson` (the C scanner) for the one client that sends tool
arguments as a JSON string. tests/test_wiring.py guards the import list.
"""

import os

from cogd.rpc.fastjson import loads, quote

CLAUDE_CODE = "claude-code"
CODEX = "codex"
GEMINI = "gemini"
CURSOR = "cursor"
COPILOT = "copilot"
CLINE = "cline"
#: Every client cogd wires, in the order the installer lists them.
CLIENTS = (CLAUDE_CODE, CODEX, GEMINI, CURSOR, COPILOT, CLINE)

#: cogd-hook's events (its first argument); ``file-save`` is the editors' and has no payload.
EVENTS = ("session-start", "prompt-submit", "post-tool-use", "pre-compact", "session-end", "file-save")
CONTEXT_EVENTS = ("session-start", "prompt-submit")

# A tool input field kept whole for clients whose line ranges come from the text they wrote
# (a Codex patch, a Gemini/Copilot/Cursor replacement, a Cline diff) only up to this size; a
# bigger one is dropped and the touch covers the whole file.
KEEP_TEXT_CHARS = 64 * 1024


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _first(values: object) -> str | None:
    """The first string of a list (a client's ``workspace_roots``), or None."""
    if isinstance(values, list) and values and isinstance(values[0], str) and values[0]:
        return values[0]
    return None


def _short(value: object) -> object:
    """``value`` when it is not a string longer than KEEP_TEXT_CHARS, else None."""
    return None if isinstance(value, str) and len(value) > KEEP_TEXT_CHARS else value


def _hook_specific(native: str, text: str) -> str:
    # json.dumps({"hookSpecificOutput": {"hookEventName": native, "additionalContext": text}}), spelled out
    return f'{{"hookSpecificOutput": {{"hookEventName": {quote(native)}, "additionalContext": {quote(text)}}}}}'


class Adapter:
    """One client's side of the hook contract. Subclasses override what differs.

    ``native``: cogd event → the client's event name, for the events this
    client can carry a context pack on (others run no context call).
    ``quiet``: what to print when there is nothing to inject (None: nothing);
    printed on every exit path, failures included, for clients that want JSON.
    """

    name = CLAUDE_CODE
    native: dict[str, str] = {"session-start": "SessionStart", "prompt-submit": "UserPromptSubmit"}
    quiet: str | None = None
    project_env = "CLAUDE_PROJECT_DIR"
    #: tool payloads shaped like Claude Code's, slimmed by the hook's Claude Code rules
    claude_shaped = False

    def injects(self, event: str) -> bool:
        """Whether ``event`` can carry a pack to this client (else no pack is made or recorded)."""
        return event in self.native

    def cwd(self, payload: dict) -> str | None:
        """The directory the agent works in (the repository is found around it), or None."""
        return _str(payload.get("cwd")) or _str(os.environ.get(self.project_env, ""))

    def session(self, payload: dict) -> object:
        return payload.get("session_id")

    def fields(self, event: str, payload: dict) -> dict:
        """The internal event's params (without ``client``) for a session or context event."""
        session = self.session(payload)
        if event == "session-start":
            return {"session_id": session, "source": payload.get("source")}
        if event == "prompt-submit":
            return {"session_id": session, "prompt": payload.get("prompt")}
        if event == "pre-compact":
            return {"session_id": session, "trigger": payload.get("trigger")}
        return {"session_id": session, "reason": payload.get("reason")}

    def tool(self, payload: dict) -> dict:
        """The tool use as a Claude Code-shaped payload (unslimmed; the hook slims it)."""
        return dict(payload)

    def render(self, event: str, text: str) -> str:
        """The client's stdout for a pack of ``text`` on ``event``."""
        return _hook_specific(self.native[event], text)


class ClaudeCode(Adapter):
    """Claude Code: the reference shape (hookSpecificOutput.additionalContext)."""

    claude_shaped = True


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


# Gemini tools whose answer (llmContent) names the files they found: glob, grep (both names).
_GEMINI_LISTINGS = ("glob", "search_file_content", "grep_search")


class Gemini(Adapter):
    """Gemini CLI: snake_case payloads like Claude Code's; context on SessionStart and
    BeforeAgent as hookSpecificOutput.additionalContext; stdout must be JSON or nothing."""

    name = GEMINI
    native = {"session-start": "SessionStart", "prompt-submit": "BeforeAgent"}
    project_env = "GEMINI_PROJECT_DIR"

    def tool(self, payload: dict) -> dict:
        slim = dict(payload)
        tool_input = payload.get("tool_input")
        if isinstance(tool_input, dict):  # replace's new_string locates the edit's lines
            slim["tool_input"] = {k: _short(v) if k == "new_string" else v
                                  for k, v in tool_input.items() if k not in ("content", "old_string")}
        response = payload.get("tool_response")
        if isinstance(response, dict):  # llmContent is a file's or a command's output: kept only for searches
            listed = payload.get("tool_name") in _GEMINI_LISTINGS
            slim["tool_response"] = {k: _short(v) for k, v in response.items()
                                     if k == "error" or (listed and k == "llmContent")}
        return slim


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


ADAPTERS: dict[str, Adapter] = {a.name: a for a in (ClaudeCode(), Codex(), Gemini(), Cursor(), Copilot(), Cline())}


def adapter(name: str) -> Adapter:
    """The adapter of client ``name`` (one of :data:`CLIENTS`). Raises ValueError for another name."""
    found = ADAPTERS.get(name)
    if found is None:
        raise ValueError(f"unknown client {name!r}; expected one of {', '.join(CLIENTS)}")
    return found
