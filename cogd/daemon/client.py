"""A blocking JSON-RPC client for the daemon's Unix socket. Standard library only.

Used by the hook client (on its hot path, once per hook process) and by the
CLI. It imports neither :mod:`socket` nor :mod:`json`: ``socket`` pulls in
``selectors`` and ``enum``, ``json`` pulls in ``re``, together about 7 ms of a
hook's start-up. The C modules underneath (``_socket``, ``_json`` through
:mod:`cogd.fastjson`) do the same work. The wire format is
:mod:`cogd.daemon.protocol`'s: one compact ASCII JSON object per line.
"""

import os
import time

import _socket

from cogd.fastjson import dumps, loads


class DaemonUnavailable(ConnectionError):
    """No daemon answers on the socket (missing socket, refused, or timed out)."""


class RemoteError(RuntimeError):
    """The daemon answered with a JSON-RPC error. ``kind`` is its ``data.kind``."""

    def __init__(self, error: dict):
        super().__init__(error.get("message", "error"))
        self.code = error.get("code")
        data = error.get("data")
        self.data = data if isinstance(data, dict) else {}
        self.kind = self.data.get("kind", "")


def encode_request(method: str, params: dict | None = None, request_id: int | str = 1) -> bytes:
    """One request line, as :func:`cogd.daemon.protocol.encode` of :func:`~cogd.daemon.protocol.request` writes it."""
    return (dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}) + "\n").encode("ascii")


def exchange(socket_path: str | os.PathLike[str], line: bytes, timeout: float = 5.0) -> bytes:
    """Send one request line and return the answer line (raw bytes, newline included).

    ``timeout`` is in seconds and bounds connect, send and receive together.
    Raises DaemonUnavailable when nothing answers in time; its ``__cause__``
    is the ``OSError`` (a ``TimeoutError`` when a daemon accepted but was late).
    """
    deadline = time.monotonic() + timeout
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    chunks = []
    try:
        try:
            sock.settimeout(max(timeout, 0.001))
            sock.connect(os.fspath(socket_path))
            sock.sendall(line)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("deadline")
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if chunk.endswith(b"\n"):
                    break
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError, ConnectionResetError, BrokenPipeError) as exc:
            raise DaemonUnavailable(f"{os.fspath(socket_path)}: {exc.__class__.__name__}: {exc}") from exc
        except OSError as exc:  # e.g. ENOTSOCK, EACCES, path too long
            raise DaemonUnavailable(f"{os.fspath(socket_path)}: {exc}") from exc
    finally:
        sock.close()
    raw = b"".join(chunks)
    if not raw:
        raise DaemonUnavailable(f"{os.fspath(socket_path)}: connection closed without an answer")
    return raw


def decode_answer(raw: bytes) -> object:
    """The ``result`` of an answer line. Raises RemoteError for a JSON-RPC error, ValueError for non-JSON-RPC."""
    answer = loads(raw.decode("utf-8"))
    if not isinstance(answer, dict):
        raise ValueError("answer is not a JSON object")
    if "error" in answer:
        raise RemoteError(answer["error"] if isinstance(answer["error"], dict) else {"message": str(answer["error"])})
    return answer.get("result")


def call(socket_path: str | os.PathLike[str], method: str, params: dict | None = None, timeout: float = 5.0) -> object:
    """Send one request and return its ``result``.

    ``timeout`` is in seconds and bounds connect, send and receive together.
    Raises DaemonUnavailable when nothing answers in time, RemoteError for a
    JSON-RPC error answer, and ValueError for an answer that is not JSON-RPC.
    """
    return decode_answer(exchange(socket_path, encode_request(method, params), timeout))
