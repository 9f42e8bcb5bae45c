"""Memory records through the real store: real files, real SQLite (state.db, memory.db), no mocks.

Each test builds a MemoryStore on a temporary repository root; hand edits are
real writes to the record files followed by a sync (what the daemon's
housekeeping does every second).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from cogd.memory import lattice
from cogd.memory.api import MemoryStore
from cogd.memory.normalise import content_hash, normalise
from cogd.memory.record import parse, serialise
from conftest import refused

CLAIM = "parse_date returns naive datetimes when the Date header has no zone"




def event_rows(root: Path) -> list[tuple]:
    conn = sqlite3.connect(root / ".cogd" / "state.db")
    try:
        return conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


def hand_edit(path: Path, old: str, new: str) -> None:
    """Edit a record file as a person would (and make sure its stat changes)."""
    text = path.read_text(encoding="utf-8")
    assert old in text, (old, text)
    before = path.stat().st_mtime_ns
    head, _, tail = text.rpartition(old)  # the last occurrence: the body, not the title line
    path.write_text(head + new + tail, encoding="utf-8")
    if path.stat().st_mtime_ns == before:  # coarse clocks: force a different mtime
        import os

        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


# ---- records and defaults --------------------------------------------------------------------
def test_record_writes_a_markdown_file_with_frontmatter_and_defaults(store, root):
    agent = store.record("observation", CLAIM, source="agent", session_id="s1", creation_reason="seen in a test")
    human_rule = store.record("rule", "Run the test suite with -n 2 on two cores", source="human")
    human_knowledge = store.record("knowledge", "The ledger lives in .cogd/state.db", source="human")
    assert agent["record"]["status"] == "candidate"
    assert human_rule["record"]["status"] == "active"
    assert human_knowledge["record"]["status"] == "active"
    path = Path(agent["path"])
    assert path.parent == root / ".cogd" / "memory" / "observations" and path.name == agent["record"]["id"] + ".md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\nid: " + agent["record"]["id"])
    record = parse(text)
    assert (record.type, record.status, record.source, record.session_id) == ("observation", "candidate", "agent", "s1")
    assert record.body == CLAIM and record.title == CLAIM
    assert (root / ".cogd" / "memory" / "rules" / (human_rule["record"]["id"] + ".md")).exists()
    assert (root / ".cogd" / "memory" / "knowledge" / (human_knowledge["record"]["id"] + ".md")).exists()
    events = store.events(agent["record"]["id"])
    assert [(e["action"], e["old_status"], e["new_status"], e["actor"]) for e in events] == [
        ("create", None, "candidate", "agent")]


def test_unknown_frontmatter_keys_survive_a_rewrite(store):
    result = store.record("observation", CLAIM)
    path = Path(result["path"])
    hand_edit(path, "tags: []\n", "tags: []\nreviewed_by: alice\nx_custom:\n  nested: [1, 2]\n")
    store.sync()
    store.transition(result["record"]["id"], "active")
    text = path.read_text(encoding="utf-8")
    record = parse(text)
    assert record.status == "active"
    assert record.extra == {"reviewed_by": "alice", "x_custom": {"nested": [1, 2]}}
    assert parse(serialise(record)).extra == record.extra


def test_private_spans_are_never_stored(store, root):
    result = store.record("knowledge", "Deploy from the release branch <private>ask Bob, tel 555-0100</private> only",
                          source="human")
    assert "555" not in Path(result["path"]).read_text(encoding="utf-8")
    assert "Bob" not in json.dumps(store.get(result["record"]["id"]))
    for db in (root / ".cogd" / "state.db", root / ".cogd" / "index" / "memory.db"):
        assert b"555-0100" not in db.read_bytes()
    refused("bad_request", store.record, "knowledge", "<private>only this</private>")


# ---- the lattice ------------------------------------------------------------------------------
def test_the_lattice_table_is_exactly_the_issue_s():
    expected = {
        ("candidate", "active"), ("candidate", "rejected"), ("active", "stale"), ("active", "rejected"),
        ("active", "superseded"), ("stale", "active"), ("stale", "rejected"), ("rejected", "pruned"),
        ("superseded", "pruned"),
    }
    for old in lattice.STATUSES:
        for new in lattice.STATUSES:
            legal = lattice.allowed(old, new)
            assert legal == ((old, new) in expected or (old == new and old != "pruned")), (old, new)
    assert lattice.allowed(None, "candidate") and lattice.allowed(None, "active")
    assert not lattice.allowed(None, "rejected") and lattice.allowed(None, "rejected", arrival=True)


def test_api_transitions_follow_the_lattice(store):
    rid = store.record("observation", CLAIM)["record"]["id"]
    error = refused("illegal_transition", store.transition, rid, "stale")
    assert error.data["from"] == "candidate" and error.data["allowed"] == ["active", "rejected"]
    store.transition(rid, "active")
    refused("illegal_transition", store.transition, rid, "pruned")
    refused("bad_request", store.transition, rid, "rejected")  # a rejection needs a reason
    store.transition(rid, "rejected", reason="it returns aware datetimes")
    store.transition(rid, "pruned")
    for target in lattice.STATUSES:
        refused("illegal_transition" if target != "superseded" else "bad_request", store.transition, rid, target,
                reason="again")
    record = parse(Path(store.get(rid)["path"]).read_text(encoding="utf-8"))
    assert record.status == "pruned" and record.body == "" and record.tombstone == content_hash(CLAIM)
    assert [e["action"] for e in store.events(rid)] == ["create", "activate", "reject", "prune"]


def test_supersede_links_both_records(store):
    old = store.record("rule", "Use -n 2 for the suite", source="human")["record"]["id"]
    new = store.record("rule", "Use -n auto for the suite on CI runners", source="human")["record"]["id"]
    store.supersede(old, new)
    assert store.get(old)["record"]["status"] == "superseded"
    assert store.get(old)["record"]["superseded_by"] == new and store.get(new)["record"]["supersedes"] == old
    refused("illegal_transition", store.supersede, old, new)
    refused("not_found", store.supersede, "01ARZ3NDEKTSV4RRFFQ69G5FAV", new)


# ---- tombstones -------------------------------------------------------------------------------
def test_a_rejected_claim_recorded_again_with_other_case_and_spacing_is_refused(store):
    rid = store.record("observation", CLAIM)["record"]["id"]
    store.transition(rid, "rejected", reason="wrong: it returns aware datetimes")
    again = "  PARSE_DATE   returns naive\tdatetimes, when the date header has NO zone!  "
    assert normalise(again) == normalise(CLAIM)
    error = refused("tombstoned", store.record, "observation", again, source="human")
    assert error.data["id"] == rid and error.data["reason"] == "wrong: it returns aware datetimes"
    assert error.data["rejected_on"] == time.strftime("%Y-%m-%d", time.gmtime(error.data["rejected_at"]))
    assert rid in str(error) and "wrong: it returns aware datetimes" in str(error)
    # pruning removes the body but keeps the tombstone
    store.transition(rid, "pruned")
    refused("tombstoned", store.record, "knowledge", again.lower())
    assert store.get(rid)["record"]["body"] == ""


def test_a_hand_written_file_with_a_tombstoned_claim_is_refused(store, root):
    rid = store.record("observation", CLAIM)["record"]["id"]
    store.transition(rid, "rejected", reason="wrong")
    other = store.record("observation", "something else entirely about email headers")
    path = Path(other["path"])
    hand_edit(path, "something else entirely about email headers", CLAIM.upper())
    store.sync()
    problem = store.get(other["record"]["id"])["problem"]
    assert problem["kind"] == "tombstoned" and problem["id"] == other["record"]["id"]
    assert store.get(other["record"]["id"])["record"]["body"] == "something else entirely about email headers"


# ---- secrets ----------------------------------------------------------------------------------
SECRETS = {
    "cloud key": "the deploy user is AKIAIOSFODNN7EXAMPLE with full rights",
    "vcs token": "CI pushes with ghp_1234567890abcdefghijABCDEFGHIJ123456 from the runner",
    "private key block": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2\n-----END RSA PRIVATE KEY-----",
    "jwt": "the admin session is eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4g"
           "RG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "password assignment": "staging database: password = hunter2hunter2",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secrets_are_refused_with_a_short_preview(store, root, name):
    text = SECRETS[name]
    error = refused("secret_detected", store.record, "knowledge", text, source="human")
    findings = error.data["findings"]
    assert findings
    for finding in findings:
        assert len(finding["preview"].rstrip("…")) <= 4
    message = str(error) + json.dumps(error.data)
    for secret in ("IOSFODNN7EXAMPLE", "1234567890abcdefghij", "MIIEpAIBAAKCAQEA", "SflKxwRJSMeKKF2QT4fw", "hunter2hunter2"):
        assert secret not in message
    assert not list((root / ".cogd" / "memory" / "knowledge").glob("*.md"))


def test_ordinary_technical_prose_is_not_a_secret(store):
    for text in ("set `timeout = 30` in config.toml", "commit af8ab7d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8 fixed it",
                 "the password: <your password> placeholder in the docs", "path = src/cogd/memory/record.py"):
        store.record("knowledge", text, source="human")


# ---- dedup ------------------------------------------------------------------------------------
def test_exact_and_fuzzy_title_duplicates_are_refused_with_the_duplicate_s_id(store):
    first = store.record("rule", "Always run ruff before pushing", title="Lint before every push", source="human")
    error = refused("duplicate", store.record, "rule", "always run RUFF before pushing!", source="human")
    assert error.data == {"id": first["record"]["id"], "how": "exact", "score": 1.0}
    error = refused("duplicate", store.record, "rule", "Run the linter first", title="Lint before every push.",
                    source="human")
    assert error.data["id"] == first["record"]["id"] and error.data["how"] == "title"
    error = refused("duplicate", store.record, "rule", "Run the linter first", title="Lint befor every push",
                    source="human")
    assert error.data["how"] == "title"
    # another type is another namespace; a correction may opt out of the fuzzy tests
    store.record("knowledge", "Run the linter first", title="Lint before every push", source="human")
    store.record("rule", "Run the linter first", title="Lint before each push", source="human", allow_duplicate=True)


def test_dedup_covers_every_active_memory_of_the_type_without_a_cap(store):
    import hashlib

    titles = [hashlib.sha256(str(i).encode()).hexdigest()[:16] for i in range(150)]
    ids = [store.record("knowledge", f"fact number {i} about module {i * 7}", title=titles[i],
                        source="human")["record"]["id"] for i in range(150)]
    error = refused("duplicate", store.record, "knowledge", "FACT number 3 about module 21", source="human")
    assert error.data["id"] == ids[3]
    error = refused("duplicate", store.record, "knowledge", "new text", title=titles[147].upper() + "!",
                    source="human")
    assert error.data["id"] == ids[147]


@pytest.fixture(scope="module")
def real_embed():
    """The bundled MiniLM encoder as the store's embed function (about 1 s to load)."""
    from cogd.config import EmbedConfig
    from cogd.embed.encoder import Encoder
    from cogd.embed.model import resolve_model

    info = resolve_model(EmbedConfig(), Path.cwd())
    encoder = Encoder(info, threads=1)
    return lambda text: (info.id, encoder.encode_query(text))


