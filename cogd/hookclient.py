"""``cogd-hook [--client NAME] EVENT``: the process an agent (Claude Code, Codex, ...) runs per hook.

Reads the client's JSON payload on stdin, turns it into one of cogd's events
through the client's adapter (:mod:`cogd.clients`; Claude Code when no
``--client`` is given), finds the repository from its working directory, makes
one JSON-RPC call to the repository's daemon and prints the answer in that
client's output form. Events: ``session-start``, ``prompt-submit``,
``post-tool-use``, ``pre-compact``, ``session-end``, ``file-save PATH...`` (no stdin).

It must never break the agent's session. Whatever happens — no daemon, a
malformed payload, a timeout, a bug — it prints nothing, exits 0 within its
deadline (default 1.5 s; ``[hook] deadline_ms`` in ``.cogd/config.toml`` or
``COGD_HOOK_DEADLINE_MS``), and logs why in ``.cogd/logs/hook.log``. For the
two context events it also starts the daemon in the background, so the next
hook finds one.

The ledger must count what happened (docs/protocol.md, "How cogd-hook talks
to the daemon"): a context hook acknowledges its pack on the same connection
once the pack is printed and flushed, so a pack it did not print is never a
delivery; a tool use, once its payload is read, is either sent whole or
appended to ``.cogd/run/tool-uses.spool`` for the daemon to ingest.

Standard library only, and only light modules: this is the hot path. Its
start-up is its latency, so it imports nothing the interpreter has not loaded
already but ``_json`` and ``_socket`` (C), through :mod:`cogd.rpc.fastjson` and
:mod:`cogd.rpc.client`; ``json``, ``socket``, ``signal`` (all three pull in
``re`` or ``enum``) and ``from __future__`` are avoided on purpose, and what
only failures need is imported where it is used. tests/test_wiring.py guards
the list.
"""

import os
import sys
import time

import _signal

from cogd.clients import CONTEXT_EVENTS, Adapter, adapter
from cogd.rpc.client import (DEADLINE_ENV, DEFAULT_DEADLINE_MS, DaemonUnavailable, RemoteError, acknowledge, call,
                             decode_answer, encode_request, parse_deadline_ms, receive, send)
from cogd.rpc.fastjson import loads
from cogd.rpc.locate import cogd_file, find_root, socket_path
from cogd.safepath import UnsafePath, check_chain, open_file, read_bytes

MAX_CONTEXT_CHARS = 9_500  # never inject more than this, whatever the daemon says (Claude Code's limit: 10,000)
SOCKET_MARGIN_S = 0.05  # left for printing and exiting after the call
MAX_STDIN_BYTES = 256 * 1024 * 1024
LOG_MAX_BYTES = 1 << 20
# A pack is at most MAX_CONTEXT_CHARS (JSON-escaped, with its items): no honest answer comes near this.
ANSWER_MAX_BYTES = 4 << 20
ACK_WAIT_S = 0.5  # at most this long for the daemon's reply to an ack (the delivery is recorded either way)
# Tool uses the daemon could not be handed wait here for it (cogd.daemon.spool reads them).
SPOOL_NAME = "tool-uses.spool"
SPOOL_MAX_BYTES = 8 << 20  # beyond this a tool use is dropped (and logged): the spool never grows without bound
SPOOL_MAX_LINE = 1 << 20

# event → JSON-RPC method (cogd.clients.CONTEXT_EVENTS are the ones that may inject a pack)
EVENTS: dict[str, str] = {
    "session-start": "context.session_start",
    "prompt-submit": "context.prompt",
    "post-tool-use": "usage.tool_use",
    "pre-compact": "session.pre_compact",
    "session-end": "session.end",
    "file-save": "index.touch",
}
CLIENT_FLAG = "--client"

# PostToolUse fields that can be megabytes and that touch parsing never reads.
_BULKY_INPUT = ("content", "old_string", "new_string", "edits", "new_source")
_BULKY_RESPONSE = ("originalFile", "originalFileContents", "oldString", "newString", "stdout", "stderr", "edits", "usage")


def _process_started() -> float:
    """When this process started, on the ``time.monotonic()`` clock.

    The deadline covers the hook's whole life, interpreter start-up included,
    so it counts from the process's start time in ``/proc/self/stat`` rather
    than from the first line of Python. Falls back to now.
    """
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        elapsed = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return now - min(max(elapsed, 0.0), 5.0)
    except (OSError, ValueError, IndexError):
        return now


