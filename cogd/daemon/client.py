"""A blocking JSON-RPC client for the daemon's Unix socket. Standard library only.

Used by the hook client (on its hot path) and by the CLI.
"""

from __future__ import annotations

import json
import os
import socket
import time

from cogd.daemon.protocol import encode, request


class DaemonUnavailable(ConnectionError):
    """No daemon answers on the socket (missing socket, refused, or timed out)."""


class RemoteError(RuntimeError):
    """The daemon answered with a JSON-RPC error. ``kind`` is its ``data.kind``."""

    def __init__(self, error: dict):
        super().__init__(error.get("message", "error"))
        self.code = error.get("code")
        self.data = error.get("data") or {}
        self.kind = self.data.get("kind", "")


def call(socket_path: str | os.PathLike[str], method: str, params: dict | None = None, timeout: float = 5.0) -> object:
    """Send one request and return its ``result``.

    ``timeout`` is in seconds and bounds connect, send and receive together.
    Raises DaemonUnavailable when nothing answers in time, RemoteError for a
    JSON-RPC error answer, and ValueError for an answer that is not JSON-RPC.
    """
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(timeout, 0.001))
        try:
            sock.connect(str(socket_path))
            sock.sendall(encode(request(method, params)))
            chunks = []
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout("deadline")
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if chunk.endswith(b"\n"):
                    break
        except (FileNotFoundError, ConnectionRefusedError, socket.timeout, ConnectionResetError, BrokenPipeError) as exc:
            raise DaemonUnavailable(f"{socket_path}: {exc.__class__.__name__}: {exc}") from exc
        except OSError as exc:  # e.g. ENOTSOCK, EACCES, path too long
            raise DaemonUnavailable(f"{socket_path}: {exc}") from exc
    finally:
        sock.close()
    raw = b"".join(chunks)
    if not raw:
        raise DaemonUnavailable(f"{socket_path}: connection closed without an answer")
    answer = json.loads(raw)
    if not isinstance(answer, dict):
        raise ValueError("answer is not a JSON object")
    if "error" in answer:
        raise RemoteError(answer["error"] if isinstance(answer["error"], dict) else {"message": str(answer["error"])})
    return answer.get("result")
