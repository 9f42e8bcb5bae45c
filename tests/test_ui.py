"""``cogd ui`` end to end: a real daemon on a small real repository, real deliveries and hits made
by real ``cogd-hook`` processes, the real ``cogd ui`` command, and Debian's Chromium driven by
Playwright's API (never a downloaded browser).

One daemon, one viewer and one browser for the module. Every page is loaded in the browser with
no console error and no request other than a GET to the viewer itself, its numbers are checked
against ``cogd stats --json``, ``cogd status --json`` and ``cogd show --json``, and a screenshot
of it is saved under the module's temporary folder (the path is printed). The security checks
(token, methods, Host, static paths, loopback only) need no browser and run without one.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import (COGD, HOOK_DEADLINE_MS, WAIT_S, Daemon, interruptible, lexical_only, make_repo, run_cogd,
                      run_hook, wait_for)

CHROMIUM = Path("/usr/bin/chromium")
# Chromium's own background traffic (updates, sync, field trials) fails on a closed network and
# would print errors of its own; a fresh profile per run keeps earlier state out.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SESSION = "ui-session-1"
XSS = "<img src=x onerror=alert(1)>"  # a name a repository may hold; no slash, so it is a file name
XSS_DOC = "</pre><script>alert(2)</script>"

USERS = '''from pkg.core import normalise, tokenise


def count_words(text):
    """How many words the text holds."""
    return len(tokenise(text))


def shout(text):
    """The text in capitals."""
    return normalise(text).upper()
'''
CORE = '''"""Core helpers everyone uses."""


def normalise(text):
    """Fold case and spaces."""
    return " ".join(text.lower().split())


def tokenise(text):
    """Split normalised text into words."""
    return normalise(text).split()
'''
ODD = f'''def odd_payload():
    """{XSS_DOC}"""
    return "{XSS}"
'''


def hook(event: str, data: dict) -> str:
    """Run the real hook with a generous deadline; its standard output."""
    proc, _ = run_hook(event, data, deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def read(root: Path, rel: str, start: int, lines: int) -> dict:
    """A PostToolUse payload of a Read of ``lines`` lines of ``rel`` from ``start``."""
    path = str(root / rel)
    return {"session_id": SESSION, "cwd": str(root), "hook_event_name": "PostToolUse", "tool_name": "Read",
            "tool_input": {"file_path": path, "offset": start, "limit": lines},
            "tool_response": {"type": "text", "file": {"filePath": path, "content": "…", "numLines": lines,
                                                       "startLine": start, "totalLines": 12}},
            "tool_use_id": f"toolu_{rel}_{start}"}


def cogd_json(root: Path, *args: str) -> dict:
    return json.loads(run_cogd(root, *args, "--json").stdout)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The repository after a session: a startup pack, two prompt packs, a Read that hits, the end;
    a human rule with an XSS title, an agent candidate, a rejected claim (a tombstone)."""
    root = make_repo(tmp_path_factory.mktemp("ui") / "repo",
                     {"pkg/__init__.py": "", "pkg/core.py": CORE, "pkg/users.py": USERS, f"pkg/{XSS}.py": ODD})
    lexical_only(root)
    daemon = Daemon(root)
    try:
        daemon.start()
        base = {"session_id": SESSION, "cwd": str(root)}
        assert "repository map" in hook("session-start", {**base, "hook_event_name": "SessionStart", "source": "startup"})
        assert "count_words" in hook("prompt-submit", {**base, "hook_event_name": "UserPromptSubmit",
                                                        "prompt": "count the words in a text"})
        hook("post-tool-use", read(root, "pkg/users.py", 4, 3))  # count_words' lines: a hit
        hook("prompt-submit", {**base, "hook_event_name": "UserPromptSubmit", "prompt": "shout the text in capitals"})
        hook("session-end", {**base, "hook_event_name": "SessionEnd", "reason": "other"})
        # Memories through the daemon's socket, as the MCP server and the CLI write them (one
        # process per CLI call would cost a second each on a loaded machine).
        from cogd.paths import Layout
        from cogd.rpc.client import call

        def rpc(method: str, **params):
            return call(Layout(root).socket_path, method, params, timeout=60)

        rule = rpc("memory.record", type="rule", text=f"Never trust {XSS} in names", title=f"Rule {XSS}",
                   anchors=["pkg/core.py::normalise"], source="human", actor="human")["record"]
        candidate = rpc("memory.record", type="observation", text="tokenise splits on spaces only",
                        title="tokenise splits on spaces")["record"]  # an agent's: a candidate
        doomed = rpc("memory.record", type="knowledge", text="shout returns lower case", title="shout is lower case",
                     source="human", actor="human")["record"]
        rpc("memory.transition", id=doomed["id"], status="rejected", reason="it returns upper case", actor="human")
        secret = rpc("memory.record", type="knowledge", text="an address that must be erased", title="to be erased",
                     source="human", actor="human")["record"]
        rpc("memory.purge", id=secret["id"])
        yield {"root": root, "rule": rule, "candidate": candidate, "rejected": doomed, "erased": secret,
               "ledger": rpc("stats")["ledger"], "events": rpc("memory.events")["events"]}
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def viewer(repo, tmp_path_factory):
    """The real ``cogd ui --port 0``: ``{"base": http://127.0.0.1:PORT, "token", "port"}``; stopped at the end
    (its standard error goes to a file, printed when it says anything)."""
    errors = tmp_path_factory.mktemp("ui-server") / "stderr.txt"
    with open(errors, "w") as sink:
        proc = subprocess.Popen([COGD, "ui", "--port", "0"], cwd=repo["root"], stdout=subprocess.PIPE,
                                stderr=sink, text=True, preexec_fn=interruptible)
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(WAIT_S)
        found = re.search(r"(http://127\.0\.0\.1:(\d+))/\?token=([\w-]+)", line[0] if line else "")
        assert found, f"cogd ui printed no URL: {line!r}"
        yield {"base": found.group(1), "port": int(found.group(2)), "token": found.group(3), "proc": proc}
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: uvicorn's own shutdown
        try:
            rest, _ = proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        if errors.read_text().strip():
            print(f"cogd ui's standard error ({errors}):\n{errors.read_text()}")
    assert proc.returncode == 0 and "cogd ui stopped" in rest, (proc.returncode, rest)