class _Log:
    """Appends one line per notable outcome to ``.cogd/logs/hook.log`` (or the user log).

    The repository's log is written only through the safe-path layer: its
    folders are checked (real directories of ours, created 0700) and the file
    is opened without following links (created 0600). When the repository's
    log is refused — ``.cogd/logs`` or ``hook.log`` is a link, or another
    user's — the line goes to the per-user log instead, prefixed with why.
    """

    def __init__(self) -> None:
        self.path: str | None = None
        self.event = "?"
        self.started = _process_started()

    def _fallback_path(self) -> str:
        """Where to log before the payload named a repository (e.g. unparsable stdin).

        Claude Code runs hooks in the project directory and sets
        ``CLAUDE_PROJECT_DIR``: log into that repository's ``.cogd/logs`` when
        it has one, else into the per-user state directory.
        """
        root = find_root(os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd())
        if root is not None and os.path.isdir(cogd_file(root, "logs")):
            return cogd_file(root, "logs", "hook.log")
        return _user_log_path()

    def __call__(self, message: str) -> None:
        path = self.path or self._fallback_path()
        elapsed = (time.monotonic() - self.started) * 1000
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid={os.getpid()} event={self.event} {elapsed:.0f}ms "
        try:
            _append(path, line + message + "\n", in_cogd=path != _user_log_path())
        except UnsafePath as exc:
            try:
                _append(_user_log_path(), f"{line}repository log refused ({exc}): {message}\n", in_cogd=False)
            except OSError:
                pass
        except OSError:
            pass


def _user_log_path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(state, "cogd", "hook.log")


def _append(path: str, text: str, in_cogd: bool) -> None:
    """Append ``text`` to the log at ``path``, rotating it past LOG_MAX_BYTES. Raises UnsafePath, OSError."""
    folder = os.path.dirname(path)
    if in_cogd:
        check_chain(folder, create=True)
    else:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    fd = open_file(path, flags)
    if os.fstat(fd).st_size > LOG_MAX_BYTES:
        os.close(fd)
        os.replace(path, path + ".1")  # a rename: never follows a link
        fd = open_file(path, flags)
    try:
        os.write(fd, text.encode("utf-8", errors="replace"))
    finally:
        os.close(fd)


log = _Log()


def _deadline_ms(root: str | None) -> int:
    env = parse_deadline_ms(os.environ.get(DEADLINE_ENV, ""))
    if env is not None:
        return env
    config = cogd_file(root, "config.toml") if root is not None else ""
    if config:
        try:
            # never through a link: neither the file (O_NOFOLLOW) nor a linked .cogd/ above it
            raw = read_bytes(config, 1 << 20) if check_chain(os.path.dirname(config), any_mode=True) else None
            if raw is None:
                return DEFAULT_DEADLINE_MS
            text = raw.decode("utf-8")
            # tomllib (with typing and re) costs ~8 ms of CPU per hook, a quarter of
            # its start-up: parse only a config that can set the deadline.
            if "deadline_ms" not in text:
                return DEFAULT_DEADLINE_MS
            import tomllib

            value = parse_deadline_ms(tomllib.loads(text).get("hook", {}).get("deadline_ms"))
            if value is not None:
                return value
        except Exception as exc:  # a broken config must not break the hook
            log(f"config ignored: {exc}")
    return DEFAULT_DEADLINE_MS


class _Pending:
    """What the hook is in the middle of, for the SIGALRM handler and the exit path.

    A tool use needs no entry for "read but not yet sent": SIGALRM is blocked
    from reading its payload until it is sent or spooled (:func:`_send_tool_use`).
    """

    sent = False  # a tool use's line went out whole: the daemon records it even if we leave now
    quiet: str | None = None  # what the client wants on stdout when nothing is injected
    held: tuple[object, int] | None = None  # (socket, ack token) of a pack to acknowledge once printed
    deadline = 0.0  # the hook's end, time.monotonic() seconds


def _on_deadline() -> str:
    """What to log on a deadline exit, given what :class:`_Pending` says the hook was doing."""
    if _Pending.sent:
        return "deadline reached: tool use sent, the daemon records it without us; exit 0"
    return "deadline reached: exit 0 with no output"


def _arm(deadline_s: float) -> None:
    def expire(signum, frame):  # noqa: ARG001
        log(_on_deadline())
        os._exit(0)

    _signal.signal(_signal.SIGALRM, expire)
    _signal.setitimer(_signal.ITIMER_REAL, max(deadline_s, 0.001))


