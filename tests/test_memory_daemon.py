"""Memory through the real daemon and the real ``cogd`` CLI: anchors going stale, hand edits seen by
the housekeeping sync, ``cogd status``, the JSON-RPC error kinds, edit/export/import.

One daemon per module (starting one costs about a second); each test works on
its own memories.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from cogd.rpc.client import RemoteError, call
from cogd.paths import Layout
from conftest import COGD, cogd_in_process, lexical_only, make_repo, run_cogd, running_daemon, wait_for

APP = '''"""A tiny app."""


def parse_date(text):
    """Parse an RFC 2822 date."""
    return text.strip()


def format_date(value):
    return str(value)
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("memrepo") / "repo", {"app.py": APP})
    lexical_only(root)
    with running_daemon(root):
        yield root


def rpc(root: Path, method: str, params: dict | None = None, timeout: float = 30.0):
    return call(Layout(root).socket_path, method, params or {}, timeout=timeout)


def rpc_error(root: Path, method: str, params: dict) -> RemoteError:
    with pytest.raises(RemoteError) as info:
        rpc(root, method, params)
    return info.value


def record_json(root: Path, entity_id: str) -> dict:
    return json.loads(run_cogd(root, "memory", "show", entity_id, "--json").stdout)


def polled_record(root: Path, entity_id: str) -> dict:
    """:func:`record_json` for a wait's poll: the command's code in this process (a CLI process
    per poll took CPU from the daemon being waited for)."""
    return json.loads(cogd_in_process(root, "memory", "show", entity_id, "--json").stdout)


def test_anchored_function_edited_goes_stale_and_verify_reactivates(repo):
    out = run_cogd(repo, "memory", "add", "observation", "parse_date strips whitespace before parsing",
                   "--anchor", "app.py::parse_date", "--json").stdout
    rid = json.loads(out)["record"]["id"]
    shown = record_json(repo, rid)
    assert shown["record"]["status"] == "active"
    anchor = shown["record"]["anchors"][0]
    assert anchor["entity"] == "app.py::parse_date" and anchor["hash"]
    # an edit elsewhere in the file leaves the function's hash, and the memory, alone; a memory
    # anchored where the edit is goes stale, which shows that the daemon has seen the edit
    witness = json.loads(run_cogd(repo, "memory", "add", "observation", "format_date renders with str",
                                  "--anchor", "app.py::format_date", "--json").stdout)["record"]["id"]
    (repo / "app.py").write_text(APP.replace("return str(value)", "return repr(value)"), encoding="utf-8")
    run_cogd(repo, "index")
    assert wait_for(lambda: polled_record(repo, witness)["record"]["status"] == "stale"), record_json(repo, witness)
    assert record_json(repo, rid)["record"]["status"] == "active"
    # the anchored function changes: the daemon (watcher → index → housekeeping) marks it stale
    (repo / "app.py").write_text(APP.replace("return text.strip()", "return text.strip().lower()"), encoding="utf-8")
    assert wait_for(lambda: polled_record(repo, rid)["record"]["status"] == "stale"), record_json(repo, rid)
    stale_event = record_json(repo, rid)["events"][-1]
    assert (stale_event["action"], stale_event["actor"], stale_event["old_status"]) == ("stale", "daemon", "active")
    assert stale_event["detail"]["anchors"][0]["entity"] == "app.py::parse_date"
    file_text = (repo / ".cogd" / "memory" / "observations" / f"{rid}.md").read_text(encoding="utf-8")
    assert "status: stale" in file_text
    listed = run_cogd(repo, "memory", "list", "--status", "stale").stdout
    assert rid[:10] in listed
    # verify re-anchors and reactivates (the alias and the memory subcommand are one command)
    out = run_cogd(repo, "verify", rid).stdout
    assert "active" in out
    after = record_json(repo, rid)
    assert after["record"]["status"] == "active" and after["record"]["anchors"][0]["hash"] != anchor["hash"]
    assert after["events"][-1]["action"] == "verify"
    # the function disappears: stale again, and verify says what is gone
    (repo / "app.py").write_text(APP.split("def parse_date")[0] + "def format_date(value):\n    return 1\n",
                                 encoding="utf-8")
    assert wait_for(lambda: polled_record(repo, rid)["record"]["status"] == "stale")
    proc = run_cogd(repo, "memory", "verify", rid, check=False)
    assert proc.returncode == 1 and "app.py::parse_date" in proc.stderr and "not_found" in proc.stderr
    (repo / "app.py").write_text(APP, encoding="utf-8")
    run_cogd(repo, "index")


def test_illegal_hand_edit_shows_in_status_and_the_file_is_left_alone(repo):
    rid = rpc(repo, "memory.record", {"type": "rule", "text": "Never import cogd.daemon from cogd.memory",
                                      "source": "human"})["record"]["id"]
    path = repo / ".cogd" / "memory" / "rules" / f"{rid}.md"
    text = path.read_text(encoding="utf-8").replace("status: active", "status: pruned")
    path.write_text(text, encoding="utf-8")
    written = path.read_bytes()

    def problem():  # polled: the command's code in this process; the text form below is the real command
        status = json.loads(cogd_in_process(repo, "status", "--json").stdout)
        return [p for p in status["memory"]["problems"] if p.get("id") == rid]

    found = wait_for(problem)
    assert found and found[0]["kind"] == "illegal_transition" and (found[0]["from"], found[0]["to"]) == ("active", "pruned")
    human = run_cogd(repo, "status").stdout
    assert f"rules/{rid}.md" in human and "active → pruned" in human and "fix:" in human
    assert path.read_bytes() == written
    assert rpc(repo, "memory.get", {"id": rid})["record"]["status"] == "active"
    events = rpc(repo, "memory.events", {"entity": rid})["events"]
    assert [e["action"] for e in events] == ["create", "illegal_transition"]
    path.write_text(text.replace("status: pruned", "status: active"), encoding="utf-8")
    assert wait_for(lambda: not problem())


def test_rpc_errors_carry_stable_kinds(repo):
    first = rpc(repo, "memory.record", {"type": "observation", "text": "The hook client imports only the stdlib"})
    rid = first["record"]["id"]
    assert first["record"]["status"] == "candidate" and first["record"]["source"] == "agent"
    assert rpc_error(repo, "memory.record", {"type": "observation", "text": "the hook client imports ONLY the stdlib."}
                     ).kind == "duplicate"
    error = rpc_error(repo, "memory.transition", {"id": rid, "status": "pruned"})
    assert error.kind == "illegal_transition" and error.code == -32003 and error.data["allowed"] == ["active", "rejected"]
    rpc(repo, "memory.transition", {"id": rid, "status": "rejected", "reason": "it imports json too, which is stdlib"})
    error = rpc_error(repo, "memory.record", {"type": "observation", "text": "The  hook client imports only the STDLIB"})
    assert error.kind == "tombstoned" and error.data["id"] == rid and error.data["reason"].startswith("it imports")
    error = rpc_error(repo, "memory.record", {"type": "knowledge", "text": "key AKIAIOSFODNN7EXAMPLE"})
    assert error.kind == "secret_detected" and error.code == -32005
    assert "IOSFODNN7" not in json.dumps(error.data) + str(error)
    assert rpc_error(repo, "memory.get", {"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}).kind == "not_found"
    assert rpc_error(repo, "memory.record", {"type": "observation", "text": "x", "anchors": ["app.py::nope"]}
                     ).kind == "not_found"
    for params in ({"type": "essay", "text": "x"}, {"type": "rule"}, {"type": "rule", "text": 5},
                   {"type": "rule", "text": "x", "anchors": "app.py"}):
        assert rpc_error(repo, "memory.record", params).kind == "bad_request", params


def test_cli_refuses_a_rejected_claim_recorded_again_with_other_case_and_spacing(repo):
    rid = json.loads(run_cogd(repo, "memory", "add", "knowledge", "Packs are capped at 8,000 characters",
                              "--json").stdout)["record"]["id"]
    run_cogd(repo, "memory", "reject", rid, "--reason", "the cap is configurable")
    proc = run_cogd(repo, "memory", "add", "knowledge", "  packs ARE capped at 8000   characters ", check=False)
    assert proc.returncode == 1
    assert rid in proc.stderr and "the cap is configurable" in proc.stderr and "tombstoned" in proc.stderr
    assert time.strftime("%Y-%m-%d", time.gmtime()) in proc.stderr


def test_edit_opens_the_editor_and_goes_through_the_lattice(repo, tmp_path):
    rid = rpc(repo, "memory.record", {"type": "observation", "text": "The watcher debounces for 50 ms"})["record"]["id"]
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i \"s/status: candidate/status: $NEW_STATUS/\" \"$1\"\n", encoding="utf-8")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "EDITOR": str(editor), "VISUAL": str(editor)}
    import subprocess

    path = repo / ".cogd" / "memory" / "observations" / f"{rid}.md"
    before = path.read_bytes()
    proc = subprocess.run([COGD, "memory", "edit", rid], cwd=repo, capture_output=True, text=True,
                          env={**env, "NEW_STATUS": "superseded"}, timeout=60)
    assert proc.returncode == 1 and "illegal_transition" in proc.stderr and "your edit is kept in" in proc.stderr
    kept = Path(proc.stderr.split("your edit is kept in")[1].split()[0])
    assert "status: superseded" in kept.read_text(encoding="utf-8")
    kept.unlink()
    assert path.read_bytes() == before
    proc = subprocess.run([COGD, "memory", "edit", rid], cwd=repo, capture_output=True, text=True,
                          env={**env, "NEW_STATUS": "active"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert rpc(repo, "memory.get", {"id": rid})["record"]["status"] == "active"
    assert rpc(repo, "memory.events", {"entity": rid})["events"][-1]["action"] == "activate"


def test_export_and_import_through_the_cli(repo, tmp_path):
    rpc(repo, "memory.record", {"type": "rule", "text": "Export me: tests stay under a minute", "source": "human"})
    out = tmp_path / "memories.jsonl"
    run_cogd(repo, "export", str(out))
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert any(m["body"] == "Export me: tests stay under a minute" for m in lines)
    other = make_repo(tmp_path / "other", {"x.py": "x = 1\n"})
    lexical_only(other)
    out.write_text(out.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    proc = run_cogd(other, "import", str(out), "--json")
    result = json.loads(proc.stdout)
    assert result["imported"] and any(r["kind"] == "bad_request" and r.get("line") for r in result["refused"])
    listed = json.loads(run_cogd(other, "memory", "list", "--json").stdout)
    assert listed and all(m["status"] == "candidate" and m["source"] == "import" for m in listed)


def test_purge_help_says_what_it_cannot_erase(repo):
    text = run_cogd(repo, "memory", "purge", "--help").stdout
    for words in ("git history", "backups", "copies"):
        assert words in text
