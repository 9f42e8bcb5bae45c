"""The daemon process: lock, socket, JSON-RPC loop, shutdown.

``run(root, lock_fd)`` is the whole life of one daemon: hold the lock, clean
up what a crashed predecessor left (stale socket and pid file), bind the
socket with mode 0600, serve requests on a thread pool, and leave on SIGTERM,
SIGINT, ``daemon.shutdown``, idle timeout, or when ``.cogd/`` is deleted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import logging.handlers
import os
import select
import signal
import sys
import time
from pathlib import Path

from cogd import safepath
from cogd.rpc import locate
from cogd.config import Config, ConfigError, load_config
from cogd.daemon import scheduling, spool
from cogd.rpc import control
from cogd.rpc.client import peer_uid
from cogd.rpc.protocol import (
    INVALID_REQUEST,
    MAX_LINE_BYTES,
    PARSE_ERROR,
    RpcError,
    encode,
    error_response,
    response,
)
from cogd.daemon.service import Service
from cogd.errors import CogdError
from cogd.paths import Layout
from cogd.secrets import MaskingLogFilter, warm_secret_scan

log = logging.getLogger(__name__)

HOUSEKEEPING_S = 1.0
MAX_CONNECTIONS = 256  # open client connections; more are closed at once (file descriptors are finite)
# Connections the kernel queues before accept. A full queue makes a hook's connect wait
# until its deadline (its request never sent); bursts of hooks under load need more than
# asyncio's default of 100. Linux caps it at net.core.somaxconn (4096 by default).
LISTEN_BACKLOG = 1024
IDLE_CONNECTION_S = 30.0  # a connection that sends no complete line for this long is closed
# Methods whose answer is their whole point and whose ledger record says "delivered". A hook
# that gave up at its deadline closes its connection; if it is gone before its request's turn
# no pack is built (under overload this sheds the work for clients that left). A client that
# asks to acknowledge (the hook) gets its delivery recorded only on the ack that follows its
# printed pack (see Connection); for one that does not, a delivery whose client left while the
# pack was built is taken back out of the ledger.
DELIVERING = frozenset({"context.prompt", "context.session_start"})
# Requests that do not make background work give way (cogd.daemon.scheduling): a progress bar
# polls status a few times a second, and must not stall the embedding it is showing.
UNTRACKED = frozenset({"status", "daemon.shutdown"})


def _hung_up(fd: int | None) -> bool:
    """True when the client has closed its end of the connection for good (POLLHUP).

    A client that only shut down its sending side (``shutdown(SHUT_WR)``, as ``nc -N``
    does) can still read the answer: that is POLLRDHUP, not POLLHUP, and counts as here.
    """
    if fd is None:
        return False
    try:
        poller = select.poll()
        poller.register(fd, 0)  # POLLHUP, POLLERR and POLLNVAL are always reported
        return any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


class SafeRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose file is opened by :func:`cogd.safepath.open_file`.

    The standard handler's ``open()`` follows a symbolic link (``daemon.log`` →
    ``~/.bashrc``); this one refuses it, creates the file 0600, and only
    appends to a regular file of ours. Rotation renames, which never follows links.
    """

    def _open(self):
        fd = safepath.open_file(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


def _setup_logging(layout: Layout, foreground: bool) -> None:
    root_logger = logging.getLogger("cogd")
    root_logger.setLevel(logging.INFO)
    handler = SafeRotatingFileHandler(layout.daemon_log, maxBytes=1 << 20, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(MaskingLogFilter())  # an error quoting client text must not write a secret to the log
    root_logger.addHandler(handler)
    logging.getLogger("asyncio").addHandler(handler)  # errors inside the event loop go to the same log
    if foreground:
        root_logger.addHandler(logging.StreamHandler())


class Daemon:
    def __init__(self, layout: Layout, config: Config, lock_fd: int):
        self.layout = layout
        self.config = config
        self.lock_fd = lock_fd
        self.lock_ino = os.fstat(lock_fd).st_ino
        # Chosen once, by the daemon, and recorded in the pid file for every client to read.
        socket_path, self.runtime = locate.daemon_socket_path(str(layout.root))
        self.socket_path = Path(socket_path)
        self.service: Service | None = None
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="cogd-req")
        # Acknowledged deliveries are committed here, not behind the pack builds queued on the
        # pool: the hook waits for that commit, and it is a single small ledger write.
        self.ack_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cogd-ack")
        self.stop_event: asyncio.Event | None = None
        self.stop_reason = ""
        self.connections = 0

    def request_stop(self, reason: str) -> None:
        if self.stop_event is not None and not self.stop_event.is_set():
            self.stop_reason = reason
            log.info("stopping: %s", reason)
            self.stop_event.set()

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        """True when the connected process runs as our uid (``SO_PEERCRED``); a refusal is logged.

        A second layer behind the socket's mode 0600 and its private directory:
        a socket made reachable by mistake (chmod 666) still serves only its user.
        """
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock)
        except (OSError, AttributeError) as exc:
            log.warning("refusing a connection: its peer credentials cannot be read (%s)", exc)
            return False
        if uid != os.getuid():
            log.warning("refusing a connection from uid %d (this daemon serves uid %d only)", uid, os.getuid())
            return False
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection (asyncio's per-connection callback): admit it, then run its
        request loop (:class:`Connection`) until it ends; a pack still held then is withdrawn."""
        if not self._admit(writer):
            return
        self.connections += 1
        connection = Connection(self, reader, writer)
        try:
            await connection.serve()
        except (ConnectionError, BrokenPipeError):
            pass
        finally:
            # Whatever ended the loop (a failed read or write, a cancelled server), a pack
            # still held was never acknowledged: it is not a delivery.
            connection.withdraw("the connection failed before an acknowledgement")
            self.connections -= 1
            try:
                writer.close()
            except Exception:
                pass

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Whether to serve this connection: its peer is our uid and fewer than MAX_CONNECTIONS are open.
        A refused connection is closed here (a busy one after a ``busy`` error)."""
        if not self._peer_allowed(writer):
            writer.close()
            return False
        if self.connections >= MAX_CONNECTIONS:
            log.warning("refusing a connection: %d open", self.connections)
            # Say so before closing: the request is unread, and a client told it was not processed
            # can keep it (the hook spools a tool use) instead of taking the silence for a crash.
            writer.write(encode(error_response(None, RpcError("busy", f"{self.connections} connections open"))))
            writer.close()
            return False
        return True

    def _confirm(self, token: int) -> int | None:
        """Record the delivery held under ``token`` (its client printed the pack). Returns its id.

        Runs on ``ack_pool``; a failed write is logged (and is a current problem in status,
        :func:`cogd.daemon.context_methods.confirm`), and answers None."""
        try:
            with scheduling.requests.track():  # the hook waits for this commit
                delivery_id = self.service.confirm_delivery(token)
        except Exception:
            log.exception("could not record acknowledged delivery (ack %d)", token)
            return None
        if delivery_id is None:
            log.warning("acknowledgement %d matched no held pack", token)
        return delivery_id

    def _withdraw(self, token: int, why: str) -> None:
        """Forget the pack held under ``token``: it never reached its client, so it is never recorded.

        The one place a held pack is withdrawn (every path of :class:`Connection`, and
        :meth:`_take_back`); ``why`` goes to the log."""
        if self.service is not None and self.service.withdraw_delivery(token):
            log.info("pack %d withdrawn, no delivery recorded: %s", token, why)

    def _answer(self, line: bytes, fd: int | None = None) -> dict | None:
        """One request line → one response object (None for a notification or a client gone).

        ``fd``: the connection's socket, to skip (or take back) a delivery its client will never read.
        """
        message, refusal = _parse_request(line)
        if message is None:
            return refusal
        method = message["method"]
        try:
            if method in UNTRACKED:
                result = self._result(method, message.get("params", {}), fd)
            else:
                with scheduling.requests.track():  # the embedder waits between batches meanwhile
                    result = self._result(method, message.get("params", {}), fd)
        except CogdError as exc:  # Service.call raises RpcError only; a CogdError answers the same way
            if "id" not in message:  # JSON-RPC 2.0: a notification is never answered, not even with an error
                log.warning("notification %s refused (%s): %s", method, exc.kind, exc)
                return None
            return error_response(message.get("id"), exc)
        if result is CLIENT_GONE or "id" not in message:
            return None
        return response(message.get("id"), result)

    def _result(self, method: str, params: object, fd: int | None) -> object:
        """The result of one request, or CLIENT_GONE when a delivering method's client hung up.

        ``daemon.shutdown`` is answered here (it stops this loop, which the Service does not
        own); every other method goes to :meth:`Service.call`. A pack is not built for a client
        already gone, and one built for a client that left meanwhile is taken back."""
        if method == "daemon.shutdown":
            asyncio.run_coroutine_threadsafe(self._stop_soon("daemon.shutdown"), self.loop)
            return {"ok": True}
        assert self.service is not None
        if method in DELIVERING and _hung_up(fd):
            log.info("%s: the client hung up before its turn; no pack built", method)
            return CLIENT_GONE
        result = self.service.call(method, params)
        if method in DELIVERING and _hung_up(fd):
            self._take_back(method, result)
            return CLIENT_GONE
        return result

    def _take_back(self, method: str, result: object) -> None:
        """A pack whose client hung up while it was built: withdraw it if held (nothing was
        recorded), retract its delivery if it was recorded at once (a client without ``ack``)."""
        delivery_id = result.get("delivery_id") if isinstance(result, dict) else None
        token = result.get("ack") if isinstance(result, dict) else None
        if token is not None:
            self._withdraw(token, "its client left while it was built")
        if delivery_id is not None:
            try:
                self.service.ledger.retract_delivery(delivery_id)
            except Exception:
                log.exception("could not retract delivery %s", delivery_id)
        log.info("%s: the client hung up while its pack was built; delivery %s retracted", method, delivery_id)

    def _ingest_spool(self) -> None:
        """Record the tool uses hooks spooled when no daemon took them (:mod:`cogd.daemon.spool`)."""
        run_dir = self.layout.run_dir
        try:
            if not (run_dir / spool.SPOOL_NAME).stat().st_size and not (run_dir / (spool.SPOOL_NAME + ".ingesting")).exists():
                return
        except FileNotFoundError:
            if not (run_dir / (spool.SPOOL_NAME + ".ingesting")).exists():
                return
        spool.ingest(run_dir, self.service)

    async def _stop_soon(self, reason: str) -> None:
        self.request_stop(reason)

    def _lock_file_still_ours(self) -> bool:
        try:
            return os.lstat(self.layout.lock_file).st_ino == self.lock_ino
        except OSError:
            return False

    async def _housekeeping(self) -> None:
        idle = self.config.daemon.idle_exit_s
        while not self.stop_event.is_set():
            await asyncio.sleep(HOUSEKEEPING_S)
            if not self._lock_file_still_ours():
                self.request_stop(".cogd/ was removed or replaced")
            elif not self.socket_path.exists():
                self.request_stop("socket file was removed")
            elif self.service is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(self.pool, self.service.check_projection)
                except Exception:
                    log.exception("projection check failed")
                await asyncio.get_running_loop().run_in_executor(self.pool, self._ingest_spool)
                # once per idle stretch, on its own thread
                self.service.consolidator.on_idle(self.service.last_request_at, time.monotonic())
            if idle and self.service and time.monotonic() - self.service.last_request_at > idle:
                if self.service.worker.state == "idle":
                    self.request_stop(f"idle for {idle} s")

    def _write_pid(self) -> None:
        # Clients of a deep root read the socket from here (cogd.rpc.locate.recorded_socket).
        info = {"pid": os.getpid(), "started_at": time.time(), "socket": str(self.socket_path),
                "root": str(self.layout.root), "runtime": self.runtime}
        safepath.check_chain(self.layout.run_dir)
        safepath.write_atomic(self.layout.pid_file, json.dumps(info).encode("utf-8"))

    async def main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        # We hold the lock, so whatever socket is there belongs to a dead daemon.
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others can connect
        try:
            server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path), limit=MAX_LINE_BYTES,
                                                     backlog=LISTEN_BACKLOG)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        self._write_pid()
        self.service = Service(self.layout, self.config)
        control.clear_start_failure(self.layout)  # hooks may start daemons again (see control.spawn)
        warm_secret_scan()  # detect-secrets takes ~0.6 s to import: not on the first prompt's clock
        log.info("serving %s on %s (pid %d)%s", self.layout.root, self.socket_path, os.getpid(),
                 f"; runtime directory {self.runtime}" if self.runtime else "")
        await self.loop.run_in_executor(self.pool, self._ingest_spool)  # tool uses hooks spooled while we were down
        housekeeping = asyncio.create_task(self._housekeeping())
        async with server:
            await self.stop_event.wait()
        housekeeping.cancel()
        server.close()

    def cleanup(self) -> None:
        if self.service is not None:
            self.service.close()  # finishes the file being written, commits
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.ack_pool.shutdown(wait=True)
        if self._lock_file_still_ours():
            for path in (self.socket_path, self.layout.pid_file):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
        log.info("stopped (%s)", self.stop_reason or "exit")


