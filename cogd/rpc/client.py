"""A blocking JSON-RPC client for the daemon's Unix socket. Standard library only.

Used by the hook client (on its hot path, once per hook process) and by the
CLI. It imports neither :mod:`socket` nor :mod:`json`: ``socket`` pulls in
``selectors`` and ``enum``, ``json`` pulls in ``re``, together about 7 ms of a
hook's start-up. The C modules underneath (``_socket``, ``_json`` through
:mod:`cogd.rpc.fastjson`) do the same work. The wire format is
:mod:`cogd.rpc.protocol`'s: one compact ASCII JSON object per line.
"""

import os
import stat
import sys
import time

import _socket

from cogd.errors import CogdError
from cogd.rpc.fastjson import dumps, loads


# The hook's deadline: its whole life, interpreter start-up included. Parsed here, once, for the
# hook (which reads it on every call) and for cogd.config (which reports it), so both agree.
DEADLINE_ENV = "COGD_HOOK_DEADLINE_MS"
DEFAULT_DEADLINE_MS = 1500
MAX_DEADLINE_MS = 60_000  # Claude Code's own ceiling for a hook; larger settings are clamped


def parse_deadline_ms(value: object) -> int | None:
    """A hook deadline in milliseconds from the environment or ``[hook] deadline_ms``.

    ``value``: an ``int`` or a string of ASCII digits (fewer than 10). Returns it clamped to
    ``[1, MAX_DEADLINE_MS]``, or None when it is unusable (zero, negative, not a whole number,
    ``True``), so the caller falls back to the next source. Never raises.
    """
    if isinstance(value, str):
        value = int(value) if value.isascii() and value.isdigit() and len(value) < 10 else None
    if type(value) is not int or value <= 0:
        return None
    return min(value, MAX_DEADLINE_MS)


class DaemonUnavailable(CogdError, ConnectionError):
    """No daemon answers on the socket (missing socket, refused, or timed out).

    A :class:`~cogd.errors.CogdError` of kind ``unavailable`` that is still a ``ConnectionError``
    (callers catch it as either). ``message``: what was tried and what happened; ``fix``: what to
    do, or None.
    """

    def __init__(self, message: str, fix: str | None = None):
        super().__init__("unavailable", message, fix)


class UntrustedListener(DaemonUnavailable):
    """The socket, or the process listening on it, belongs to another user: nothing is sent to it."""


_UCRED_BYTES = 12  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}: three 32-bit integers on Linux


def peer_uid(sock) -> int:
    """The uid of the process at the other end of a connected Unix socket (``SO_PEERCRED``).

    ``sock``: a ``socket``/``_socket`` object. Raises OSError where the kernel has no ``SO_PEERCRED``.
    """
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _UCRED_BYTES)
    return int.from_bytes(raw[4:8], sys.byteorder)


def _check_socket_file(path: str) -> None:
    """Refuse a socket file that is not a socket of ours (``lstat``: a planted link or another user's listener)."""
    st = os.lstat(path)  # FileNotFoundError: no daemon
    if not stat.S_ISSOCK(st.st_mode):
        raise UntrustedListener(f"{path}: not a socket (a link or a file): refused")
    if st.st_uid != os.getuid():
        raise UntrustedListener(f"{path}: socket belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): refused")


class AnswerTooLarge(ValueError):
    """The answer line grew past the caller's ``limit`` before its newline: it is not read further."""


class RemoteError(CogdError, RuntimeError):
    """The daemon answered with a JSON-RPC error: a :class:`~cogd.errors.CogdError` as it was sent.

    ``error``: the answer's ``error`` object, ``{"code", "message", "data"?}``. Attributes:
    ``message``; ``code``, the code as sent (may be None); ``data``, the whole ``data`` object
    as sent (``kind`` and ``fix`` included; ``{}`` when absent or not an object); ``kind``, its
    ``data.kind`` (``""`` when absent); ``fix``, its ``data.fix`` when a string, else None.
    The kind is kept as sent, even one this client does not know (a daemon of another
    version), so it is not checked against :data:`cogd.errors.CODES`. Never raises.
    """

    def __init__(self, error: dict):
        message = error.get("message", "error")
        message = message if isinstance(message, str) else str(message)
        Exception.__init__(self, message)  # not CogdError.__init__: the remote's kind is not ours to refuse
        data = error.get("data")
        self.data = data if isinstance(data, dict) else {}
        kind, fix = self.data.get("kind", ""), self.data.get("fix")
        self.kind = kind if isinstance(kind, str) else str(kind)
        self.message = message
        self.fix = fix if isinstance(fix, str) and fix else None
        self._code = error.get("code")

    @property
    def code(self) -> int | None:
        """The JSON-RPC error code the daemon sent (None when it sent none)."""
        return self._code

    def to_json(self) -> dict:
        """The error object as the daemon sent it (``data`` as received)."""
        return {"code": self._code, "message": self.message, "data": dict(self.data)}

    def line(self) -> str:
        """The refusal for a terminal: ``message (kind)``, then ``  fix: …`` on a second line when
        the daemon gave one."""
        head = f"{self.message} ({self.kind})" if self.kind else self.message
        return f"{head}\n  fix: {self.fix}" if self.fix else head


def encode_request(method: str, params: dict | None = None, request_id: int | str = 1) -> bytes:
    """One request line, as :func:`cogd.rpc.protocol.encode` of :func:`~cogd.rpc.protocol.request` writes it."""
    return (dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}) + "\n").encode("ascii")