def url(viewer: dict, path: str, token: str | None = "") -> str:
    token = viewer["token"] if token == "" else token
    if token is None:
        return viewer["base"] + path
    return viewer["base"] + path + ("&" if "?" in path else "?") + "token=" + token


def fetch(target: str, method: str = "GET", headers: dict | None = None) -> tuple[int, str, dict]:
    """(status, body, headers) of one plain HTTP request (no browser)."""
    request = urllib.request.Request(target, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), dict(refused.headers)


# ---------------------------------------------------------------- the browser

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium for the module (Debian's, through Playwright's API); skipped with the
    reason when it is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    driver = playwright_api.sync_playwright().start()
    try:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()
    finally:
        driver.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ui-screenshots")


def visit(browser, viewer: dict, shots: Path, path: str, name: str):
    """Load ``path`` in a new tab; assert no console error, no page error, no dialog (an injected
    script would open one), and no request but GETs to the viewer. Saves ``name``.png in ``shots``."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: None if r.method == "GET" and r.url.startswith(viewer["base"] + "/")
            else problems.append(f"request {r.method} {r.url}"))
    answer = page.goto(url(viewer, path), wait_until="load")
    assert answer is not None and answer.status == 200, (path, answer and answer.status)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    print(f"screenshot: {shots / (name + '.png')}")
    assert not problems, problems
    return page


def text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def test_overview_shows_the_ledger_and_the_index(repo, viewer, browser, shots):
    stats, status = cogd_json(repo["root"], "stats"), cogd_json(repo["root"], "status")
    # the session above, as the ledger holds it: the Read hit count_words in the map and in the first prompt pack
    assert (stats["deliveries"], stats["hits"], stats["misses"]) == (3, 2, 11)
    page = visit(browser, viewer, shots, "/", "overview")
    assert text(page, "#deliveries") == str(stats["deliveries"])
    assert text(page, "#hits") == str(stats["hits"])
    assert text(page, "#misses") == str(stats["misses"])
    assert text(page, "#pending") == str(stats["ledger"]["pending"])
    assert text(page, "#hit-rate") == f"{stats['hit_rate']:.1%}"
    assert text(page, "#index-files") == str(status["index"]["files"])
    assert text(page, "#index-entities") == str(status["index"]["entities"])
    assert text(page, "#daemon-pid") == str(status["pid"])
    assert text(page, "#embed-state").startswith(status["embedding"]["state"])
    assert text(page, "#daemon-watch") == status["watch"]["mode"]
    assert text(page, "#ledger-state") == status["recovery"]["ledger"]["state"]
    assert page.locator("#problems").count() == (1 if status["errors"] else 0)
    # one day of deliveries: its row adds up to the totals, and every chart is drawn
    cells = page.locator("#days tbody tr").first.locator("td").all_inner_texts()
    assert cells[1:5] == [str(stats["deliveries"]), str(stats["hits"]), str(stats["misses"]),
                          str(stats["ledger"]["pending"])]
    assert page.locator("svg.chart").count() == 4
    assert page.locator("svg.chart circle.dot").count() == 2  # a day and a session, one point each
    page.close()


def test_sessions_show_each_delivery_with_outcomes_and_evidence(repo, viewer, browser, shots):
    stats = cogd_json(repo["root"], "stats")  # also: explain ranks a pack's prompt again, recording nothing
    page = visit(browser, viewer, shots, "/sessions", "sessions")
    row = page.locator("#session-list tbody tr").first.locator("td").all_inner_texts()
    assert row[0] == SESSION
    assert row[3:8] == [str(stats["deliveries"]), str(stats["ledger"]["delivery_items"]), str(stats["hits"]),
                        str(stats["misses"]), str(stats["ledger"]["pending"])]
    page.locator("#session-list a").first.click()
    page.wait_for_load_state("load")
    page.screenshot(path=str(shots / "session.png"), full_page=True)
    print(f"screenshot: {shots / 'session.png'}")
    assert page.locator("section.delivery").count() == 3
    hits = page.locator("tr.outcome-hit")
    assert hits.count() == stats["hits"] == 2
    for n in range(2):
        cells = hits.nth(n).locator("td").all_inner_texts()
        assert cells[1] == "pkg/users.py::count_words"
        assert re.fullmatch(r"Read lines 4–6 at [-\d: ]+UTC", cells[6])  # the tool use that made the hit
    assert page.locator("tr.outcome-miss").count() == stats["misses"]
    assert page.locator("#tool-uses tbody tr").count() == 1
    page.locator("#delivery-3 a.explain").click()  # the last prompt, ranked again now
    page.wait_for_load_state("load")
    page.screenshot(path=str(shots / "session_explained.png"), full_page=True)
    now = cogd_json(repo["root"], "context", "shout the text in capitals")
    ranks = {item["entity_id"]: item["rank"] for item in now["items"]}
    rows = page.locator("#delivery-3 tbody tr")
    for n in range(rows.count()):
        cells = rows.nth(n).locator("td").all_inner_texts()
        expected = f"#{ranks[cells[1]]} " if cells[1] in ranks else "not in today's pack"
        assert cells[9].startswith(expected), cells
        assert "bm25_rank=" in cells[8] or "vector_rank=" in cells[8], cells  # kept from the delivery itself
    assert "bm25_rank=" in page.locator("#delivery-3 td.signals").first.inner_text()
    assert page.locator("#delivery-2 td.delivered-signals").count() == page.locator("#delivery-2 tbody tr").count()
    assert page.locator("#delivery-2 td.signals").count() == 0  # only the delivery asked for
    page.locator("#delivery-3 a", has_text="open in Ask").click()
    page.wait_for_load_state("load")
    assert page.locator("#q").input_value() == "shout the text in capitals"
    assert page.locator("#pack-items tbody td:nth-child(2)").all_inner_texts() == [i["entity_id"] for i in now["items"]]
    page.close()


def test_code_page_sorts_files_by_their_usage(repo, viewer, browser, shots):
    root = repo["root"]
    with sqlite3.connect(f"file:{root / '.cogd' / 'state.db'}?mode=ro", uri=True) as conn:
        delivered = [r[0] for r in conn.execute(
            "SELECT DISTINCT entity_id FROM delivery_items WHERE path = 'pkg/users.py'")]
    shown = [cogd_json(root, "show", entity) for entity in delivered]
    page = visit(browser, viewer, shots, "/code?sort=used_count&order=desc", "code")
    first = page.locator("#files tbody tr").first.locator("td").all_inner_texts()
    assert first[0] == "pkg/users.py"  # the one file with a hit, first by hits
    assert first[1:5] == [str(len(delivered)), str(sum(s["retrieval_count"] for s in shown)),
                          str(sum(s["used_count"] for s in shown)), str(sum(s["ignored_count"] for s in shown))]
    paths = page.locator("#files tbody tr td:first-child").all_inner_texts()
    page.goto(url(viewer, "/code?sort=path&order=asc"))
    assert page.locator("#files tbody tr td:first-child").all_inner_texts() == sorted(paths)
    assert page.locator("svg.chart rect.bar").count() == len(paths)
    page.close()


def test_entity_page_matches_cogd_show(repo, viewer, browser, shots):
    shown = cogd_json(repo["root"], "show", "pkg/users.py::count_words")
    page = visit(browser, viewer, shots, "/entity?id=pkg/users.py::count_words", "entity")
    assert text(page, "#retrieval-count") == str(shown["retrieval_count"])
    assert text(page, "#used-count") == str(shown["used_count"]) == "2"
    assert text(page, "#ignored-count") == str(shown["ignored_count"])
    assert text(page, "#utility") == f"{shown['utility']:.4f}"
    assert "pkg/core.py::tokenise" in text(page, "#callees")
    assert "return len(tokenise(text))" in text(page, "#source")
    page.close()


def test_memory_pages_show_history_anchors_and_tombstones(repo, viewer, browser, shots):
    page = visit(browser, viewer, shots, "/memory", "memory")
    assert [t.strip() for t in page.locator("#tombstones tbody td:nth-child(4)").all_inner_texts()] == [
        "it returns upper case"]
    page.locator("#candidates-filter").click()
    page.wait_for_load_state("load")
    assert page.locator("#memories tbody tr").all_inner_texts()[0].startswith("tokenise splits on spaces")
    assert page.locator("#memories tbody tr").count() == 1
    page.close()
    shown = cogd_json(repo["root"], "memory", "show", repo["rule"]["id"])
    page = visit(browser, viewer, shots, f"/memory/item?id={repo['rule']['id']}", "memory_item")
    assert text(page, "#memory-title") == f"Rule {XSS}"  # shown as text, inert
    assert page.locator("img").count() == 0
    events = page.locator("#events tbody tr")
    assert events.count() == len(shown["events"])
    anchors = page.locator("#anchors tbody tr").first.locator("td").all_inner_texts()
    assert anchors[0] == "pkg/core.py::normalise" and anchors[3] == "current"
    page.close()


def test_a_rejected_memory_shows_its_moves_and_an_erased_one_only_hashes(repo, viewer, browser, shots):
    rejected = repo["rejected"]["id"]
    shown = cogd_json(repo["root"], "memory", "show", rejected)
    page = visit(browser, viewer, shots, f"/memory/item?id={rejected}", "memory_rejected")
    rows = [r.locator("td").all_inner_texts() for r in page.locator("#events tbody tr").all()]
    assert [(r[1], r[2].split("\n")[0], r[3]) for r in rows] == [
        (e["actor"], e["action"], f"{e['old_status'] or '∅'} → {e['new_status'] or '∅'}") for e in shown["events"]]
    assert rows[-1][2] == "reject\nreason: it returns upper case"
    assert rows[-1][3] == "active → rejected" and "shout returns lower case" in rows[-1][4]  # the pre-image
    page.close()
    erased = repo["erased"]["id"]
    events = [e for e in repo["events"] if e["entity_id"] == erased]
    assert events and all(e["redacted"] or e["action"] == "purge" for e in events)
    page = visit(browser, viewer, shots, "/memory", "memory_erased_list")
    assert page.locator("#erased tbody td:first-child").all_inner_texts() == [erased]
    page.locator("#erased a").first.click()
    page.wait_for_load_state("load")
    page.screenshot(path=str(shots / "memory_erased.png"), full_page=True)
    cells = [r.locator("td").all_inner_texts() for r in page.locator("#events tbody tr").all()]
    assert [c[2].split("\n")[0] for c in cells] == [e["action"] for e in events]
    assert "an address that must be erased" not in page.content()
    assert all(c[4] == "redacted (erased)" for c, e in zip(cells, events) if e["redacted"])
    page.close()


def test_ask_shows_the_pack_and_records_nothing(repo, viewer, browser, shots):
    before = cogd_json(repo["root"], "stats")
    expected = cogd_json(repo["root"], "context", "shout the text")
    page = visit(browser, viewer, shots, "/ask", "ask_empty")
    page.fill("#q", "shout the text")
    page.click("button[type=submit]")
    page.wait_for_load_state("load")
    page.screenshot(path=str(shots / "ask.png"), full_page=True)
    print(f"screenshot: {shots / 'ask.png'}")
    ids = page.locator("#pack-items tbody td:nth-child(2)").all_inner_texts()
    assert ids == [item["entity_id"] for item in expected["items"]]
    assert text(page, "#pack-text") == expected["text"].strip()
    assert "bm25_rank=" in page.locator("#pack-items td.signals").first.inner_text()
    after = cogd_json(repo["root"], "stats")
    assert after["ledger"] == before["ledger"]  # no delivery, no item, no session
    page.close()


def test_untrusted_names_and_code_are_shown_inert(repo, viewer, browser, shots):
    entity = f"pkg/{XSS}.py::odd_payload"
    status, raw, _ = fetch(url(viewer, "/entity?" + urllib.parse.urlencode({"id": entity})))
    assert status == 200
    assert XSS not in raw and "<script>alert" not in raw  # escaped in the HTML itself, not only blocked by CSP
    assert "&lt;img src=x onerror=alert(1)&gt;" in raw
    page = visit(browser, viewer, shots, "/entity?" + urllib.parse.urlencode({"id": entity}), "entity_xss")
    assert text(page, "#entity-id") == entity
    assert XSS_DOC in text(page, "#source")
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    page.close()


# ---------------------------------------------------------------- without a browser

def test_every_request_needs_the_token(viewer):
    for path in ("/", "/sessions", "/code", "/memory", "/ask?q=x", "/static/style.css", "/nope"):
        assert fetch(url(viewer, path, token=None))[0] == 403, path
        assert fetch(url(viewer, path, token="x" + viewer["token"][1:]))[0] == 403, path
        assert fetch(url(viewer, path, token="%E2%82%AC" + viewer["token"]))[0] == 403, path  # not Latin-1
        assert fetch(url(viewer, path, token=viewer["token"][:-1]))[0] == 403, path
    status, body, headers = fetch(url(viewer, "/"))
    assert status == 200 and headers["content-security-policy"].startswith("default-src 'none'")
    assert headers["referrer-policy"] == "no-referrer"


def test_no_write_endpoint_exists(viewer):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/", "/ask?q=x", "/memory"):
            status, _, headers = fetch(url(viewer, path), method=method)
            assert status == 405 and headers["allow"] == "GET, HEAD", (method, path)


def test_a_foreign_host_name_and_static_paths_are_refused(viewer):
    assert fetch(url(viewer, "/"), headers={"Host": f"evil.example:{viewer['port']}"})[0] == 403
    assert fetch(url(viewer, "/static/style.css"))[0] == 200
    for path in ("/static/..%2Fapp.py", "/static/../app.py", "/static/%2e%2e/pages.py", "/static/source.py"):
        assert fetch(url(viewer, path))[0] == 404, path


def test_an_unknown_id_is_a_404_page_that_shows_it_as_text(viewer):
    for path in ("/entity", "/memory/item"):
        status, body, headers = fetch(url(viewer, path + "?" + urllib.parse.urlencode({"id": XSS + "::nope"})))
        assert status == 404 and headers["content-security-policy"].startswith("default-src 'none'"), path
        assert XSS not in body and "&lt;img src=x onerror=alert(1)&gt;" in body, path
    assert fetch(url(viewer, "/session?id=nobody"))[0] == 200  # a session without deliveries is empty, not an error


def _addresses() -> list[str]:
    """This machine's addresses other than 127.0.0.1 (``hostname -I``: every interface's, IPv4 and IPv6)."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return []
    return [a for a in out if a != "127.0.0.1"]


