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
arguments as a JSON string. This package holds the shared part and Claude Code's
adapter; each other client's adapter is its own module, imported only by a hook
run for that client (a hook pays for its own client alone). tests/test_wiring.py
guards the import list.
"""

import os

from cogd.rpc.fastjson import quote

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


# client → its adapter's module in this package (imported on first use)
_MODULES = {CODEX: "codex", GEMINI: "gemini", CURSOR: "cursor", COPILOT: "copilot", CLINE: "cline"}
_LOADED: dict[str, Adapter] = {CLAUDE_CODE: ClaudeCode()}


def adapter(name: str) -> Adapter:
    """The adapter of client ``name`` (one of :data:`CLIENTS`). Raises ValueError for another name."""
    found = _LOADED.get(name)
    if found is None:
        module = _MODULES.get(name)
        if module is None:
            raise ValueError(f"unknown client {name!r}; expected one of {', '.join(CLIENTS)}")
        # __import__ rather than importlib: the hook imports nothing it does not need
        found = _LOADED[name] = __import__(f"cogd.clients.{module}", fromlist=["ADAPTER"]).ADAPTER
    return found