def test_embedding_near_duplicates_with_a_real_encoder(root, real_embed):
    store = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index", embed=real_embed)
    try:
        first = store.record("observation", "The email parser drops the trailing newline of multipart bodies",
                             title="multipart newline dropped", source="human")
        error = refused("duplicate", store.record, "observation",
                        "The email parser drops the trailing newline of multipart bodies.\n",
                        title="trailing newline lost in multipart", source="human")
        assert error.data["id"] == first["record"]["id"]
        close = store.record("observation", "The email parser drops trailing newlines of multipart bodies",
                             title="parser newline issue", source="human", allow_duplicate=True)
        assert close["record"]["status"] == "active"
        rejected = store.record("observation", "parse_date returns naive datetimes when the header has no zone",
                                source="human")
        store.transition(rejected["record"]["id"], "rejected", reason="it returns aware ones")
        near = store.record("observation", "parse_date gives back naive datetimes when the header has no zone",
                            source="human")
        assert near["record"]["status"] == "candidate"
        assert near["warnings"] and rejected["record"]["id"] in near["warnings"][0]
        hits = store.search("multipart newline", 5)
        assert hits and hits[0].id in (first["record"]["id"], close["record"]["id"])
    finally:
        store.close()


# ---- hand edits -------------------------------------------------------------------------------
def test_illegal_hand_edit_is_refused_file_untouched_and_visible(store, root):
    rid = store.record("rule", "Never commit .cogd/index", source="human")["record"]["id"]
    path = root / ".cogd" / "memory" / "rules" / f"{rid}.md"
    hand_edit(path, "status: active", "status: pruned")
    edited = path.read_bytes()
    before = event_rows(root)
    store.sync()
    store.sync()
    assert path.read_bytes() == edited  # never rewritten behind the person's back
    assert store.get(rid)["record"]["status"] == "active"  # the last legal state
    problems = store.status()["problems"]
    assert len(problems) == 1
    problem = problems[0]
    assert problem["kind"] == "illegal_transition" and problem["path"] == f"rules/{rid}.md"
    assert (problem["from"], problem["to"]) == ("active", "pruned") and "status:" in problem["fix"]
    new_events = event_rows(root)[len(before):]
    assert [(e[4], e[5], e[6]) for e in new_events] == [("illegal_transition", "active", "pruned")]  # logged once
    # the API refuses to write over a file with a pending problem
    refused("bad_request", store.transition, rid, "stale")
    # fixing the file by hand clears the problem; a legal hand edit is an event like any other
    hand_edit(path, "status: pruned", "status: rejected")
    store.sync()
    assert store.get(rid)["record"]["status"] == "rejected" and store.status()["problems"] == []
    assert store.events(rid)[-1]["action"] == "reject" and store.events(rid)[-1]["actor"] == "human"
    refused("tombstoned", store.record, "rule", "never commit .COGD/index", source="human")


