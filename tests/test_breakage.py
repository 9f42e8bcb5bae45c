"""Regression tests for bugs found by trying to break the memory surfaces (real files, real SQLite,
the real ``cogd`` CLI; no mocks).

Each test names the bug it pins: what broke, and what must hold now.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cogd.memory.api import BODY_MAX
from cogd.memory.record import MAX_FILE_BYTES
from conftest import WAIT_S, Daemon, cogd_in_process, lexical_only, make_repo, refused, run_cogd

APP = '''"""A tiny app."""


def parse_date(text):
    """Parse an RFC 2822 date."""
    return text.strip()
'''




def rewrite(path: Path, old: str, new: str) -> None:
    """A hand edit: replace ``old`` by ``new`` in the file, making sure its stat changes."""
    text = path.read_text(encoding="utf-8")
    assert old in text, (old, text)
    before = path.stat().st_mtime_ns
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def record_text(entity_id: str, body: str, status: str = "active", kind: str = "knowledge") -> str:
    return (f"---\nid: {entity_id}\ntype: {kind}\ntitle: a hand-written record\nstatus: {status}\n"
            f"---\n\n{body}\n")


# ---- a huge record file wedged the daemon's memory for minutes ---------------------------------------

def test_huge_record_file_is_refused_unread_and_others_keep_syncing(store, root):
    """A 50 MB record file dropped into .cogd/memory/ was read, hashed and secret-scanned with the
    store's lock held (about 10 minutes, every memory request blocked), then accepted with a body
    far over BODY_MAX. Now it is a ``too_large`` problem at once, and the others still sync."""
    ok = store.record("knowledge", "the decoder keeps a cache of compiled patterns", source="human")
    big_id = "01M8MXAAAAAAAAAAAAAAAAAAAA"
    big = root / ".cogd" / "memory" / "knowledge" / f"{big_id}.md"
    line = "lorem ipsum dolor sit amet " * 40 + "\n"
    big.write_text(record_text(big_id, line * (3 * MAX_FILE_BYTES // len(line))), encoding="utf-8")
    started = time.monotonic()
    counts = store.sync()
    # Refused by its size before any read: the statuses below prove the refusal, and this bound,
    # far under the minutes the read and scan took, that nothing read it first (not a latency test).
    assert time.monotonic() - started < WAIT_S
    assert counts["broken"] == 1
    assert store.projection.row(big_id) is None
    problems = {p["path"]: p for p in store.status()["problems"]}
    assert problems[f"knowledge/{big_id}.md"]["kind"] == "too_large"
    assert store.get(ok["record"]["id"])["record"]["status"] == "active"


def test_hand_written_body_over_text_max_is_refused(store, root):
    """A file under the byte cap whose body exceeds BODY_MAX bypassed the limit every other write
    path enforces. Now it is refused (the file is left alone, with a problem)."""
    entity_id = "01M8MXBBBBBBBBBBBBBBBBBBBB"
    path = root / ".cogd" / "memory" / "knowledge" / f"{entity_id}.md"
    path.write_text(record_text(entity_id, "word " * (BODY_MAX // 5 + 100)), encoding="utf-8")
    store.sync()
    assert store.projection.row(entity_id) is None
    assert path.exists()
    problems = {p["path"]: p for p in store.status()["problems"]}
    assert "at most" in problems[f"knowledge/{entity_id}.md"]["message"]


# ---- secrets in provenance (tags, creation reason) were stored -----------------------------------------

@pytest.mark.parametrize("field, value", [
    ("tags", ["AKIAIOSFODNN7EXAMPLE"]),
    ("creation_reason", 'found while rotating password = "hunter2hunter2"'),
])
def test_secret_in_tags_or_reason_is_refused(store, root, field, value):
    """The title and body were scanned, but a secret in a tag or the creation reason went into the
    file (meant for git) and the projection. Now the write is refused and nothing is written."""
    refused("secret_detected", store.record, "knowledge", "the deploy bucket is in eu-west-1",
            source="human", **{field: value})
    assert not list((root / ".cogd" / "memory").rglob("*.md"))
    assert store.list() == []


def test_secret_added_to_tags_by_hand_is_masked_in_the_file(store, root):
    """A hand-added secret stayed in the file (bound for git) while the edit was refused; now the
    file is rewritten with the secret masked, the edit is accepted, and an event says so."""
    rec = store.record("knowledge", "the deploy bucket is in eu-west-1", source="human")["record"]
    path = root / ".cogd" / "memory" / "knowledge" / f"{rec['id']}.md"
    rewrite(path, "tags: []", "tags:\n- AKIAIOSFODNN7EXAMPLE")
    store.sync()
    assert "IOSFODNN7EXAMPLE" not in path.read_text(encoding="utf-8")
    assert store.get(rec["id"])["problem"] is None
    assert json.loads(store.projection.row(rec["id"])["tags"]) == ["AKIA…[secret:aws_access_key]"]
    masked = [e for e in store.events(rec["id"]) if e["action"] == "secret_masked"]
    assert [f["kind"] for f in masked[0]["detail"]["findings"]] == ["aws_access_key"]


# ---- a hand edit could supersede a memory by nothing, for good ------------------------------------------

def test_hand_edit_to_superseded_needs_a_successor(store, root):
    """``active → superseded`` by hand with an empty ``superseded_by`` was accepted: the memory left
    every pack for good (superseded can only go to pruned), replaced by nothing. memory.transition
    refuses exactly that ("use memory.supersede"). Now the hand edit is refused the same way,
    and accepted once it names its successor."""
    old = store.record("rule", "run the tests with -x", source="human")["record"]
    new = store.record("rule", "run the tests with -x --ff", source="human", allow_duplicate=True)["record"]
    path = root / ".cogd" / "memory" / "rules" / f"{old['id']}.md"
    rewrite(path, "status: active", "status: superseded")
    store.sync()
    assert store.projection.row(old["id"])["status"] == "active"
    problem = store.get(old["id"])["problem"]
    assert problem and "superseded_by" in problem["fix"]
    rewrite(path, "superseded_by: ''", f"superseded_by: {new['id']}")
    store.sync()
    assert store.projection.row(old["id"])["status"] == "superseded"
    assert store.get(old["id"])["problem"] is None


def test_superseded_file_arriving_with_its_successor_is_accepted(store, root):
    """A teammate's supersession arrives by git pull: both files at once, the old one read first."""
    old = store.record("rule", "format with black", source="human")["record"]
    path = root / ".cogd" / "memory" / "rules" / f"{old['id']}.md"
    successor = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # sorts after the old file: read second
    (path.parent / f"{successor}.md").write_text(
        f"---\nid: {successor}\ntype: rule\ntitle: format with ruff\nstatus: active\nsupersedes: {old['id']}\n"
        "---\n\nformat with ruff format\n", encoding="utf-8")
    rewrite(path, "status: active", "status: superseded")
    rewrite(path, "superseded_by: ''", f"superseded_by: {successor}")
    store.sync()
    assert store.projection.row(old["id"])["status"] == "superseded"
    assert store.projection.row(successor)["status"] == "active"