def test_nothing_listens_beyond_127_0_0_1(viewer):
    """Another address of this machine (another host's packets arrive there) finds no listener:
    the connection is refused, not answered 403."""
    port = viewer["port"]
    for host in ["127.0.0.2", "::1", *_addresses()]:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(5)
            try:
                probe.connect((host, port))
            except ConnectionRefusedError:
                continue
            except OSError as exc:  # e.g. IPv6 switched off: unreachable is as good as refused
                assert exc.errno in (errno.EADDRNOTAVAIL, errno.ENETUNREACH, errno.EAFNOSUPPORT), (host, exc)
                continue
            pytest.fail(f"something listens on {host}:{port}")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # and it does listen there


def test_the_source_calls_only_read_methods(repo):
    from cogd.paths import Layout
    from cogd.ui.source import Source

    source = Source(Layout(repo["root"]), start=False)
    for method in ("memory.record", "memory.transition", "index.refresh", "session.end", "usage.tool_use"):
        with pytest.raises(ValueError, match="not a read-only method"):
            source.call(method, {})
    with pytest.raises(ValueError, match="record=false"):
        source.call("context.prompt", {"prompt": "x", "session_id": "s"})
    assert source.call("usage.daily")["days"][0]["deliveries"] == 3


def test_a_taken_port_is_a_clear_error(repo):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        from click.testing import CliRunner

        from cogd.cli import main

        result = CliRunner().invoke(main, ["--root", str(repo["root"]), "ui", "--port", str(port)])
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.output