def test_anything_out_of_pruned_is_refused_even_after_the_projection_is_rebuilt(store, root):
    rid = store.record("observation", CLAIM)["record"]["id"]
    store.transition(rid, "rejected", reason="wrong")
    store.transition(rid, "pruned")
    path = root / ".cogd" / "memory" / "observations" / f"{rid}.md"
    hand_edit(path, "status: pruned", "status: active")
    store.sync()
    assert store.get(rid)["record"]["status"] == "pruned"
    # delete the projection: the last legal state comes from the ledger, so the edit stays refused
    store.projection.close()
    for suffix in ("", "-wal", "-shm"):
        (root / ".cogd" / "index" / f"memory.db{suffix}").unlink(missing_ok=True)
    fresh = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    try:
        fresh.sync()
        assert fresh.projection.row(rid) is None
        assert fresh.status()["problems"][0]["kind"] == "illegal_transition"
    finally:
        fresh.close()


def test_broken_frontmatter_is_reported_with_line_and_column_and_others_keep_syncing(store, root):
    good = store.record("knowledge", "The socket is mode 0600", source="human")["record"]["id"]
    other = store.record("knowledge", "The daemon exits after six idle hours", source="human")["record"]["id"]
    folder = root / ".cogd" / "memory" / "knowledge"
    broken = folder / f"{other}.md"
    hand_edit(broken, "status: active\n", "status: active\ntags: [unclosed\n")
    hand_edit(folder / f"{good}.md", "The socket is mode 0600", "The socket is mode 0600 (umask 0177 at bind)")
    new_file = folder / "01ARZ3NDEKTSV4RRFFQ69G5FAV.md"
    new_file.write_text("---\nid: 01ARZ3NDEKTSV4RRFFQ69G5FAV\ntype: knowledge\ntitle: Hand written\nstatus: active\n"
                        "---\n\nWritten by a person in an editor.\n", encoding="utf-8")
    not_yaml = folder / "notes.md"
    not_yaml.write_text("just some notes, no frontmatter\n", encoding="utf-8")
    broken_bytes = broken.read_bytes()
    result = store.sync()
    assert result["broken"] == 2
    problems = {p["path"]: p for p in store.status()["problems"]}
    p = problems[f"knowledge/{other}.md"]
    assert p["kind"] == "broken_frontmatter" and p["line"] >= 5 and p["column"] >= 1, p
    assert problems["knowledge/notes.md"]["line"] == 1
    assert broken.read_bytes() == broken_bytes
    assert store.get(other)["record"]["body"] == "The daemon exits after six idle hours"  # last good state
    assert "umask 0177" in store.get(good)["record"]["body"]
    assert store.get("01ARZ3NDEKTSV4RRFFQ69G5FAV")["record"]["status"] == "active"
    assert store.events("01ARZ3NDEKTSV4RRFFQ69G5FAV")[0]["actor"] == "sync"