# ---- `cogd reset --all` forgot every tombstone ----------------------------------------------------------

def test_reset_all_keeps_rejected_claims_tombstoned(tmp_path):
    """``cogd reset --all --yes`` wiped state.db (tombstones included) after memory.db had been
    rebuilt, so no sync re-read the rejected files' ``tombstone`` keys: the rejected claim could be
    recorded again at once. Now the tombstone comes back from the file."""
    repo = lexical_only(make_repo(tmp_path / "repo", {"app.py": APP}))
    claim = "parse_date always returns aware datetimes"
    # the steps before the reset in this process (the same CLI code); the reset and the refusal are real commands
    rid = json.loads(cogd_in_process(repo, "memory", "add", "observation", claim, "--json").stdout)["record"]["id"]
    cogd_in_process(repo, "memory", "reject", rid, "--reason", "it returns naive ones")
    run_cogd(repo, "reset", "--all", "--yes")
    again = run_cogd(repo, "memory", "add", "observation", "Parse_date ALWAYS returns aware datetimes!",
                     check=False)
    assert again.returncode == 1, again.stdout
    assert "tombstoned" in again.stderr and rid in again.stderr
    assert "Traceback" not in again.stderr


def test_invisible_format_characters_do_not_dodge_a_tombstone():
    from cogd.memory.normalise import content_hash, normalise

    assert normalise("Na\u200bN is re\u00adjected") == normalise("NaN is rejected") == "nan is rejected"
    assert content_hash("NaN\u2060 values") == content_hash("nan values")


def test_memory_show_states_why_a_memory_was_rejected(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    # `memory show` is the real command; the steps around it run the same CLI code in this process
    cogd_in_process(root, "memory", "add", "rule", "Indent with tabs everywhere")
    listed = cogd_in_process(root, "memory", "list", "--json")
    [memory] = json.loads(listed.stdout)
    cogd_in_process(root, "memory", "reject", memory["id"], "--reason", "Makefiles only; Python uses spaces")
    shown = run_cogd(root, "memory", "show", memory["id"])
    assert "rejected: Makefiles only; Python uses spaces" in shown.stdout
    assert cogd_in_process(root, "show", memory["id"]).stdout == shown.stdout  # a pack's memory id expands too
    assert json.loads(cogd_in_process(root, "show", memory["id"], "--json").stdout)["record"]["status"] == "rejected"
    assert memory["id"] in cogd_in_process(root, "memory", "list").stdout  # whole, on one line
    Daemon(root).stop()
