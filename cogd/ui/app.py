"""The viewer's ASGI application: a guard in front of read-only routes.

The guard (:class:`Guard`) checks every request before any route sees it: the ``Host`` header
must name the loopback address the server listens on (a page of another site that rebinds
its name to 127.0.0.1 is refused), an ``Origin`` header, when a browser sends one, must be
the viewer's own (a script of another page is refused even before the token is looked at),
the ``token`` query parameter must equal this run's token (compared in constant time; 403
otherwise), and the method must be GET or HEAD (405 otherwise: there is no write endpoint at
all). Every answer carries a Content-Security-Policy of ``default-src 'none'`` with only the
package's own stylesheet and images allowed (no script at all, from anywhere; no frame, font,
fetch or form target elsewhere), no referrer (the token is in every URL) and no caching.
Templates escape every value (Jinja2's autoescape) and show hidden characters as their code
points (:mod:`cogd.ui.visible`); static files are a fixed table read from the package at
start, so a request's path never reaches the file system.
"""

from __future__ import annotations

import secrets
import time
from importlib import resources
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from cogd.ages import format_age
from cogd.errors import CogdError
from cogd.rpc.client import DaemonUnavailable
from cogd.ui import pages, visible
from cogd.ui.source import Source

CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
READ_ONLY = ("GET", "HEAD")
ERROR_STATUS = {"not_found": 404, "bad_request": 400, "unavailable": 503, "busy": 503}  # else 502
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


class Guard:
    """ASGI middleware: Host, Origin, token and method checks, then the security headers on every answer.

    ``token``: this run's secret (``secrets.token_urlsafe``); ``hosts``: the ``Host`` header
    values accepted (``127.0.0.1:PORT``, ``localhost:PORT``); an ``Origin`` header, if any, must
    be ``http://`` and one of them. Websockets and anything but HTTP are closed unanswered.
    """

    def __init__(self, app, token: str, hosts: set[str]):
        self.app = app
        self.token = token.encode()
        self.hosts = hosts
        self.origins = {f"http://{host}" for host in hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        headers = dict(scope.get("headers") or [])
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0].encode("utf-8")
        if headers.get(b"host", b"").decode("latin-1") not in self.hosts:
            return await _plain(with_headers, 403, "forbidden: unknown Host (open the URL cogd ui printed)")
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1") not in self.origins:
            return await _plain(with_headers, 403, "forbidden: a request from another site's page")
        if not secrets.compare_digest(given, self.token):
            return await _plain(with_headers, 403, "forbidden: this page needs the token cogd ui printed in its URL")
        if scope["method"] not in READ_ONLY:
            return await _plain(with_headers, 405, "method not allowed: the viewer is read-only",
                                [(b"allow", b"GET, HEAD")])
        return await self.app(scope, receive, with_headers)


async def _plain(send, status: int, text: str, extra: list | None = None) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def load_static() -> dict[str, tuple[bytes, str]]:
    """``{name: (bytes, content type)}`` of every file in the package's ``static/`` folder."""
    out = {}
    for entry in resources.files("cogd.ui").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in STATIC_TYPES:
            out[entry.name] = (entry.read_bytes(), STATIC_TYPES[suffix])
    return out


def templates(token: str) -> Environment:
    """The page templates, autoescaped, hidden characters shown (:func:`cogd.ui.visible.finalize`), with ``u(path, **query)`` (a URL carrying the token)
    and the formatting helpers as globals."""
    env = Environment(loader=PackageLoader("cogd.ui", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, finalize=visible.finalize)

    def u(path: str, **query) -> str:
        pairs = [(k, v) for k, v in query.items() if v is not None and v != ""]
        return path + "?" + urlencode([*pairs, ("token", token)])

    env.globals.update(u=u, when=_when, age=_age, pct=_pct, token_value=token)
    return env


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at else "–"


def _age(seconds: float | None) -> str:
    """An age as ``cogd status`` writes it (:func:`cogd.ages.format_age`), ``–`` when unknown."""
    return "–" if seconds is None else format_age(seconds)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def build_app(source: Source, token: str, hosts: set[str]) -> Guard:
    """The viewer for ``source``'s daemon behind :class:`Guard` (``token``, ``hosts`` as there)."""
    env = templates(token)
    static = load_static()

    def page(render):
        def endpoint(request: Request) -> Response:
            q = request.query_params
            try:
                name, context = render(q)
            except DaemonUnavailable as exc:
                return _error(env, 503, f"the daemon did not answer: {exc.line()}")
            except CogdError as exc:  # a refusal of the daemon's, or of the start (an unsafe .cogd/)
                return _error(env, ERROR_STATUS.get(exc.kind, 502), exc.line())
            return HTMLResponse(env.get_template(name).render(**context, now=time.time(), page=request.url.path))
        return endpoint

    def static_file(request: Request) -> Response:
        found = static.get(request.path_params["name"])
        if found is None:
            return Response("not found\n", 404, media_type="text/plain")
        return Response(found[0], media_type=found[1])

    routes = [
        Route("/", page(lambda q: pages.overview(source))),
        Route("/sessions", page(lambda q: pages.sessions(source, q.get("page", "")))),
        Route("/session", page(lambda q: pages.session(source, q.get("id", ""), q.get("explain", "")))),
        Route("/code", page(lambda q: pages.code(source, q.get("sort", ""), q.get("order", "")))),
        Route("/entity", page(lambda q: pages.entity(source, q.get("id", "")))),
        Route("/memory", page(lambda q: pages.memory(source, q.get("type", ""), q.get("status", ""), q.get("page", "")))),
        Route("/memory/item", page(lambda q: pages.memory_item(source, q.get("id", "")))),
        Route("/ask", page(lambda q: pages.ask(source, q.get("q", "")))),
        Route("/static/{name}", static_file),
    ]
    return Guard(Starlette(routes=routes), token, hosts)


def _error(env: Environment, code: int, message: str) -> Response:
    return HTMLResponse(env.get_template("error.html").render(code=code, message=message, now=time.time(),
                                                              page=""), status_code=code)
