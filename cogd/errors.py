"""cogd's one error type: a stable kind, a message for a person, and a fix they can carry out.

Standard library only and at the bottom of the import graph, so every layer (and the hook)
may raise it. The kinds are the protocol's (docs/protocol.md, "Errors", lists each with its
code; a test keeps that table and :data:`CODES` equal). The daemon maps a :class:`CogdError`
to a JSON-RPC error object once (``Service.call``), with ``data = {"kind": kind, "fix": fix,
**data}`` and ``code = CODES[kind]`` -- except where the refusal is one JSON-RPC itself names,
which :class:`cogd.rpc.protocol.RpcError` answers with JSON-RPC's own code and a cogd kind
beside it: a parameter that fails validation is -32602 (invalid params) with kind
``bad_request``, an unknown method -32601 with ``not_found``, an unparsable line -32700 and a
request that is not JSON-RPC -32600, both with ``bad_request``. The CLI maps one to a message
once, at its edge. Clients match on ``kind``, never on the message or the code.
"""

from __future__ import annotations

# kind -> JSON-RPC error code. -32001 … -32099 is the range JSON-RPC 2.0 leaves to
# implementations ("Server error", https://www.jsonrpc.org/specification#error_object).
# -32008 is not reused: it once named a kind that nothing ever sent.
CODES: dict[str, int] = {
    "bad_request": -32001,
    "not_found": -32002,
    "illegal_transition": -32003,
    "tombstoned": -32004,
    "secret_detected": -32005,
    "duplicate": -32006,
    "busy": -32007,
    "unsafe_path": -32009,
    "store_refused": -32010,
    "config": -32011,
    "unavailable": -32012,
    "model": -32013,
    "snapshot": -32014,  # an index snapshot that cannot be used (cogd.snapshot)
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
        if not self.fix:
            return self.message
        end = "" if self.message.endswith((".", "!", "?", ":", ";")) else "."  # two sentences, not one
        return f"{self.message}{end} Fix: {self.fix}"


def bad_request(message: str, fix: str | None = None, **data: object) -> CogdError:
    """A ``bad_request`` error: the caller sent something cogd cannot use."""
    return CogdError("bad_request", message, fix, **data)


def not_found(message: str, fix: str | None = None, **data: object) -> CogdError:
    """A ``not_found`` error: the id or path names nothing cogd knows."""
    return CogdError("not_found", message, fix, **data)