def _read_payload() -> dict:
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES)
    if not raw.strip():
        raise ValueError("empty stdin")
    try:
        data = loads(raw.decode("utf-8", errors="replace"))
    except ValueError as exc:  # the C scanner's message names only an offset: say what it is about
        raise ValueError(f"stdin is not a JSON payload ({len(raw)} bytes): {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"payload is a JSON {type(data).__name__}, not an object")
    return data


def _slim_tool_payload(payload: dict) -> dict:
    """Drop the bulky fields of a PostToolUse payload before sending it."""
    slim = dict(payload)
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, dict):
        slim["tool_input"] = {k: v for k, v in tool_input.items() if k not in _BULKY_INPUT}
    response = payload.get("tool_response")
    if isinstance(response, dict):
        response = {k: v for k, v in response.items() if k not in _BULKY_RESPONSE}
        if isinstance(response.get("file"), dict):
            response["file"] = {k: v for k, v in response["file"].items() if k != "content"}
        if isinstance(response.get("structuredPatch"), list):
            response["structuredPatch"] = [
                {k: v for k, v in h.items() if k != "lines"} if isinstance(h, dict) else h
                for h in response["structuredPatch"]
            ]
        slim["tool_response"] = response
    return slim


def _params(event: str, payload: dict, argv: list[str], client: Adapter) -> dict:
    params = _event_params(event, payload, argv, client)
    clock = os.environ.get("COGD_NOW")  # replays: the event's time (used only if the daemon trusts it)
    if clock:
        try:
            params["now"] = float(clock)
        except ValueError:
            pass
    return params


def _event_params(event: str, payload: dict, argv: list[str], client: Adapter) -> dict:
    if event == "file-save":
        return {"paths": [os.path.abspath(p) for p in argv]}
    if event == "post-tool-use":
        tool = client.tool(payload)
        if client.claude_shaped:
            tool = _slim_tool_payload(tool)
        return {"payload": {**tool, "client": client.name}}
    return {**client.fields(event, payload), "client": client.name}


def _split_client(argv: list[str]) -> tuple[Adapter, list[str]]:
    """``(adapter, the rest)`` from ``[--client NAME | --client=NAME] EVENT ...``. Raises ValueError."""
    if argv and argv[0] == CLIENT_FLAG:
        if len(argv) < 2:
            raise ValueError(f"{CLIENT_FLAG} needs a client name")
        return adapter(argv[1]), argv[2:]
    if argv and argv[0].startswith(CLIENT_FLAG + "="):
        return adapter(argv[0][len(CLIENT_FLAG) + 1:]), argv[1:]
    return adapter("claude-code"), argv


def _spool(root: str, line: bytes, why: str) -> None:
    """Append a tool use's request line to ``.cogd/run/tool-uses.spool`` for the daemon to ingest.

    For a tool use no daemon could be handed (none running, refused, deadline
    before the send). The file is 0600, opened without following symlinks,
    appended under an exclusive ``flock`` (the daemon takes the same lock to
    drain it), and capped at SPOOL_MAX_BYTES. Never raises; logs the outcome.
    """
    if len(line) > SPOOL_MAX_LINE:
        log(f"tool use lost: {why}; its {len(line)}-byte request is too big to spool")
        return
    path = cogd_file(root, "run", SPOOL_NAME)
    # The deadline must not cut an append in half (or leave the tool use neither sent nor spooled).
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGALRM})
    try:
        _append_spool(path, line, why)
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def _append_spool(path: str, line: bytes, why: str) -> None:
    try:
        import fcntl  # a C module, loaded only on this failure path

        check_chain(os.path.dirname(path), create=True)  # .cogd/run: real directories of ours, 0700
        fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK)  # no links; 0600
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size + len(line) > SPOOL_MAX_BYTES:
                log(f"tool use lost: {why}; the spool is full ({size} bytes)")
                return
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        log(f"tool use spooled for the daemon: {why}")
    except OSError as exc:  # UnsafePath included: a planted link is never written through
        log(f"tool use lost: {why}; the spool is unusable: {exc}")


def _send_tool_use(root: str, line: bytes, deadline: float) -> None:
    """Hand a tool use to the daemon, or to the spool when none takes it.

    ``deadline``: the hook's end, on the ``time.monotonic()`` clock. SIGALRM
    is blocked while the line is sent: the deadline then finds it either not
    sent (spooled) or sent whole (the daemon records it), never half-way. The
    socket's own timeout bounds the send.
    """
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGALRM})  # already blocked by run(); made sure
    try:
        sock = send(socket_path(root), line, timeout=max(deadline - time.monotonic() - SOCKET_MARGIN_S, 0.01))
        _Pending.sent = True
    except DaemonUnavailable as exc:
        _spool(root, line, f"daemon unavailable: {exc}")
        return
    finally:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGALRM})  # a pending expiry fires here
    try:
        # Waiting for the answer keeps tool uses in order and the ledger current when the hook exits.
        decode_answer(receive(sock, socket_path(root), deadline - SOCKET_MARGIN_S, ANSWER_MAX_BYTES))
    except DaemonUnavailable as exc:
        if isinstance(exc.__cause__, TimeoutError):  # a daemon has it and is late: it records it without us
            log(f"tool use sent, no answer in time (the daemon records it): {exc}")
        else:  # closed or reset unanswered (a daemon stopping, or one that died): maybe never processed
            _respool(root, line, f"sent but the connection closed unanswered: {exc}")
    except RemoteError as exc:
        if exc.kind == "busy":  # refused unread at accept: not recorded, so keep it
            _respool(root, line, f"daemon busy: {exc}")
        else:
            log(f"daemon refused the request ({exc.kind}): {exc}")
    finally:
        sock.close()


