"""``cogd ui`` under attack, without a browser: what another local user, a hostile web page and a
hostile repository can try against the real ``cogd ui`` command over real sockets.

One lexical-only daemon and one viewer for the module, on a repository crafted to attack it:
file names and docstrings holding markup, a bidirectional override and control characters, a
memory file whose title, body and anchor are markup, a prompt that is markup. Each test names
the attack it replays; the browser-level checks (nothing runs, nothing is fetched elsewhere)
are in ``tests/test_ui.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import COGD, HOOK_DEADLINE_MS, WAIT_S, Daemon, interruptible, lexical_only, make_repo, run_cogd, run_hook

SESSION = "attack-session"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "a\u202egnp.py" reads as "apng.py"
SPOOFED = f"pkg/a{RLO}gnp.py"
MARKUP_NAME = 'pkg/"><svg onload=alert(3)>.py'
PROMPT = "<script>alert(9)</script> count the words, SPOOF and MARKUP"
MEMORY_ID = "01JD6Y0M7Q3V9S2W1T0R8K4N5Q"
MEMORY = f"""---
id: {MEMORY_ID}
type: rule
title: '<svg/onload=alert(5)> x"><style>*{{display:none}}</style>'
status: active
created_at: '2026-11-30T10:12:00.000000Z'
updated_at: '2026-11-30T10:12:00.000000Z'
source: human
anchors:
- entity: '"><script>alert(7)</script>'
  hash: '<i>'
supersedes: ''
superseded_by: ''
tags: []
---