def exchange(socket_path: str | os.PathLike[str], line: bytes, timeout: float = 5.0, limit: int | None = None) -> bytes:
    """Send one request line and return the answer line (raw bytes, newline included).

    ``timeout`` is in seconds and bounds connect, send and receive together.
    Raises DaemonUnavailable when nothing answers in time; its ``__cause__``
    is the ``OSError`` (a ``TimeoutError`` when a daemon accepted but was late).
    Raises UntrustedListener (a DaemonUnavailable), before anything is sent,
    when the socket file is not a socket owned by this user (``lstat``) or the
    process that accepted runs as another uid (``SO_PEERCRED``). ``limit``:
    see :func:`receive`.
    """
    sock = send(socket_path, line, timeout)
    try:
        return receive(sock, socket_path, time.monotonic() + timeout, limit)
    finally:
        sock.close()


def send(socket_path: str | os.PathLike[str], line: bytes, timeout: float = 5.0) -> "_socket.socket":
    """Connect and send one request line; return the open socket (the caller closes it).

    ``timeout`` (seconds) bounds connect and send together. When this returns,
    the whole line is in the kernel's hands: a daemon processes every complete
    line it receives, even once the client is gone. Raises DaemonUnavailable;
    UntrustedListener (one) before anything is sent when the socket file is not
    a socket of this user's (``lstat``) or the accepting process runs as
    another uid (``SO_PEERCRED``).
    """
    deadline = time.monotonic() + timeout
    path = os.fspath(socket_path)
    try:
        _check_socket_file(path)
    except DaemonUnavailable:
        raise
    except OSError as exc:
        raise DaemonUnavailable(f"{path}: {exc.__class__.__name__}: {exc}") from exc
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(timeout, 0.001))
        sock.connect(path)
        uid = peer_uid(sock)
        if uid != os.getuid():
            raise UntrustedListener(f"{path}: the listening process runs as uid {uid}, not as you "
                                    f"(uid {os.getuid()}): refused, nothing sent")
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(line)  # the timeout bounds the whole sendall (Python >= 3.5)
    except BaseException as exc:
        sock.close()
        if isinstance(exc, OSError) and not isinstance(exc, DaemonUnavailable):
            raise _unavailable(socket_path, exc) from exc
        raise
    return sock


def receive(sock: "_socket.socket", socket_path: str | os.PathLike[str], deadline: float,
            limit: int | None = None) -> bytes:
    """Read one answer line from ``sock`` by ``deadline`` (``time.monotonic()`` seconds).

    Returns the raw line, newline included. Raises DaemonUnavailable on a
    timeout or a connection closed without an answer, and AnswerTooLarge once
    more than ``limit`` bytes (None: no bound) arrived without a newline: a
    misbehaving listener streaming an endless line would otherwise cost the
    hook hundreds of megabytes and overrun its deadline (the deadline's
    signal cannot cut into one big join or decode). Does not close ``sock``.
    """
    chunks = []
    size = 0
    try:
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
            size += len(chunk)
            if limit is not None and size > limit:
                raise AnswerTooLarge(f"{os.fspath(socket_path)}: an answer over {limit} bytes: not read further")
    except OSError as exc:
        raise _unavailable(socket_path, exc) from exc
    raw = b"".join(chunks)
    if not raw:
        raise DaemonUnavailable(f"{os.fspath(socket_path)}: connection closed without an answer")
    return raw


def _unavailable(socket_path: str | os.PathLike[str], exc: OSError) -> DaemonUnavailable:
    if isinstance(exc, (FileNotFoundError, ConnectionRefusedError, TimeoutError, ConnectionResetError, BrokenPipeError)):
        return DaemonUnavailable(f"{os.fspath(socket_path)}: {exc.__class__.__name__}: {exc}")
    return DaemonUnavailable(f"{os.fspath(socket_path)}: {exc}")  # e.g. ENOTSOCK, EACCES, path too long


def acknowledge(sock: "_socket.socket", token: int, timeout: float) -> int | None:
    """Tell the daemon, on the connection that brought it, that the pack ``token`` was printed.

    Sends the ``context.ack`` request and waits at most ``timeout`` seconds for
    the daemon's reply (its ledger commit), so the delivery is recorded when
    the hook exits. Returns the recorded delivery id, or None when the reply
    did not come in time (the daemon records it all the same once the line is
    sent). Raises DaemonUnavailable when the line could not be sent.
    """
    try:
        sock.settimeout(max(timeout, 0.001))
        sock.sendall(encode_request("context.ack", {"ack": token}, request_id=2))
    except OSError as exc:
        raise _unavailable("daemon connection", exc) from exc
    try:
        result = decode_answer(receive(sock, "daemon connection", time.monotonic() + timeout, 1 << 16))
    except (DaemonUnavailable, RemoteError, ValueError):
        return None
    delivery_id = result.get("delivery_id") if isinstance(result, dict) else None
    return delivery_id if type(delivery_id) is int else None


def decode_answer(raw: bytes) -> object:
    """The ``result`` of an answer line. Raises RemoteError for a JSON-RPC error, ValueError for non-JSON-RPC."""
    answer = loads(raw.decode("utf-8"))
    if not isinstance(answer, dict):
        raise ValueError("answer is not a JSON object")
    if "error" in answer:
        raise RemoteError(answer["error"] if isinstance(answer["error"], dict) else {"message": str(answer["error"])})
    return answer.get("result")


def call(socket_path: str | os.PathLike[str], method: str, params: dict | None = None, timeout: float = 5.0,
         limit: int | None = None) -> object:
    """Send one request and return its ``result``.

    ``timeout`` is in seconds and bounds connect, send and receive together;
    ``limit`` bounds the answer's size in bytes (see :func:`receive`).
    Raises DaemonUnavailable when nothing answers in time, RemoteError for a
    JSON-RPC error answer, and ValueError for an answer that is not JSON-RPC.
    """
    return decode_answer(exchange(socket_path, encode_request(method, params), timeout, limit))