def _respool(root: str, line: bytes, why: str) -> None:
    """Spool a tool use that was sent but maybe not processed (a spool replay skips it if it was).

    SIGALRM stays blocked from here to the exit (:func:`main` drops a pending
    expiry), so the deadline cannot fall between "not sent after all" and the spool.
    """
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGALRM})
    _Pending.sent = False
    _spool(root, line, why)


def _call_held(path: str, method: str, params: dict, timeout: float) -> object:
    """A context request whose pack is acknowledged once printed: the answer's ``result``.

    Asks for the acknowledgement (``params["ack"]``) and keeps the connection
    open in :class:`_Pending` for :func:`_acknowledge`. Raises like
    :func:`cogd.rpc.client.call`.
    """
    end = time.monotonic() + timeout
    sock = send(path, encode_request(method, {**params, "ack": True}), timeout)
    try:
        result = decode_answer(receive(sock, path, end, ANSWER_MAX_BYTES))
    except BaseException:
        sock.close()
        raise
    token = result.get("ack") if isinstance(result, dict) else None
    if type(token) is int:
        _Pending.held = (sock, token)  # closing it unacknowledged withdraws the pack
    else:
        sock.close()
    return result


def _acknowledge(printed: bool) -> None:
    """After the output is written and flushed: acknowledge the held pack, or let it go unprinted."""
    held, _Pending.held = _Pending.held, None
    if held is None:
        return
    sock, token = held
    try:
        if printed:
            wait = min(ACK_WAIT_S, max(_Pending.deadline - time.monotonic(), 0.02))
            acknowledge(sock, token, wait)
    except DaemonUnavailable as exc:  # printed, but the daemon will withdraw it: say so
        log(f"pack printed but its acknowledgement could not be sent: {exc}")
    finally:
        sock.close()


START_FAILED_MAX_BYTES = 65536
MAX_BACKOFF_S = 3600.0  # as cogd.rpc.control.MAX_BACKOFF_S: a marker beyond it is ignored


def _backed_off(root: str) -> str | None:
    """Why no daemon may be started now (its last start failed within the back-off), or None.

    Reads ``.cogd/run/start-failed.json`` with the light JSON decoder rather
    than importing :mod:`cogd.rpc.control` (``subprocess``, ``pathlib``):
    while a repository's daemon cannot start, every prompt comes this way.
    """
    try:
        raw = read_bytes(cogd_file(root, "run", "start-failed.json"), START_FAILED_MAX_BYTES)  # no link followed
        if raw is None:
            return None
        info = loads(raw.decode("utf-8", errors="replace"))
        wait = float(info["retry_after"]) - time.time()
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not 0 < wait <= MAX_BACKOFF_S:
        return None
    return f"its last start failed ({str(info.get('reason'))[:200]}); not starting another for {wait:.0f} s"


def _spawn_daemon(root: str) -> None:
    """Start the daemon for next time, unless its last start failed within the back-off window."""
    try:
        why = _backed_off(root)
        if why is not None:
            log(f"no daemon: {why} (see `cogd status`)")
            return
        from cogd.rpc.control import spawn
        from cogd.paths import Layout

        if spawn(Layout(root)):
            log("no daemon answered: started one in the background for next time")
    except Exception as exc:
        log(f"could not start the daemon: {exc.__class__.__name__}: {exc}")


