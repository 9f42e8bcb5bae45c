"""cogd's wire protocol: JSON-RPC 2.0, one UTF-8 JSON object per line (docs/protocol.md).

Imports only the standard library and :mod:`cogd.errors`. Error codes: cogd's, by
kind, come from the one table :data:`cogd.errors.CODES` (the -32000 range, each with a
stable ``data.kind`` that clients match on instead of the message); this module adds
only JSON-RPC's own protocol-level codes (-32700 … -32603), which :class:`RpcError`
carries in place of its kind's code where JSON-RPC names the refusal itself: -32602
(invalid params) with kind ``bad_request`` for a parameter that fails validation,
-32601 with ``not_found`` for an unknown method, -32700 and -32600 with
``bad_request`` for a line that does not parse or is not a JSON-RPC request.
"""

from __future__ import annotations

import json

from cogd.errors import CogdError

PROTOCOL_VERSION = 1

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

MAX_LINE_BYTES = 64 * 1024 * 1024  # one request; large PostToolUse payloads fit


class RpcError(CogdError):
    """A :class:`~cogd.errors.CogdError` as the daemon answers it, optionally with a JSON-RPC
    protocol-level code in place of its kind's code.

    ``kind``: one of :data:`cogd.errors.CODES` (``bad_request``, ``not_found`` …);
    ``code``: one of this module's JSON-RPC codes (``INVALID_PARAMS`` for a parameter
    that fails validation, ``METHOD_NOT_FOUND``, ``PARSE_ERROR``, ``INVALID_REQUEST``),
    or None for ``CODES[kind]``; ``data``: JSON-safe details, sent beside ``kind``.
    Raises ValueError for an unknown kind.
    """

    def __init__(self, kind: str, message: str, code: int | None = None, data: dict | None = None,
                 fix: str | None = None):
        super().__init__(kind, message, fix, **(data or {}))
        self._protocol_code = code

    @property
    def code(self) -> int:
        """The protocol-level code when one was given, else the code of this error's kind."""
        return self._protocol_code if self._protocol_code is not None else super().code

    @classmethod
    def of(cls, error: CogdError) -> "RpcError":
        """``error`` as an RpcError (the same object when it is one): same kind, message, fix and data."""
        if isinstance(error, RpcError):
            return error
        return cls(error.kind, error.message, data=dict(error.data), fix=error.fix)


def encode(message: dict) -> bytes:
    """One message as a line of ASCII-safe JSON (lone surrogates survive as escapes)."""
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def request(method: str, params: dict | None = None, request_id: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


def response(request_id: object, result: object) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: object, error: RpcError) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
