"""Run the viewer: bind the loopback address, make this run's token, serve until interrupted.

The socket is bound here, to ``127.0.0.1`` only, before uvicorn gets it: the server never
listens on another address, so a request from another host cannot reach it at all (not even
to be refused). Port 0 takes a free port; the URL printed carries the port and the token.

The token never appears where another local user can read it. It is not in this process's
arguments or environment, and ``--open`` does not hand the tokened URL to the browser on its
command line (every user can read every process's arguments in ``/proc``): it writes a page
that forwards to the URL into ``.cogd/run/`` (mode 0600, in a 0700 folder) and opens that
file's path instead (:func:`launch_page`, which the command calls); the page is removed
when the viewer stops.

Another local user can connect to the port without the token and be refused; to stop one
who connects and never finishes a request from holding the connection (and a file
descriptor) forever, a connection has :data:`REQUEST_DEADLINE_S` to deliver a request's
head (:class:`DeadlineProtocol`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from html import escape
from pathlib import Path

from uvicorn.protocols.http.h11_impl import H11Protocol

from cogd import safepath
from cogd.paths import Layout
from cogd.ui.app import build_app
from cogd.ui.source import Source

HOST = "127.0.0.1"
TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 URL-safe characters, 256 bits
# A browser sends a request's head in one write; a loaded machine may delay it by seconds, not tens.
REQUEST_DEADLINE_S = 10.0


def bind(port: int) -> socket.socket:
    """A listening TCP socket on ``127.0.0.1:port`` (0: a free port). Raises OSError when the
    port is taken or not allowed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


class DeadlineProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection that has no request under way
    :data:`REQUEST_DEADLINE_S` seconds after it opened or after its first byte since the last
    answer (a client that trickles or withholds a request's head: a "slowloris").

    uvicorn closes an idle kept-alive connection itself (``timeout_keep_alive``), but not one
    that never completes a request's head. Relies on uvicorn's ``cycle`` (the request being
    answered) and ``transport``; uvicorn is pinned exactly in ``pyproject.toml``.
    """

    deadline_s = REQUEST_DEADLINE_S

    def connection_made(self, transport) -> None:  # noqa: D401 (asyncio's interface)
        self._deadline = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and not self._serving():
            self._arm()
        super().data_received(data)
        if self._serving():
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._deadline = asyncio.get_running_loop().call_later(self.deadline_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self._serving() and not self.transport.is_closing():
            self.transport.close()


def launch_page(layout: Layout, url: str) -> Path:
    """Write ``.cogd/run/ui-<pid>.html``, a page that forwards the browser to ``url`` (a meta
    refresh, with a link for a browser that ignores it), mode 0600 in the private run folder;
    returns its path. Raises :class:`~cogd.safepath.UnsafePath` for an unsafe ``.cogd/``, OSError."""
    safepath.check_chain(layout.run_dir, create=True)
    page = layout.run_dir / f"ui-{os.getpid()}.html"
    quoted = escape(url, quote=True)
    safepath.write_atomic(page, (
        '<!doctype html>\n<meta charset="utf-8">\n<meta name="referrer" content="no-referrer">\n'
        f'<meta http-equiv="refresh" content="0;url={quoted}">\n<title>cogd ui</title>\n'
        f'<p><a href="{quoted}">open cogd ui</a></p>\n').encode())
    return page


def serve(layout: Layout, port: int = 0, on_ready=None) -> None:
    """Serve the viewer of ``layout``'s daemon on ``127.0.0.1:port`` until interrupted.

    ``on_ready(url)`` is called once the socket listens, with the URL to open (token included).
    Raises OSError when the port cannot be bound.
    """
    import uvicorn

    sock = bind(port)
    bound = sock.getsockname()[1]
    token = secrets.token_urlsafe(TOKEN_BYTES)
    hosts = {f"{HOST}:{bound}", f"localhost:{bound}"}
    app = build_app(Source(layout), token, hosts)
    config = uvicorn.Config(app, http=DeadlineProtocol, log_level="warning", access_log=False,
                            server_header=False, proxy_headers=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        if on_ready is not None:
            on_ready(f"http://{HOST}:{bound}/?token={token}")
        server.run(sockets=[sock])
    finally:
        sock.close()