def test_open_hands_the_browser_a_page_that_forwards_to_the_viewer(repo, browser, tmp_path):
    """``--open`` asks the user's browser (``$BROWSER``, as Python's webbrowser reads it) to open
    a private page that forwards to the URL it prints (the token is not on the browser's command
    line: see tests/test_ui_attacks.py); here the "browser" writes down what it was given, and
    Chromium, given the same, lands on the viewer's overview."""
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}.tmp && mv {opened}.tmp {opened}\n')
    script.chmod(0o755)
    proc = subprocess.Popen([COGD, "ui", "--open"], cwd=repo["root"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "BROWSER": f"{script} %s"}, preexec_fn=interruptible)
    try:
        printed = re.search(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", proc.stdout.readline()).group(0)
        wait_for(lambda: opened.exists() and opened.read_text(), what="the browser's invocation")
        given = opened.read_text()
        assert given.startswith("file://") and printed.split("token=")[1] not in given
        page = browser.new_page()
        page.goto(given)
        page.wait_for_url(printed, timeout=WAIT_S * 1000)
        assert text(page, "#deliveries") == str(repo["ledger"]["deliveries"])
        page.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=WAIT_S)


def test_browsing_wrote_nothing(repo, viewer):
    """After every page above (Ask included): the ledger and the memory events are as the fixture left them."""
    assert cogd_json(repo["root"], "stats")["ledger"] == repo["ledger"]
    assert cogd_json(repo["root"], "events") == repo["events"]


def test_with_no_daemon_the_viewer_starts_one(repo, viewer, browser, shots):
    """Last in the module: the daemon stopped, a page starts it again (the fixture stops it)."""
    from cogd.paths import Layout
    from cogd.rpc import control

    run_cogd(repo["root"], "stop")
    assert not control.is_running(Layout(repo["root"]))
    page = visit(browser, viewer, shots, "/", "overview_restarted")
    status = cogd_json(repo["root"], "status")
    assert status["running"] is True and text(page, "#daemon-pid") == str(status["pid"])
    assert text(page, "#deliveries") == str(repo["ledger"]["deliveries"])
    page.close()
