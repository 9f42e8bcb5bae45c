"""cogd's wire protocol: JSON-RPC 2.0, one UTF-8 JSON object per line (DESIGN.md §3).

Standard library only. Error codes: JSON-RPC's own (-32700 … -32603) plus
cogd's in the -32000 range, each with a stable ``data.kind`` that clients
match on instead of the message.
"""

from __future__ import annotations

import json
PROTOCOL_VERSION = 1

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# cogd's own codes, by data.kind
COGD_CODES = {
    "bad_request": -32001,
    "not_found": -32002,
    "illegal_transition": -32003,
    "tombstoned": -32004,
    "secret_detected": -32005,
    "duplicate": -32006,
    "busy": -32007,
    "shutting_down": -32008,
}

MAX_LINE_BYTES = 64 * 1024 * 1024  # one request; large PostToolUse payloads fit


class RpcError(Exception):
    """An error to send back as a JSON-RPC error object.

    ``kind`` is the stable machine-readable reason (``bad_request``,
    ``not_found`` …); ``code`` defaults to cogd's code for that kind.
    """

    def __init__(self, kind: str, message: str, code: int | None = None, data: dict | None = None):
        super().__init__(message)
        self.kind = kind
        self.code = code if code is not None else COGD_CODES.get(kind, INTERNAL_ERROR)
        self.data = {"kind": kind, **(data or {})}

    def to_json(self) -> dict:
        return {"code": self.code, "message": str(self), "data": self.data}


def encode(message: dict) -> bytes:
    """One message as a line of ASCII-safe JSON (lone surrogates survive as escapes)."""
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def request(method: str, params: dict | None = None, request_id: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


def response(request_id: object, result: object) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: object, error: RpcError) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