<script>alert(8)</script> {RLO}desrever
"""
CODE = '''def count_words(text):
    """</pre><svg onload=alert(1)> \u202e evil \x1b[31m red \x07 bell no\u200brmalise"""
    return len(text.split())
'''
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cache-control": "no-store",
                    "cross-origin-resource-policy": "same-origin", "cross-origin-opener-policy": "same-origin"}
# What markup injected into a page would look like if it were not escaped.
LIVE_MARKUP = re.compile(r"<\s*(script|style|svg/|svg\s+onload|img|iframe|object|embed|b>|i>)|<[a-z][^>]*\son\w+\s*=", re.I)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The hostile repository after a session whose prompt is markup; its daemon stopped at the end."""
    root = make_repo(tmp_path_factory.mktemp("ui-attack") / "repo", {
        "pkg/__init__.py": "", "pkg/words.py": CODE, SPOOFED: "SPOOF = 1\n", MARKUP_NAME: "MARKUP = 2\n",
        f".cogd/memory/rules/{MEMORY_ID}.md": MEMORY})
    lexical_only(root)
    daemon = Daemon(root)
    try:
        daemon.start()
        base = {"session_id": SESSION, "cwd": str(root)}
        for event, extra in (("session-start", {"hook_event_name": "SessionStart", "source": "startup"}),
                             ("prompt-submit", {"hook_event_name": "UserPromptSubmit", "prompt": PROMPT})):
            proc, _ = run_hook(event, {**base, **extra}, deadline_ms=HOOK_DEADLINE_MS)
            assert proc.returncode == 0, proc.stderr
        yield root
    finally:
        daemon.stop()


def start_viewer(root: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, dict]:
    """The real ``cogd ui --port 0 *args`` in ``root``: (process, {base, port, token})."""
    proc = subprocess.Popen([COGD, "ui", "--port", "0", *args], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=interruptible)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(WAIT_S)
    found = re.search(r"(http://127\.0\.0\.1:(\d+))/\?token=([\w-]+)", line[0] if line else "")
    if not found:
        stop_viewer(proc)
        pytest.fail(f"cogd ui printed no URL: {line!r}")
    return proc, {"base": found.group(1), "port": int(found.group(2)), "token": found.group(3), "pid": proc.pid}


def stop_viewer(proc: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C ``proc``; its (rest of standard output, standard error)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


@pytest.fixture(scope="module")
def viewer(repo):
    proc, found = start_viewer(repo)
    try:
        yield {**found, "proc": proc}
    finally:
        _, errors = stop_viewer(proc)
        assert found["token"] not in errors  # uvicorn's warnings about the malformed requests below
        assert proc.returncode == 0, errors


def url(viewer: dict, path: str, **query) -> str:
    return viewer["base"] + path + "?" + urllib.parse.urlencode({**query, "token": viewer["token"]})


def fetch(target: str, headers: dict | None = None) -> tuple[int, str, dict]:
    """(status, body, lower-cased headers) of one GET, redirects not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(target, headers=headers or {}), timeout=60) as answer:
            return answer.status, answer.read().decode(), {k.lower(): v for k, v in answer.headers.items()}
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), {k.lower(): v for k, v in refused.headers.items()}


def raw(port: int, data: bytes, timeout: float = 30) -> bytes:
    """What the server answers ``data`` sent as is on a new connection (until it closes it:
    every request here says ``Connection: close``, and a malformed one is answered and closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        try:
            conn.sendall(data)  # no shutdown(SHUT_WR): asyncio closes a half-closed connection unanswered
        except (BrokenPipeError, ConnectionResetError):
            return b""
        out = b""
        try:
            while chunk := conn.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def request(viewer: dict, target: str, host: str | None = None, extra: str = "") -> bytes:
    host = host or f"127.0.0.1:{viewer['port']}"
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode("latin-1")


def stats(root: Path) -> dict:
    return json.loads(run_cogd(root, "stats", "--json").stdout)


# ---------------------------------------------------------------- another local user

def _readable_by_others(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o077)


def test_the_token_is_in_no_process_argument_environment_log_or_file_others_can_read(repo, viewer):
    """``ps`` shows every process's arguments to every user: the token is not in the viewer's
    (nor in its environment); no file of the repository holds it; its log lines do not."""
    token = viewer["token"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # token_urlsafe(32): 256 random bits
    cmdline = Path(f"/proc/{viewer['pid']}/cmdline").read_bytes()
    assert b"cogd" in cmdline and token.encode() not in cmdline
    assert token.encode() not in Path(f"/proc/{viewer['pid']}/environ").read_bytes()
    fetch(url(viewer, "/nope"))  # a 404 and a refusal: neither is logged with its URL
    fetch(viewer["base"] + "/?token=" + token, headers={"Host": "evil.example"})
    holders = [p for p in repo.rglob("*") if p.is_file() and not p.is_symlink() and token.encode() in p.read_bytes()]
    assert holders == []
    assert _readable_by_others(repo / ".cogd") is False


def test_open_puts_no_token_on_the_browser_command_line(repo, tmp_path):
    """``--open`` used to run the browser with the tokened URL as its argument, readable by every
    user in ``/proc/PID/cmdline`` for as long as the browser runs. Now the browser is given a
    private page (0600 in the 0700 ``.cogd/run/``) that forwards to the URL, removed at the end."""
    opened = tmp_path / "argv.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$*" > {opened}.tmp && mv {opened}.tmp {opened}\n')
    browser.chmod(0o755)
    proc, found = start_viewer(repo, "--open", env={**os.environ, "BROWSER": f"{browser} %s"})
    try:
        deadline = time.monotonic() + WAIT_S
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = opened.read_text()
        assert found["token"] not in argv
        page = Path(urllib.parse.urlparse(argv).path)
        assert argv == page.as_uri() and page.parent == repo / ".cogd" / "run"
        assert stat.S_IMODE(page.stat().st_mode) == 0o600 and stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        target = f"{found['base']}/?token={found['token']}"
        assert f'<meta http-equiv="refresh" content="0;url={target}">' in page.read_text()
    finally:
        out, errors = stop_viewer(proc)
    assert proc.returncode == 0 and "cogd ui stopped" in out, errors
    assert not page.exists()


def test_open_with_an_unsafe_run_folder_writes_nothing_through_it(tmp_path):
    """A ``.cogd/run`` that is a symbolic link (a hostile checkout's) is not written through:
    ``cogd ui --open`` refuses at once, naming it, before any token, page or browser exists."""
    root = make_repo(tmp_path / "repo", {"a.py": "A = 1\n"})
    (root / ".cogd").mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (root / ".cogd" / "run").symlink_to(tmp_path / "elsewhere")
    opened = tmp_path / "argv.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$*" > {opened}\n')
    browser.chmod(0o755)
    proc = subprocess.run([COGD, "ui", "--open"], cwd=root, capture_output=True, text=True, timeout=WAIT_S,
                          env={**os.environ, "BROWSER": f"{browser} %s"})
    assert proc.returncode == 1 and "token=" not in proc.stdout, proc
    assert f"refusing {root / '.cogd' / 'run'}: it is a symbolic link" in proc.stderr
    assert not opened.exists() and list((tmp_path / "elsewhere").iterdir()) == []


def test_each_run_has_its_own_token_and_port(repo, viewer, tmp_path):
    proc, other = start_viewer(repo)
    stop_viewer(proc)
    assert other["token"] != viewer["token"] and other["port"] != viewer["port"]


def test_a_connection_that_never_finishes_its_request_is_closed(repo):
    """A local user who opens connections and never completes a request (a "slowloris") held
    each one, and a file descriptor of the viewer, forever. The real app behind the real protocol
    class, with a 1-second deadline; a normal client on a kept-alive connection is not affected."""
    import uvicorn

    from cogd.paths import Layout
    from cogd.ui import serve
    from cogd.ui.app import build_app
    from cogd.ui.source import Source

    class Quick(serve.DeadlineProtocol):
        deadline_s = 1.0

    sock = serve.bind(0)
    port = sock.getsockname()[1]
    app = build_app(Source(Layout(repo), start=False), "t" * 43, {f"127.0.0.1:{port}"})
    server = uvicorn.Server(uvicorn.Config(app, http=Quick, log_level="warning", access_log=False, lifespan="off",
                                           timeout_keep_alive=30))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        head = f"GET /static/style.css?token={'t' * 43} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        silent = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        trickle = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        trickle.sendall(head[:20])
        kept = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        started = time.monotonic()
        for _ in range(2):  # two requests on one connection, 1.5 s apart: past the deadline, yet served
            kept.sendall(head)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += kept.recv(65536)
            length = int(re.search(rb"content-length: (\d+)", answer).group(1))
            while len(answer.split(b"\r\n\r\n", 1)[1]) < length:
                answer += kept.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
            time.sleep(1.5)
        for conn in (silent, trickle):
            assert conn.recv(100) == b""  # closed by the server
        assert time.monotonic() - started < WAIT_S
        kept.close()
        silent.close()
        trickle.close()
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


# ---------------------------------------------------------------- a hostile web page

def test_a_foreign_host_or_origin_is_refused(viewer):
    """DNS rebinding (another name for 127.0.0.1 in the Host header) and a script of another page
    (its Origin header) are refused with 403 even with the right token; the viewer's own pass."""
    port = viewer["port"]
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port}.evil.example", "127.0.0.1",
                 f"127.0.0.2:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}", ""):
        assert fetch(url(viewer, "/"), headers={"Host": host})[0] == 403, host
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}",
                   f"http://evil.example:{port}"):
        status, body, headers = fetch(url(viewer, "/"), headers={"Origin": origin})
        assert status == 403 and "another site" in body and headers["content-security-policy"] == CSP, origin
    for own in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert fetch(url(viewer, "/"), headers={"Origin": own})[0] == 200, own


