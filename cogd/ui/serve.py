"""Run the viewer: bind the loopback address, make this run's token, serve until interrupted.

The socket is bound here, to ``127.0.0.1`` only, before uvicorn gets it: the server never
listens on another address, so a request from another host cannot reach it at all (not even
to be refused). Port 0 takes a free port; the URL printed carries the port and the token.
"""

from __future__ import annotations

import secrets
import socket

from cogd.paths import Layout
from cogd.ui.app import build_app
from cogd.ui.source import Source

HOST = "127.0.0.1"
TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 URL-safe characters, 256 bits


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
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            proxy_headers=False, lifespan="off")
    server = uvicorn.Server(config)
    if on_ready is not None:
        on_ready(f"http://{HOST}:{bound}/?token={token}")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