def test_edit_goes_through_the_lattice_and_keeps_the_file_on_refusal(store, root):
    rid = store.record("observation", CLAIM)["record"]["id"]
    path = Path(store.get(rid)["path"])
    original = path.read_text(encoding="utf-8")
    refused("illegal_transition", store.edit, rid, original.replace("status: candidate", "status: stale"))
    refused("secret_detected", store.edit, rid, original + "\npassword = hunter2hunter2\n")
    error = refused("bad_request", store.edit, rid, original.replace("type: observation", "type: [observation"))
    assert error.data["line"] in (3, 4)  # the line YAML stopped at
    assert path.read_text(encoding="utf-8") == original
    result = store.edit(rid, original.replace("status: candidate", "status: active") + "\nMore detail.\n")
    assert result["action"] == "activate" and store.get(rid)["record"]["body"].endswith("More detail.")
    assert "More detail." in path.read_text(encoding="utf-8")


def test_a_deleted_file_leaves_the_projection_with_an_event(store, root):
    rid = store.record("rule", "Keep hooks under 1.5 s", source="human")["record"]["id"]
    (root / ".cogd" / "memory" / "rules" / f"{rid}.md").unlink()
    store.sync()
    assert store.projection.row(rid) is None
    assert store.events(rid)[-1]["action"] == "file_removed"