def test_every_answer_carries_the_security_headers(viewer):
    """Pages, refusals, errors, static files, a redirect: no script from anywhere, no framing
    (clickjacking), no sniffing, no referrer (the token is in every URL), no caching."""
    answers = {
        "page": fetch(url(viewer, "/")), "static": fetch(url(viewer, "/static/style.css")),
        "no token": fetch(viewer["base"] + "/"), "unknown route": fetch(url(viewer, "/nope")),
        "unknown entity": fetch(url(viewer, "/entity", id="nope::nope")),
        "redirect": fetch(url(viewer, "/memory/")),
    }
    assert {name: a[0] for name, a in answers.items()} == {
        "page": 200, "static": 200, "no token": 403, "unknown route": 404, "unknown entity": 404, "redirect": 307}
    for name, (_, _, headers) in answers.items():
        assert {k: headers.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS, name
    assert answers["page"][2]["content-type"] == "text/html; charset=utf-8"
    assert answers["static"][2]["content-type"] == "text/css; charset=utf-8"
    assert "access-control-allow-origin" not in answers["page"][2]  # no cross-origin read


def test_no_redirect_leaves_the_viewer(viewer):
    """The only redirect (a trailing slash) stays on the viewer's own origin; paths that look
    like another host are plain 404s."""
    status, _, headers = fetch(url(viewer, "/memory/"))
    assert status == 307 and headers["location"] == url(viewer, "/memory")
    for path in ("//evil.example/", "//evil.example/memory/", "/\\evil.example/", "/%2F%2Fevil.example/",
                 "/static/..%2F..%2Fapp.py"):
        answer = raw(viewer["port"], request(viewer, f"{path}?token={viewer['token']}"))
        assert answer.startswith(b"HTTP/1.1 404 "), (path, answer[:200])


# ---------------------------------------------------------------- a hostile repository

def _pages(viewer: dict, repo: Path) -> dict[str, str]:
    """Every page, with the hostile entities, memory and session: {path: html}."""
    targets = {
        "/": url(viewer, "/"), "/sessions": url(viewer, "/sessions"),
        "/session": url(viewer, "/session", id=SESSION, explain="2"), "/code": url(viewer, "/code"),
        "/entity": url(viewer, "/entity", id="pkg/words.py::count_words"),
        "/entity spoofed": url(viewer, "/entity", id=SPOOFED),
        "/entity markup": url(viewer, "/entity", id=MARKUP_NAME),
        "/memory": url(viewer, "/memory"), "/memory/item": url(viewer, "/memory/item", id=MEMORY_ID),
        "/ask": url(viewer, "/ask", q=PROMPT),
        "/entity unknown": url(viewer, "/entity", id="<img src=x onerror=alert(10)>"),
        "/memory filter": url(viewer, "/memory", type="<b>x</b>", status='"><script>alert(11)</script>'),
    }
    out = {}
    for name, target in targets.items():
        status, body, _ = fetch(target)
        assert status == (404 if name == "/entity unknown" else 200), (name, status, body[:300])
        out[name] = body
    return out


def test_markup_from_the_repository_and_the_address_bar_is_text(viewer, repo):
    """File names, docstrings, a memory's title, body and anchor, a prompt, query parameters:
    every one is escaped on every page that shows it, charts included."""
    pages = _pages(viewer, repo)
    for name, html in pages.items():
        main = html[html.index("<main>"):]
        assert not LIVE_MARKUP.search(main), (name, LIVE_MARKUP.search(main).group(0))
    assert "&lt;svg/onload=alert(5)&gt;" in pages["/memory/item"] and "&lt;script&gt;alert(8)" in pages["/memory/item"]
    assert "&lt;script&gt;alert(9)&lt;/script&gt;" in pages["/session"] and "alert(9)" in pages["/ask"]
    assert "&lt;/pre&gt;&lt;svg onload=alert(1)&gt;" in pages["/entity"]
    assert "&lt;img src=x onerror=alert(10)&gt;" in pages["/entity unknown"]
    assert "&lt;b&gt;x&lt;/b&gt;" in pages["/memory filter"]
    svg = pages["/code"][pages["/code"].index("<svg"):]
    assert "&#34;&gt;&lt;svg onload=alert(3)&gt;.py" in svg  # the chart's label of the file with a markup name


def test_hidden_characters_are_shown_as_code_points(viewer, repo):
    """A right-to-left override in a file name (``a<RLO>gnp.py`` reads "apng.py"), an escape
    sequence, a bell and a zero width space in a docstring used to reach the page as they are,
    invisible or reordering the text; they are shown as ``⟨U+202E⟩``, ``⟨U+001B⟩``, ``⟨U+0007⟩``,
    ``⟨U+200B⟩``."""
    pages = _pages(viewer, repo)
    for name, html in pages.items():
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b\u202a-\u202e\u2066-\u2069]", html), name
    assert "pkg/a⟨U+202E⟩gnp.py" in pages["/entity spoofed"]
    assert "pkg/a⟨U+202E⟩gnp.py" in pages["/code"][pages["/code"].index("<svg"):]  # the chart's label too
    assert "⟨U+202E⟩ evil ⟨U+001B⟩[31m red ⟨U+0007⟩ bell no⟨U+200B⟩rmalise" in pages["/entity"]
    assert "⟨U+202E⟩desrever" in pages["/memory/item"]
    # the link to the entity still carries its real id
    assert urllib.parse.urlencode({"id": SPOOFED}) in pages["/code"]


