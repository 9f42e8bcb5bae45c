"""cogd's one error type: a stable kind, a message for a person, and a fix they can carry out.

Standard library only and at the bottom of the import graph, so every layer (and the hook)
may raise it. The kinds are the protocol's: the daemon maps a :class:`CogdError` to a
JSON-RPC error object once (``Service.call``), with ``code = CODES[kind]`` and
``data = {"kind": kind, "fix": fix, **data}``; the CLI maps one to a one-line message once,
at its edge. Clients match on ``kind``, never on the message.
"""

from __future__ import annotations

# kind -> JSON-RPC error code. -32001 … -32099 is the range JSON-RPC 2.0 leaves to
# implementations ("Server error", https://www.jsonrpc.org/specification#error_object).
CODES: dict[str, int] = {
    "bad_request": -32001,
    "not_found": -32002,
    "illegal_transition": -32003,
    "tombstoned": -32004,
    "secret_detected": -32005,
    "duplicate": -32006,
    "busy": -32007,
    "shutting_down": -32008,
    "unsafe_path": -32009,
    "store_refused": -32010,
    "config": -32011,
    "unavailable": -32012,
    "internal": -32603,  # JSON-RPC's own "Internal error"
}


class CogdError(Exception):
    """A refused or failed operation, told so that a person (or a client) can act on it.

    Args:
        kind: one of :data:`CODES`' keys; a stable machine-readable reason.
        message: one sentence for a person, naming what was refused and why.
        fix: what to do about it (a command, a setting), or ``None`` when there is nothing to do.
        **data: JSON-safe details (ids, paths, dates); never a secret's text.

    Raises:
        ValueError: ``kind`` is not a known kind (a programming error, not a user's).
    """

    def __init__(self, kind: str, message: str, fix: str | None = None, **data: object):
        if kind not in CODES:
            raise ValueError(f"unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fix = fix
        self.data = data

    @property
    def code(self) -> int:
        """The JSON-RPC error code of this error's kind."""
        return CODES[self.kind]

    def to_json(self) -> dict:
        """The JSON-RPC error object: ``{"code", "message", "data": {"kind", "fix"?, …}}``."""
        data: dict = {"kind": self.kind, **self.data}
        if self.fix:
            data["fix"] = self.fix
        return {"code": self.code, "message": self.message, "data": data}

    def line(self) -> str:
        """The error as one line for a terminal: the message, then the fix if there is one."""
        return f"{self.message} Fix: {self.fix}" if self.fix else self.message


def bad_request(message: str, fix: str | None = None, **data: object) -> CogdError:
    """A ``bad_request`` error: the caller sent something cogd cannot use."""
    return CogdError("bad_request", message, fix, **data)


def not_found(message: str, fix: str | None = None, **data: object) -> CogdError:
    """A ``not_found`` error: the id or path names nothing cogd knows."""
    return CogdError("not_found", message, fix, **data)