def run(argv: list[str]) -> str | None:
    """Do the hook's work; return what to print (None for nothing). May raise."""
    _Pending.sent, _Pending.held, _Pending.quiet = False, None, None
    log.event = " ".join(argv[:3])[:80] or "?"  # until the arguments are read
    client, argv = _split_client(argv)
    _Pending.quiet = client.quiet
    event = argv[0] if argv else ""
    log.event = f"{event or '?'}" if client.name == "claude-code" else f"{client.name}:{event or '?'}"
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    method = EVENTS[event]
    injects = event in CONTEXT_EVENTS and client.injects(event)
    if event in CONTEXT_EVENTS and not injects:
        return None  # the client shows nothing a hook prints here: a pack would never be read
    if event == "file-save":
        payload: dict = {}
        where = argv[1] if len(argv) > 1 else os.getcwd()
    else:
        payload = _read_payload()
        if event == "post-tool-use":
            # From here the tool use is ours to hand over: the deadline waits until it is sent or
            # spooled (_send_tool_use unblocks it), which takes no longer than the send's timeout.
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGALRM})
        where = client.cwd(payload) or os.getcwd()
    root = find_root(where)
    if root is None:
        raise LookupError(f"{where!r} is not inside a repository")
    log.path = cogd_file(root, "logs", "hook.log")  # this repository's, even before its .cogd/ exists
    deadline_s = _deadline_ms(root) / 1000
    remaining = deadline_s - (time.monotonic() - log.started)
    _Pending.deadline = log.started + deadline_s
    _arm(remaining)
    params = _params(event, payload, argv[1:], client)
    if event == "post-tool-use":
        _send_tool_use(root, encode_request(method, params), _Pending.deadline)
        return None
    try:
        if injects:
            result = _call_held(socket_path(root), method, params, timeout=max(remaining - SOCKET_MARGIN_S, 0.01))
        else:
            result = call(socket_path(root), method, params, timeout=max(remaining - SOCKET_MARGIN_S, 0.01),
                          limit=ANSWER_MAX_BYTES)
    except DaemonUnavailable as exc:
        if isinstance(exc.__cause__, TimeoutError):  # it is running, but its pack missed the deadline
            log(f"no answer within the hook deadline ({deadline_s * 1000:.0f} ms, [hook] deadline_ms): {exc}")
        else:
            log(f"daemon unavailable: {exc}")
        # A timeout means a daemon accepted the connection but answered late (overload): it
        # runs, so starting one only costs this hook ~10 ms of imports when CPU is scarcest.
        if injects and not isinstance(exc.__cause__, TimeoutError):
            _spawn_daemon(root)
        return None
    except RemoteError as exc:
        log(f"daemon refused the request ({exc.kind}): {exc}")
        return None
    if not injects or not isinstance(result, dict):
        return None
    text = result.get("text")
    if not isinstance(text, str) or not text:  # only this path logs: a pack delivered costs no write
        log(f"empty pack: {str(result.get('empty_reason') or 'no reason given')[:80]}")
        return None
    if len(text) > MAX_CONTEXT_CHARS:  # a client over its limit swaps the text for a preview: send nothing
        log(f"pack of {len(text)} characters is over {MAX_CONTEXT_CHARS}: not injected")
        return None
    return client.render(event, text)


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Always returns 0."""
    output = None
    try:
        os.umask(0o077)  # what the hook creates (its log, a daemon it starts) is private
        argv = sys.argv[1:] if argv is None else argv
        deadline_ms = parse_deadline_ms(os.environ.get(DEADLINE_ENV, "")) or DEFAULT_DEADLINE_MS
        _arm(deadline_ms / 1000 - (time.monotonic() - log.started))  # covers reading stdin too
        output = run(argv)
    except BaseException as exc:  # noqa: BLE001 — nothing may escape to the agent
        log(f"no context: {exc.__class__.__name__}: {str(exc)[:300]}")
        output = None
    printed = False
    quiet, _Pending.quiet = _Pending.quiet, None
    try:
        # No deadline from here: once the pack is printed, its acknowledgement must go out too.
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        # An expiry still pending behind a block (run() left early) is dropped, not delivered.
        _signal.signal(_signal.SIGALRM, _signal.SIG_IGN)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGALRM})
        if output:
            sys.stdout.write(output + "\n")
            sys.stdout.flush()
            printed = True
        elif quiet:  # nothing to inject, on every path (failures too): the client still wants its JSON
            sys.stdout.write(quiet + "\n")
            sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass
    try:
        _acknowledge(printed)
    except BaseException:  # noqa: BLE001
        pass
    return 0


def main_and_exit() -> None:
    """:func:`main`, then leave at once with status 0: what the ``cogd-hook`` command runs.

    ``os._exit`` skips the interpreter's finalisation (module teardown, garbage
    collection), about 1.5 ms of every hook. Nothing is lost: the log is written
    with its file closed, the socket is closed, and standard output is flushed here.
    Not for in-process callers: use :func:`main`.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 — e.g. the client closed the pipe
            pass
    os._exit(code)


if __name__ == "__main__":
    main_and_exit()