def test_malformed_and_huge_requests_get_a_clear_4xx_and_the_server_keeps_answering(repo, viewer):
    """Each is refused with a 4xx (never a 5xx, never a hang), the viewer answers the next
    request, and nothing of it (nor a 60 kB prompt in Ask) wrote to the ledger or the memory events."""
    token, port = viewer["token"], viewer["port"]
    cases = [  # (what, the bytes sent, the status expected)
        ("garbage", b"\x00\xff\xfe garbage\r\n\r\n", b"400"),
        ("a control character in the method", b"G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),
        ("raw bytes that are not a URL", request(viewer, f"/entity?id=\xff\xfe&token={token}"), b"400"),
        ("percent-encoded junk: an unknown id", request(viewer, f"/entity?id=%ff%fe%00&token={token}"), b"404"),
        ("two Host headers", request(viewer, f"/?token={token}", extra="Host: evil.example\r\n"), b"400"),
        ("no Host at all", f"GET /?token={token} HTTP/1.0\r\n\r\n".encode(), b"403"),
        ("a 200 kB header", request(viewer, f"/?token={token}", extra="X: " + "a" * 200_000 + "\r\n"), b"400"),
        ("a broken chunked body",
         request(viewer, f"/?token={token}", extra="Transfer-Encoding: chunked\r\n") + b"zz\r\n", b"400"),
        ("a 20 kB entity id (the daemon's limit)", request(viewer, f"/entity?id={'a' * 20_000}&token={token}"), b"400"),
        ("a 20 kB session id (the ledger's limit)", request(viewer, f"/session?id={'a' * 20_000}&token={token}"),
         b"400"),
        ("a 1 MB prompt (uvicorn's limit)", request(viewer, f"/ask?q={'a' * 1_000_000}&token={token}"), b"400"),
        ("5,000 NULs as a memory id", request(viewer, f"/memory/item?id={'%00' * 5000}&token={token}"), b"404"),
    ]
    before, events = stats(repo), run_cogd(repo, "events", "--json").stdout
    got = {what: raw(port, data).split(b"\r\n", 1)[0].split(b" ")[1:2] for what, data, _ in cases}
    assert got == {what: [status] for what, _, status in cases}
    status, body, _ = fetch(url(viewer, "/ask", q="count " * 10_000))  # a 60 kB prompt: answered
    assert status == 200 and 'id="pack-meta"' in body
    assert fetch(url(viewer, "/"))[0] == 200
    assert viewer["proc"].poll() is None
    assert stats(repo)["ledger"] == before["ledger"]  # Ask and explain recorded nothing
    assert run_cogd(repo, "events", "--json").stdout == events
