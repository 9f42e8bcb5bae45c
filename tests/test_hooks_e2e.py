"""End to end on real code: `cogd up` in a repository of standard-library packages,
then real `cogd-hook` processes fed Claude Code-shaped payloads."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git, lexical_only, payload, run_cogd, run_hook

DEADLINE_S = 1.5
SLACK_S = 1.0  # process start and teardown on a loaded 2-core CI machine

# Prompts written the way a person asks, each with the entities a reader of
# that code would accept as the place to start (any one within the top five).
PROMPTS = [
    ("the date in an email header is parsed wrong",
     {"email/utils.py::parsedate_to_datetime", "email/_parseaddr.py::parsedate_tz", "email/_parseaddr.py::_parsedate_tz"}),
    ("json.loads gives a confusing error message when the document has a trailing comma",
     {"json/decoder.py::JSONDecodeError", "json/decoder.py::JSONObject", "json/decoder.py::JSONDecoder.raw_decode"}),
    ("the rotating log file handler never rolls over at midnight",
     {"logging/handlers.py::TimedRotatingFileHandler.computeRollover", "logging/handlers.py::TimedRotatingFileHandler.shouldRollover"}),
    ("pretty printing json output should sort the keys",
     {"json/encoder.py::JSONEncoder.__init__", "json/__init__.py::dumps", "json/tool.py::main"}),
    ("cookies that have expired are still being sent to the server",
     {"http/cookiejar.py::CookieJar.clear_expired_cookies", "http/cookiejar.py::Cookie.is_expired",
      "http/cookiejar.py::DefaultCookiePolicy.return_ok_expires"}),
    ("asyncio wait_for doesn't cancel the task when the timeout expires", {"asyncio/tasks.py::wait_for"}),
    ("the http server access log should include the client address",
     {"http/server.py::BaseHTTPRequestHandler.log_message", "http/server.py::BaseHTTPRequestHandler.address_string",
      "http/server.py::BaseHTTPRequestHandler.log_request"}),
    ("logging basicConfig ignores the force argument", {"logging/__init__.py::basicConfig"}),
]

ID_LINE = re.compile(r"^\s*id: `([^`]+)`", re.M)


@pytest.fixture(scope="module")
def repo(stdlib_template, tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e") / "repo"
    shutil.copytree(stdlib_template, root, symlinks=True)
    with open(root / "email" / "utils.py", "a") as fh:  # a focused commit after the bulk import
        fh.write("\n# touched by the e2e fixture\n")
    git(root, "commit", "-qam", "touch email.utils")
    up = run_cogd(root, "up", "--wait-embed", "0", timeout=180)
    root_up_output = up.stdout
    # The packs below are the default hybrid ones: wait until every entity has
    # its vector (real model, about 2,400 entities).
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        embedding = json.loads(run_cogd(root, "status", "--json").stdout)["embedding"]
        if embedding["coverage"] == 1.0 and embedding["state"] == "idle" and not embedding["queued"]:
            break
        assert embedding["state"] != "error", embedding
        time.sleep(1)
    else:
        raise AssertionError(f"embedding did not finish: {embedding}")
    yield root, root_up_output
    run_cogd(root, "stop", check=False)


# Worded without the names of the code they are about: BM25 misses the place,
# the embeddings find it.
PARAPHRASES = [
    ("make the event loop's debug mode warn about slow callbacks",
     {"asyncio/base_events.py::BaseEventLoop._run_once", "asyncio/base_events.py::BaseEventLoop.set_debug"}),
    ("subprocess stdout pipe is not closed when the child process exits",
     {"asyncio/base_subprocess.py::BaseSubprocessTransport._process_exited",
      "asyncio/subprocess.py::SubprocessStreamProtocol.pipe_connection_lost"}),
]


def _pack(proc) -> str:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"hookSpecificOutput"}
    return out["hookSpecificOutput"]["additionalContext"]


def _ledger(root: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with sqlite3.connect(root / ".cogd" / "state.db") as conn:
        return conn.execute(sql, args).fetchall()


def test_up_sets_everything_up(repo):
    root, output = repo
    assert "sample context pack" in output
    assert "## cogd: repository map" in output
    assert (root / ".cogd" / ".gitignore").read_text().startswith("# cogd")
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    for event, arg in (("SessionStart", "session-start"), ("UserPromptSubmit", "prompt-submit"),
                       ("PostToolUse", "post-tool-use"), ("PreCompact", "pre-compact"),
                       ("SessionEnd", "session-end")):
        commands = [h["command"] for g in settings["hooks"][event] for h in g["hooks"]]
        assert len(commands) == 1 and commands[0].endswith(f"cogd-hook {arg}")
    status = json.loads(run_cogd(root, "status", "--json").stdout)
    assert status["running"] is True
    assert status["index"]["files"] == len(list(root.rglob("*.py")))
    assert status["index"]["entities"] > 1500
    assert status["index"]["commit"] == subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_up_twice_is_idempotent(repo):
    root, _ = repo
    before = (root / ".claude" / "settings.json").read_text()
    again = run_cogd(root, "up")
    assert "already running" in again.stdout and "hooks already in" in again.stdout
    assert (root / ".claude" / "settings.json").read_text() == before
    assert not list((root / ".claude").glob("settings.json.cogd-backup-*"))


@pytest.mark.parametrize("prompt,expected", PROMPTS, ids=[p[:40] for p, _ in PROMPTS])
def test_prompt_pack_lists_the_right_code(repo, prompt, expected):
    root, _ = repo
    # A session of its own: another test's touches would be this session's working set.
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt=prompt,
                                                session_id=f"e2e-right-code-{abs(hash(prompt))}"))
    text = _pack(proc)
    ids = ID_LINE.findall(text)
    assert expected & set(ids[:5]), f"none of {sorted(expected)} in the top five: {ids[:5]}"
    assert len(text) <= 8000
    for entity_id in ids[:5]:  # every item is traceable to a real entity and a real line range
        path = entity_id.split("::")[0]
        assert (root / path).is_file()
    assert re.search(r"`[\w/]+\.py:\d+-\d+`", text)


@pytest.mark.parametrize("prompt,expected", PARAPHRASES, ids=[p[:40] for p, _ in PARAPHRASES])
def test_embeddings_find_what_bm25_misses(repo, prompt, expected):
    root, _ = repo
    hybrid = json.loads(run_cogd(root, "context", prompt, "--json").stdout)
    lexical = json.loads(run_cogd(root, "context", prompt, "--json", "--mode", "bm25").stdout)
    hybrid_top = [i["entity_id"] for i in hybrid["items"][:5]]
    lexical_top = [i["entity_id"] for i in lexical["items"][:5]]
    assert expected & set(hybrid_top), hybrid_top
    assert not expected & set(lexical_top), lexical_top
    assert hybrid["text"].startswith("## cogd: code that may matter for this prompt\n(BM25 + embeddings")
    item = next(i for i in hybrid["items"] if i["entity_id"] in expected)
    assert "vector_rank" in item["signals"] and "rrf" in item["signals"]


def test_status_reports_embedding_coverage(repo):
    root, _ = repo
    status = json.loads(run_cogd(root, "status", "--json").stdout)
    assert status["embedding"]["model"].startswith("all-MiniLM-L6-v2-int8@8199be6f699a")
    assert status["embedding"]["coverage"] == 1.0
    assert status["embedding"]["entities"] == status["index"]["entities"] + status["index"]["files"]


def test_prompt_pack_is_recorded_as_a_delivery(repo):
    root, _ = repo
    session = "e2e-delivery-session"
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, session_id=session,
                                                prompt="logging basicConfig ignores the force argument"))
    text = _pack(proc)
    rows = _ledger(root, "SELECT id, event, query, size_chars, item_count FROM deliveries WHERE session_id = ?", (session,))
    assert len(rows) == 1
    delivery_id, event, query, size, count = rows[0]
    assert (event, query, size) == ("prompt", "logging basicConfig ignores the force argument", len(text))
    items = _ledger(root, "SELECT rank, entity_id, outcome FROM delivery_items WHERE delivery_id = ? ORDER BY rank", (delivery_id,))
    assert len(items) == count
    assert [r[0] for r in items] == list(range(1, count + 1))
    assert {r[2] for r in items} == {"pending"}
    assert items[0][1] == ID_LINE.findall(text)[0]


@pytest.mark.parametrize("prompt", ["ok", "continue", "yes please", "thanks!", "   "])
def test_chat_filler_gets_no_pack(repo, prompt):
    root, _ = repo
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt=prompt))
    assert proc.returncode == 0 and proc.stdout == b""


def test_cli_context_prints_what_the_hook_injects(repo):
    root, _ = repo
    prompt = "the rotating log file handler never rolls over at midnight"
    # a new session has no working set, like the CLI's
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt=prompt, session_id="e2e-cli-same"))
    assert run_cogd(root, "context", prompt).stdout == _pack(proc)


def test_session_start_pack_and_session_end(repo):
    root, _ = repo
    session = "e2e-start-end"
    proc, _ = run_hook("session-start", payload("session_start.startup.json", root, session_id=session))
    text = _pack(proc)
    assert text.startswith("## cogd: repository map")
    recent = text.split("### Recently changed files\n", 1)[1]
    assert recent.splitlines()[0].startswith("- `email/utils.py` (")
    assert json.loads(proc.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    proc, _ = run_hook("session-end", payload("session_end.prompt_input_exit.json", root, session_id=session))
    assert proc.returncode == 0 and proc.stdout == b""
    assert _ledger(root, "SELECT end_reason FROM sessions WHERE session_id = ?", (session,)) == [("prompt_input_exit",)]
    assert _ledger(root, "SELECT event, source FROM deliveries WHERE session_id = ?", (session,)) == [("session_start", "startup")]


def test_post_tool_use_records_touched_lines(repo):
    root, _ = repo
    session = "e2e-tools"
    read = payload("post_tool_use.read.range.json", root, session_id=session)
    read["tool_input"]["file_path"] = str(root / "email" / "utils.py")
    proc, _ = run_hook("post-tool-use", read)
    assert proc.returncode == 0 and proc.stdout == b""
    grep = payload("post_tool_use.grep.files_with_matches.json", root, session_id=session)
    grep["tool_response"]["filenames"] = ["json/decoder.py", "not/in/repo/../../../../etc/passwd"]
    proc, _ = run_hook("post-tool-use", grep)
    assert proc.returncode == 0 and proc.stdout == b""
    rows = _ledger(root, "SELECT tool_name, touches FROM tool_uses WHERE session_id = ? ORDER BY id", (session,))
    assert [r[0] for r in rows] == ["Read", "Grep"]
    assert json.loads(rows[0][1]) == [{"path": "email/utils.py", "action": "read", "start_line": 120, "end_line": 159}]
    assert json.loads(rows[1][1]) == [{"path": "json/decoder.py", "action": "search", "start_line": None, "end_line": None}]


def test_an_edit_reaches_the_next_pack(repo):
    root, _ = repo
    target = root / "json" / "scanner.py"
    original = target.read_text()
    target.write_text(original + "\n\ndef zanzibar_quokka_lookup(table):\n    \"\"\"Find the quokka in the table.\"\"\"\n    return table\n")
    try:
        edit = payload("post_tool_use.write.update.json", root, session_id="e2e-edit")
        edit["tool_input"]["file_path"] = str(target)
        run_hook("post-tool-use", edit)
        deadline = time.monotonic() + 10
        ids: list[str] = []
        while time.monotonic() < deadline:
            proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt="where is the zanzibar quokka lookup"))
            ids = ID_LINE.findall(_pack(proc)) if proc.stdout else []
            if "json/scanner.py::zanzibar_quokka_lookup" in ids:
                break
            time.sleep(0.2)
        assert "json/scanner.py::zanzibar_quokka_lookup" in ids[:3]
    finally:
        target.write_text(original)
        run_cogd(root, "index")


# ---- bad input: exit 0 within the deadline, print nothing or a valid pack, daemon keeps serving ----

def _assert_harmless(proc, seconds, *, may_print_pack: bool = False):
    assert proc.returncode == 0
    assert seconds < DEADLINE_S + SLACK_S
    if proc.stdout.strip():
        assert may_print_pack, proc.stdout[:300]
        _pack(proc)


def _still_serving(root: Path):
    status = json.loads(run_cogd(root, "status", "--json").stdout)
    assert status["running"] is True and status["index"]["entities"] > 0


@pytest.mark.parametrize("event", ["prompt-submit", "session-start", "post-tool-use", "pre-compact", "session-end"])
@pytest.mark.parametrize("raw", [b"", b"   \n", b"{not json", b"[1, 2, 3]", b'"just a string"', b"\xff\xfe\x00garbage"],
                         ids=["empty", "blank", "invalid", "array", "string", "binary"])
def test_malformed_stdin_is_harmless(repo, event, raw):
    root, _ = repo
    proc, seconds = run_hook(event, None, raw=raw)
    _assert_harmless(proc, seconds)
    assert proc.stdout == b""


def test_lone_surrogate_in_prompt(repo):
    root, _ = repo
    data = payload("user_prompt_submit.json", root)
    raw = json.dumps(data).replace(json.dumps(data["prompt"]), '"\\ud800 email header date \\udfff parsed"').encode()
    proc, seconds = run_hook("prompt-submit", None, raw=raw)
    _assert_harmless(proc, seconds, may_print_pack=True)
    assert "email" in _pack(proc)
    _still_serving(root)


def test_one_megabyte_prompt(repo):
    root, _ = repo
    prompt = ("the date in an email header is parsed wrong " * 25_000)[:1_000_000]
    proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt=prompt))
    _assert_harmless(proc, seconds, may_print_pack=True)
    assert len(_pack(proc)) <= 8000
    _still_serving(root)


def test_five_megabyte_post_tool_use(repo):
    root, _ = repo
    data = payload("post_tool_use.read.json", root, session_id="e2e-big")
    data["tool_input"]["file_path"] = str(root / "json" / "decoder.py")
    data["tool_response"]["file"]["content"] = "x = 1\n" * 900_000
    assert len(json.dumps(data)) > 5_000_000
    proc, seconds = run_hook("post-tool-use", data)
    _assert_harmless(proc, seconds)
    rows = _ledger(root, "SELECT touches FROM tool_uses WHERE session_id = 'e2e-big'")
    assert [json.loads(r[0])[0]["path"] for r in rows] == ["json/decoder.py"]
    _still_serving(root)


def test_cwd_outside_any_repository(repo, tmp_path):
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", outside))
    _assert_harmless(proc, seconds)
    assert proc.stdout == b""
    assert not (outside / ".cogd").exists()


def test_unknown_event_and_wrong_types(repo):
    root, _ = repo
    proc, seconds = run_hook("no-such-event", payload("user_prompt_submit.json", root))
    _assert_harmless(proc, seconds)
    proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt={"not": "a string"}))
    _assert_harmless(proc, seconds)
    assert proc.stdout == b""
    proc, seconds = run_hook("post-tool-use", payload("post_tool_use.edit.json", root, tool_input=[1, 2], tool_response="x"))
    _assert_harmless(proc, seconds)
    _still_serving(root)


def test_tight_deadline_exits_quietly(repo):
    root, _ = repo
    proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", root), env={"COGD_HOOK_DEADLINE_MS": "1"})
    assert proc.returncode == 0 and proc.stdout == b"" and seconds < 1.0


def test_deleted_cogd_dir_recovers(stdlib_template, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(stdlib_template, root, symlinks=True)
    lexical_only(root)
    run_cogd(root, "start")
    run_cogd(root, "index")
    try:
        # The running daemon may write into .cogd/ while it is deleted (a log line, the memory
        # sync's folders): like `rm -rf` run again, retry until it is gone.
        for _ in range(20):
            shutil.rmtree(root / ".cogd", ignore_errors=True)
            if not (root / ".cogd").exists():
                break
            time.sleep(0.05)
        assert not (root / ".cogd").exists()
        proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt="json decoder error"))
        _assert_harmless(proc, seconds, may_print_pack=True)
        # The old daemon notices its .cogd/ is gone and leaves; the hook started a new one.
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline and not text:
            time.sleep(0.5)
            proc, seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt="json decoder error"))
            _assert_harmless(proc, seconds, may_print_pack=True)
            text = _pack(proc) if proc.stdout.strip() else ""
        assert "json/decoder.py" in text
        # ...and the old one is gone within its housekeeping period.
        pids: list[str] = []
        for _ in range(50):
            pids = subprocess.run(["pgrep", "-f", f"cogd.daemon --root {root}"], capture_output=True, text=True).stdout.split()
            if len(pids) == 1:
                break
            time.sleep(0.1)
        assert len(pids) == 1
    finally:
        run_cogd(root, "stop", check=False)


def test_malformed_payload_reason_is_logged_in_the_repository(repo):
    root, _ = repo
    proc, seconds = run_hook("prompt-submit", None, raw=b'{"session_id": "x", "prompt": ',
                             env={"CLAUDE_PROJECT_DIR": str(root)})
    _assert_harmless(proc, seconds)
    last = (root / ".cogd" / "logs" / "hook.log").read_text().splitlines()[-1]
    assert "event=prompt-submit" in last and "stdin is not a JSON payload (30 bytes)" in last