# ---- events -----------------------------------------------------------------------------------
def test_events_are_append_only_in_sqlite_itself(store, root):
    store.record("rule", "Keep hooks under 1.5 s", source="human")
    conn = sqlite3.connect(root / ".cogd" / "state.db")
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("DELETE FROM events")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE events SET new_status = 'pruned'")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE events SET pre_image = 'rewritten'")  # only erasure (redacted = 1) may
    finally:
        conn.close()


# ---- erasure ----------------------------------------------------------------------------------
def _all_bytes(root: Path) -> bytes:
    """Every database file under .cogd (with WAL files) raw, plus each database's SQL dump."""
    out = b""
    for path in sorted((root / ".cogd").rglob("*")):
        if path.is_file() and (path.suffix in (".db", ".md") or path.name.endswith(("-wal", "-shm"))):
            out += path.read_bytes()
            if path.suffix == ".db":
                conn = sqlite3.connect(path)
                try:
                    out += "\n".join(conn.iterdump()).encode("utf-8", errors="replace")
                finally:
                    conn.close()
    return out


def test_purge_leaves_no_trace_of_the_text_in_any_table_or_vector(root):
    fake_model = "fake-model"
    vectors: dict[str, object] = {}

    def embed(text: str):
        import numpy as np

        vector = np.frombuffer(text.encode("utf-8")[:64].ljust(64, b" "), dtype=np.uint8).astype(np.float32)
        vector /= np.linalg.norm(vector)
        vectors[text] = vector
        return fake_model, vector

    store = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index", embed=embed)
    secret_words = "zanzibarquokka flamingotelemetry"
    try:
        rid = store.record("observation", f"The {secret_words} module leaks file handles",
                           title=f"{secret_words} handle leak")["record"]["id"]
        keep = store.record("observation", "The socket server closes idle connections after 30 s")["record"]["id"]
        store.transition(rid, "active")
        path = Path(store.get(rid)["path"])
        hand_edit(path, "leaks file handles", "leaks file handles under load")
        store.sync()
        store.transition(rid, "rejected", reason=f"{secret_words} was fixed")
        assert store.projection.vectors([rid])
        assert b"zanzibarquokka" in _all_bytes(root)
        result = store.purge(rid)
        assert result["removed_file"] and result["events_redacted"] >= 4
        assert not path.exists()
        assert store.projection.row(rid) is None and not store.projection.vectors([rid])
        assert store.search("zanzibarquokka", 5) == []
        dump = _all_bytes(root)
        assert b"zanzibarquokka" not in dump and b"flamingotelemetry" not in dump
        assert b"zanzibarquokka".hex().encode() not in dump.lower()
        events = store.events(rid)
        assert events[-1]["action"] == "purge" and all(e["redacted"] for e in events[:-1])
        assert all((e["pre_image"] or "sha256:").startswith("sha256:") for e in events)
        assert [e["new_status"] for e in events] == ["candidate", "active", "active", "rejected", "purged"]
        assert store.get(keep)["record"]["status"] == "candidate"
        refused("not_found", store.purge, rid)
    finally:
        store.close()


# ---- export / import ----------------------------------------------------------------------------
def test_export_then_import_lands_as_candidates_with_source_import(store, tmp_path):
    a = store.record("rule", "Keep hooks under 1.5 s", source="human")["record"]["id"]
    b = store.record("knowledge", "The index is a projection", source="human")["record"]["id"]
    store.transition(store.record("observation", "A wrong claim about sockets")["record"]["id"], "rejected",
                     reason="wrong")
    exported = store.export()
    assert {m["id"] for m in exported} >= {a, b}
    other_root = tmp_path / "other"
    (other_root / ".cogd" / "index").mkdir(parents=True)
    other = MemoryStore(other_root, other_root / ".cogd" / "state.db", other_root / ".cogd" / "index")
    try:
        result = other.import_(exported + [{"type": "rule", "body": "token = ghp_1234567890abcdefghijABCDEFGHIJ123456"},
                                           "not an object"])
        assert set(result["imported"]) >= {a, b}
        assert {r["kind"] for r in result["refused"]} == {"secret_detected", "bad_request"}
        for m in other.list():
            assert m["status"] == "candidate" and m["source"] == "import"
        # the rejected claim arrives as a candidate too ("whatever status they had")
        assert len(other.list()) == 3
    finally:
        other.close()