def _ack_token(answer: dict) -> int | None:
    """The ack token of an answer whose pack waits for the client's acknowledgement, else None."""
    result = answer.get("result")
    token = result.get("ack") if isinstance(result, dict) else None
    return token if type(token) is int else None


def _acknowledgement(line: bytes, token: int) -> dict | None:
    """``line`` parsed when it is the ``context.ack`` of ``token`` (docs/protocol.md), else None."""
    if b"context.ack" not in line:
        return None
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "context.ack":
        return None
    params = message.get("params")
    return message if isinstance(params, dict) and params.get("ack") == token else None


CLIENT_GONE = object()  # Daemon._result's answer for a client that hung up: nothing is sent


def _parse_request(line: bytes) -> tuple[dict | None, dict | None]:
    """``(message, None)`` for a JSON-RPC 2.0 request line, else ``(None, the error response)``."""
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return None, error_response(None, RpcError("bad_request", f"parse error: {exc.__class__.__name__}", PARSE_ERROR))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return None, error_response(message.get("id") if isinstance(message, dict) else None,
                                    RpcError("bad_request", "not a JSON-RPC 2.0 request", INVALID_REQUEST))
    return message, None


class Connection:
    """One client connection's request loop, and the delivery acknowledgement on it.

    A connection is in one of two states (docs/protocol.md "Delivery acknowledgement"):

    - **open**: nothing held; the next request line may take IDLE_CONNECTION_S to come.
    - **holding**: the answer just sent carried a pack whose delivery waits for the client's
      ``context.ack`` (:attr:`held` is its token); the next line must come within
      ``[daemon] ack_wait_ms``.

    From *holding*, the next line settles the pack (:meth:`_settle`): the matching
    ``context.ack`` records the delivery; anything else — another request, the end of the
    stream, silence past ``ack_wait_ms``, a failed connection — withdraws it, because the
    client cannot have printed a pack it did not acknowledge. Every withdrawal goes through
    :meth:`withdraw`, and from there to :meth:`Daemon._withdraw`.
    """

    def __init__(self, daemon: Daemon, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.daemon, self.reader, self.writer = daemon, reader, writer
        sock = writer.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else None  # polled for a hang-up (_hung_up)
        self.held: int | None = None  # ack token of the pack just sent, until acknowledged or withdrawn

    def withdraw(self, why: str) -> None:
        """Leave *holding*: the pack held (if any) is forgotten, never recorded."""
        token, self.held = self.held, None
        if token is not None:
            self.daemon._withdraw(token, why)

    async def serve(self) -> None:
        """Answer request lines until the client leaves, goes silent, or sends a bad line."""
        while True:
            line = await self._next_line()
            if line is None:
                return
            if self.held is not None and await self._settle(line):
                continue  # the line was the acknowledgement, not a request
            if not line:
                return  # end of stream
            if not line.endswith(b"\n"):  # the client died (or gave up) in the middle of sending it
                log.warning("an incomplete request line (%d bytes, no newline) at the end of a connection: ignored", len(line))
                return
            await self._reply(line)

    async def _next_line(self) -> bytes | None:
        """The next line (``b""`` at the end of the stream), or None when the loop must end:
        silence past its state's wait (a held pack is then withdrawn: its client is too slow
        or gone), or a line over MAX_LINE_BYTES (answered ``bad_request`` first)."""
        ack_wait_ms = self.daemon.config.daemon.ack_wait_ms
        wait = ack_wait_ms / 1000 if self.held is not None else IDLE_CONNECTION_S
        try:
            return await asyncio.wait_for(self.reader.readline(), wait)
        except asyncio.TimeoutError:
            # A client that sends nothing (or half a line) does not hold a slot forever.
            self.withdraw(f"no acknowledgement within {ack_wait_ms} ms")
            return None
        except (asyncio.LimitOverrunError, ValueError):
            self.writer.write(encode(error_response(None, RpcError("bad_request", "request line too long", INVALID_REQUEST))))
            return None

    async def _settle(self, line: bytes) -> bool:
        """Settle the held pack with the line that followed it. Returns True when ``line`` was its
        acknowledgement (the delivery is recorded, and the ack answered when it has an id);
        False when the pack was withdrawn and ``line`` is still to be handled as a request."""
        token = self.held
        ack = _acknowledgement(line, token)
        if ack is None:
            self.withdraw("the client sent no acknowledgement" if line else "the client left without acknowledging")
            return False
        self.held = None  # settled: from here on the pack is the ledger's, not ours to withdraw
        delivery_id = await asyncio.get_running_loop().run_in_executor(self.daemon.ack_pool, self.daemon._confirm, token)
        if "id" in ack:  # the hook waits for this reply: its delivery is committed when it exits
            self.writer.write(encode(response(ack["id"], {"delivery_id": delivery_id})))
            await self.writer.drain()
        return True

    async def _reply(self, line: bytes) -> None:
        """Answer one request (built on the request pool) and enter *holding* when it carries a pack to acknowledge."""
        answer = await asyncio.get_running_loop().run_in_executor(self.daemon.pool, self.daemon._answer, line, self.fd)
        if answer is None:
            return
        self.held = _ack_token(answer)  # before writing: a write that fails still withdraws it
        self.writer.write(encode(answer))
        await self.writer.drain()


def _record_start_failure(layout: Layout, config: Config, exc: Exception) -> None:
    fix = getattr(exc, "fix", "") or "see `cogd logs`; after fixing the cause, `cogd start`"
    try:
        reason = getattr(exc, "summary", "") or f"{exc.__class__.__name__}: {exc}"
        info = control.record_start_failure(layout, reason, fix,
                                            backoff_s=config.daemon.restart_backoff_s)
        log.error("the daemon could not start (failure %d in a row); automatic starts wait %.0f s; fix: %s",
                  info["failures"], info["retry_after"] - info["at"], fix)
    except OSError:
        log.exception("could not write the failed-start marker")


def run(root: Path, lock_fd: int | None = None, foreground: bool = False) -> int:
    """Run the daemon for ``root`` until stopped. Returns a process exit code.

    ``lock_fd``: an already-locked descriptor of the daemon lock handed over
    by :func:`cogd.rpc.control.spawn`; None takes the lock here. Returns 3
    when another daemon holds the lock, 2 when ``.cogd/`` fails the safe-path
    checks or no private runtime directory exists (the reason on stderr, and
    in the log when the log itself is safe).
    """
    os.umask(0o077)  # every file the daemon (SQLite, LanceDB, logging) creates is private
    try:
        layout = Layout(root.resolve()).ensure()
    except safepath.UnsafePath as exc:
        print(f"cogd: refusing to start: {exc}", file=sys.stderr)
        return 2
    if lock_fd is None:
        lock_fd = control.try_lock(layout)
        if lock_fd is None:
            print(f"cogd: a daemon already runs for {layout.root}")
            return 3
    _setup_logging(layout, foreground)
    try:
        config = load_config(layout.config_file)
    except ConfigError as exc:
        log.error("bad config, using defaults: %s", exc)
        config = Config()
    try:
        daemon = Daemon(layout, config, lock_fd)
    except safepath.UnsafePath as exc:  # no private runtime directory for a deep root's socket
        log.error("refusing to start: %s", exc)
        print(f"cogd: refusing to start: {exc}", file=sys.stderr)
        os.close(lock_fd)
        return 2
    try:
        asyncio.run(daemon.main())
    except Exception as exc:
        log.exception("daemon crashed")
        if daemon.service is None:  # it never came up: hooks back off instead of retrying per prompt
            _record_start_failure(layout, config, exc)
        return 1
    finally:
        daemon.cleanup()
        os.close(lock_fd)
    return 0
