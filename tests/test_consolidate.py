"""Consolidation step by step, on a real MemoryStore (real files, real SQLite) and a real usage ledger.

Ledger evidence (deliveries, hits, misses) is written through :class:`cogd.usage.ledger.Ledger`
itself, as the daemon does; the real MiniLM encoder is loaded only for the test about embeddings.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from cogd.config import ConfigError, ConsolidateConfig, load_config
from cogd.memory import lattice
from cogd.memory.consolidate import STEPS, consolidate, contradiction, resolve_survivor
from cogd.memory.errors import MemoryRefused
from cogd.memory.api import MemoryStore
from cogd.memory.normalise import content_hash
from cogd.memory.record import Anchor, Record, new_id, parse, serialise
from cogd.usage.ledger import Ledger
from cogd.usage.touches import Touch
from conftest import WAIT_S

DAY = 86400.0
CLAIM = "JSONDecoder.decode raises an error when extra data follows the JSON document"
PARAPHRASE = "JSONDecoder.decode fails with 'Extra data' if anything trails the JSON value"
NEGATION = "JSONDecoder.decode ignores extra data that follows the JSON document"


# ``root`` and ``store`` (a MemoryStore without an encoder) are conftest's fixtures.
def open_store(root: Path, embed=None) -> MemoryStore:
    return MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index", embed=embed)


@pytest.fixture
def ledger(root: Path):
    led = Ledger(root / ".cogd" / "state.db")
    yield led
    led.close()


def run(store: MemoryStore, root: Path, config: ConsolidateConfig | None = None, **kwargs):
    return consolidate(store, root / ".cogd" / "state.db", config or ConsolidateConfig(), **kwargs)


def status(store: MemoryStore, entity_id: str) -> str:
    return store.get(entity_id)["record"]["status"]


def arrive(store: MemoryStore, text: str, *, status: str = "candidate", session_id: str = "", title: str | None = None,
           anchors: tuple[Anchor, ...] = (), created_at: float | None = None, source: str = "agent") -> str:
    """A record file that arrives on its own (a teammate's memory through git pull); returns its id."""
    now = time.time() if created_at is None else created_at
    record = Record(id=new_id(), type="observation", title=title or text.splitlines()[0][:80], status=status,
                    body=text, created_at=now, updated_at=now, source=source, session_id=session_id,
                    anchors=list(anchors))
    path = store.memory_dir / record.relpath()
    path.write_text(serialise(record), encoding="utf-8")
    store.sync()
    assert store.projection.row(record.id) is not None
    return record.id


def deliver(ledger: Ledger, session: str, memory_id: str, *, hit: bool, at: float) -> None:
    """One pack holding the memory in ``session``; a Read of its file makes it a hit, the session's end a miss."""
    path = f".cogd/memory/observations/{memory_id}.md"
    ledger.record_delivery(session, "prompt", "", "q", "pack", [{
        "rank": 1, "entity_id": memory_id, "kind": "observation", "path": path, "start_line": 0, "end_line": 0,
        "score": 1.0, "chars": 10, "pointer": False}], now=at)
    if hit:
        ledger.record_tool_use_with_hits(session, "Read", "", [Touch(path, "read")], now=at + 1)
    ledger.end_session(session, "other", now=at + 2)


def consolidation_events(store: MemoryStore) -> list[dict]:
    return [e for e in store.events() if e["actor"] == "consolidation"]


# ---- the contradiction guard ---------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    (CLAIM, PARAPHRASE),
    ("parse_date returns naive datetimes when the header has no zone",
     "When the Date header lacks a timezone, parse_date gives a naive datetime"),
    ("json.dumps sorts keys only when sort_keys=True is passed",
     "Keys are emitted in sorted order by json.dumps only if you pass sort_keys=True"),
    ("The email parser drops the trailing newline of multipart bodies",
     "Multipart bodies lose their final newline when the email parser reads them"),
])
def test_paraphrases_are_not_contradictions(a, b):
    assert contradiction(a, b) is None


@pytest.mark.parametrize("a, b, sign", [
    ("parse_date returns naive datetimes when the header has no zone",
     "parse_date returns aware datetimes when the header has no zone", "swap"),
    (CLAIM, NEGATION, "swap"),
    ("json.dumps sorts keys only when sort_keys=True is passed",
     "json.dump sorts keys only when sort_keys=True is passed", "swap"),  # code names compare whole
    ("Packs are capped at 8000 characters", "Packs are capped at 9500 characters", "swap"),
    ("json.dumps sorts keys only when sort_keys=True is passed",
     "json.dumps always sorts keys, even without sort_keys", "negation"),
    ("The watcher debounces file events", "The watcher doesn't debounce file events", "negation"),
    ("json.loads accepts NaN by default", "json.loads only accepts NaN by default", "qualifier"),
])
def test_contradictions_are_kept_apart(a, b, sign):
    assert contradiction(a, b).startswith(sign)


# ---- dedup ------------------------------------------------------------------------------------------
def test_exact_duplicate_merges_into_the_active_one_with_union_of_anchors_and_evidence(store, root):
    kept = arrive(store, "Never call parse_date on UTC strings", status="active", session_id="s1",
                  anchors=(Anchor("email/utils.py::parsedate", "aaa"),), created_at=time.time() - 50)
    dup = arrive(store, "never call PARSE_DATE on utc strings!", session_id="s2",
                 anchors=(Anchor("email/utils.py::parsedate", "aaa"), Anchor("email/utils.py::format", "bbb")))
    report = run(store, root).as_dict()
    assert report["counts"] == {"dedup": 1, "promote": 0, "decay": 0, "retention": 0}
    action = report["actions"][0]
    assert (action["id"], action["from"], action["to"], action["applied"]) == (dup, "candidate", "superseded", True)
    assert action["detail"]["superseded_by"] == kept and action["detail"]["how"] == "exact"
    loser, survivor = store.get(dup)["record"], store.get(kept)["record"]
    assert (loser["status"], loser["superseded_by"]) == ("superseded", kept)
    assert survivor["status"] == "active" and survivor["supersedes"] == dup
    assert [a["entity"] for a in survivor["anchors"]] == ["email/utils.py::parsedate", "email/utils.py::format"]
    on_disk = parse((store.memory_dir / f"observations/{kept}.md").read_text(encoding="utf-8"))
    assert [e["id"] for e in on_disk.extra["evidence"]] == [dup]
    assert on_disk.extra["evidence"][0]["session_id"] == "s2" and on_disk.extra["evidence"][0]["how"] == "exact"
    assert parse((store.memory_dir / f"observations/{dup}.md").read_text()).superseded_by == kept
    events = consolidation_events(store)
    assert [(e["entity_id"], e["action"], e["old_status"], e["new_status"]) for e in events] == [
        (dup, "supersede", "candidate", "superseded"), (kept, "merge", "active", "active")]
    assert events[0]["detail"]["step"] == "dedup" and events[0]["detail"]["superseded_by"] == kept
    # idempotent: nothing left to do, nothing logged
    again = run(store, root).as_dict()
    assert again["actions"] == [] and len(consolidation_events(store)) == 2
    assert resolve_survivor(store, dup) == {"id": kept, "status": "active", "chain": [dup, kept]}
    assert resolve_survivor(store, kept)["chain"] == [kept]


def test_a_candidate_cannot_be_superseded_by_hand_only_by_a_merge():
    assert not lattice.allowed("candidate", "superseded")
    assert lattice.transition("candidate", "superseded", merge=True) == "supersede"
    with pytest.raises(MemoryRefused):
        lattice.transition("stale", "superseded", merge=True)


def test_survivor_rule_prefers_more_hits_then_the_older(store, root, ledger):
    old = arrive(store, "The watcher flushes a batch after 50 ms of quiet", title="watcher flush after quiet",
                 session_id="s1", created_at=time.time() - 100)
    used = arrive(store, "The watcher flushes a batch after 50 ms of quiet time", title="watcher flushes after quiet",
                  session_id="s1")
    deliver(ledger, "s1", used, hit=True, at=time.time())
    report = run(store, root, steps=("dedup",)).as_dict()
    assert [(a["id"], a["detail"]["superseded_by"], a["detail"]["how"]) for a in report["actions"]] == [
        (old, used, "title")]
    # without hits the older one survives
    a = arrive(store, "Hooks never block the agent for more than the deadline", session_id="s3",
               created_at=time.time() - 100)
    b = arrive(store, "Hooks never block the agent for more than their deadline", session_id="s3")
    report = run(store, root, steps=("dedup",)).as_dict()
    assert [(x["id"], x["detail"]["superseded_by"]) for x in report["actions"]] == [(b, a)]


def test_a_claim_and_its_negation_are_kept_apart(store, root):
    first = arrive(store, "parse_date returns naive datetimes when the header has no zone", session_id="s1")
    second = arrive(store, "parse_date returns aware datetimes when the header has no zone", session_id="s2")
    report = run(store, root).as_dict()
    assert report["actions"] == []
    (pair,) = report["kept_apart"]
    assert pair["ids"] == [first, second] and pair["reason"] == "swap: naive vs aware" and pair["how"] == "title"
    assert status(store, first) == status(store, second) == "candidate"


@pytest.fixture(scope="module")
def real_embed():
    """The bundled MiniLM encoder as the store's embed function (about 1 s to load)."""
    from cogd.config import EmbedConfig
    from cogd.embed.encoder import Encoder
    from cogd.embed.model import resolve_model

    info = resolve_model(EmbedConfig(), Path.cwd())
    encoder = Encoder(info, threads=1)
    return lambda text: (info.id, encoder.encode_query(text))


def test_paraphrase_merges_by_embedding_and_negation_does_not(root, real_embed):
    store = open_store(root, real_embed)
    try:
        first = store.record("observation", CLAIM, session_id="s1")["record"]["id"]
        second = store.record("observation", PARAPHRASE, session_id="s1")["record"]["id"]
        negation = store.record("observation", NEGATION, session_id="s1")["record"]["id"]
        plan = run(store, root, dry_run=True).as_dict()
        assert plan["dry_run"] and [a["applied"] for a in plan["actions"]] == [False]
        assert status(store, second) == "candidate"  # a dry run changes nothing
        report = run(store, root).as_dict()
        (action,) = report["actions"]
        assert (action["id"], action["detail"]["superseded_by"], action["detail"]["how"]) == (second, first, "embedding")
        assert 0.9 < action["detail"]["score"] < 0.97  # above [consolidate] similarity, below the write path's 0.97
        assert any(negation in pair["ids"] for pair in report["kept_apart"])
        assert status(store, negation) == "candidate"
        # same session: not independent, so the survivor stays a candidate
        assert status(store, first) == "candidate" and status(store, second) == "superseded"
    finally:
        store.close()


# ---- promotion ------------------------------------------------------------------------------------------
def test_promotion_by_hits_in_two_distinct_sessions(store, root, ledger):
    mid = store.record("observation", CLAIM, session_id="s0")["record"]["id"]
    now = time.time()
    deliver(ledger, "s1", mid, hit=True, at=now)
    deliver(ledger, "s1", mid, hit=True, at=now + 10)
    assert run(store, root, steps=("promote",)).as_dict()["actions"] == []  # one session is not enough
    deliver(ledger, "s2", mid, hit=True, at=now + 20)
    report = run(store, root, steps=("promote",)).as_dict()
    (action,) = report["actions"]
    assert (action["id"], action["from"], action["to"]) == (mid, "candidate", "active")
    evidence = action["detail"]["evidence"]
    assert evidence["because"] == ["hits"] and evidence["hit_sessions"] == ["s1", "s2"]
    (event,) = consolidation_events(store)
    assert event["action"] == "activate" and event["detail"]["evidence"]["hit_sessions"] == ["s1", "s2"]
    assert status(store, mid) == "active"
    assert run(store, root).as_dict()["actions"] == []


def test_promotion_by_corroboration_from_another_session(store, root):
    a = arrive(store, "Run the suite with -n 2 on the CI runner", session_id="s1", created_at=time.time() - 10)
    b = arrive(store, "run the suite with -n 2 on the CI runner.", session_id="s2")
    report = run(store, root).as_dict()
    assert [(x["step"], x["id"]) for x in report["actions"]] == [("dedup", b), ("promote", a)]
    evidence = report["actions"][1]["detail"]["evidence"]
    assert evidence["because"] == ["corroboration"] and evidence["corroborated_by"] == [{"id": b, "session_id": "s2"}]
    assert status(store, a) == "active"


def test_a_person_s_verify_promotes_an_agent_s_does_not(store, root):
    mid = store.record("observation", CLAIM, session_id="s1")["record"]["id"]
    store.verify(mid, actor="agent")
    assert run(store, root).as_dict()["actions"] == []
    store.verify(mid, actor="human")
    (action,) = run(store, root).as_dict()["actions"]
    assert action["detail"]["evidence"]["because"] == ["verified"] and status(store, mid) == "active"


# ---- decay ---------------------------------------------------------------------------------------------------
def test_decay_after_misses_and_the_horizon(store, root, ledger):
    mid = store.record("knowledge", "The ledger lives in .cogd/state.db", source="human")["record"]["id"]
    start = time.time()
    for i in range(9):
        deliver(ledger, f"s{i}", mid, hit=False, at=start + i)
    config = ConsolidateConfig()
    assert run(store, root, config, now=start + 31 * DAY).as_dict()["actions"] == []  # 9 misses < 10
    deliver(ledger, "s9", mid, hit=False, at=start + 9)
    assert run(store, root, config, now=start + 29 * DAY).as_dict()["actions"] == []  # inside the horizon
    report = run(store, root, config, now=start + 31 * DAY).as_dict()
    assert report["stale"] == [mid] and report["actions"][0]["detail"]["decay"]["misses_since"] == 10
    assert status(store, mid) == "stale"
    assert consolidation_events(store)[-1]["new_status"] == "stale"
    # a person's verify brings it back and restarts the count: no decay until new misses pile up
    store.verify(mid, actor="human")
    assert status(store, mid) == "active"
    assert run(store, root, config, now=start + 62 * DAY).as_dict()["actions"] == []


def test_a_hit_resets_decay(store, root, ledger):
    mid = store.record("knowledge", "Packs are capped at 9500 characters", source="human")["record"]["id"]
    start = time.time()
    for i in range(12):
        deliver(ledger, f"s{i}", mid, hit=(i == 5), at=start + i)
    assert run(store, root, now=start + 40 * DAY).as_dict()["actions"] == []  # only 6 misses since the hit


# ---- retention --------------------------------------------------------------------------------------------------
def test_retention_prunes_old_rejected_and_superseded_records(store, root):
    rejected = store.record("observation", CLAIM, session_id="s1")["record"]["id"]
    store.transition(rejected, "rejected", reason="it raises only for non-whitespace", actor="human")
    survivor = arrive(store, "Never commit .cogd/index", status="active", created_at=time.time() - 10)
    loser = arrive(store, "never commit .cogd/index!", session_id="s2")
    run(store, root, steps=("dedup",))
    assert status(store, loser) == "superseded"
    now = time.time() + 91 * DAY
    report = run(store, root, ConsolidateConfig(retention_days=90), now=now, steps=("retention",)).as_dict()
    pruned = {a["id"] for a in report["actions"]}
    assert pruned == {rejected, loser} and status(store, survivor) == "active"
    for mid in pruned:
        record = parse((store.memory_dir / f"observations/{mid}.md").read_text(encoding="utf-8"))
        assert record.status == "pruned" and record.body == ""
    # the rejected claim stays refused; the merged duplicate left no tombstone (its claim lives on)
    with pytest.raises(MemoryRefused) as info:
        store.record("observation", CLAIM.upper())
    assert info.value.kind == "tombstoned" and info.value.data["id"] == rejected
    assert store.ledger.tombstone(content_hash("Never commit .cogd/index")) is None
    assert report["actions"][[a["id"] for a in report["actions"]].index(loser)]["detail"]["tombstone"] is False
    # the events' text is redacted as erasure does; the events themselves stay
    events = store.events(rejected)
    assert [e["action"] for e in events] == ["create", "reject", "prune"]
    assert all(e["redacted"] for e in events[:-1]) and CLAIM not in json.dumps(events)
    assert events[-1]["actor"] == "consolidation" and events[-1]["detail"]["step"] == "retention"
    with sqlite3.connect(root / ".cogd" / "state.db") as conn:
        texts = " ".join(str(r) for r in conn.execute("SELECT pre_image, detail FROM events"))
    assert "extra data follows" not in texts
    assert run(store, root, now=now).as_dict()["actions"] == []  # idempotent


def test_retention_leaves_records_younger_than_the_period(store, root):
    mid = store.record("observation", CLAIM)["record"]["id"]
    store.transition(mid, "rejected", reason="wrong", actor="human")
    assert run(store, root, now=time.time() + 89 * DAY).as_dict()["actions"] == []
    assert run(store, root, ConsolidateConfig(retention_days=0), now=time.time() + 900 * DAY).as_dict()["actions"] == []
    assert status(store, mid) == "rejected"


# ---- errors, config ----------------------------------------------------------------------------------------------
def test_a_file_with_a_problem_is_skipped_and_the_rest_goes_on(store, root):
    a = arrive(store, "Run ruff before pushing", session_id="s1", created_at=time.time() - 10)
    b = arrive(store, "run ruff before pushing!", session_id="s2")
    path = store.memory_dir / f"observations/{b}.md"
    path.write_text(path.read_text().replace("status: candidate", "status: pruned"), encoding="utf-8")
    report = run(store, root).as_dict()
    assert report["actions"] == [] and status(store, b) == "candidate"  # its pending problem protects it
    assert status(store, a) == "candidate"
    with pytest.raises(MemoryRefused) as info:
        run(store, root, steps=("dedup", "tidy"))
    assert info.value.kind == "bad_request" and "tidy" in str(info.value)
    assert STEPS == ("dedup", "promote", "decay", "retention")


def test_config_section(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[consolidate]\nsimilarity = 0.9\nretention_days = 30\nidle_after_s = 0\n", encoding="utf-8")
    config = load_config(path).consolidate
    assert (config.similarity, config.retention_days, config.idle_after_s) == (0.9, 30.0, 0)
    assert config.token_agreement == 70.0 and config.promote_hit_sessions == 2
    path.write_text("[consolidate]\nsimilarity = 1.5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="similarity"):
        load_config(path)
    path.write_text("[consolidate]\nretention_days = 'soon'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="retention_days"):
        load_config(path)


# ---- in the daemon's service ----------------------------------------------------------------------------------------
def test_session_end_hands_off_and_memory_consolidate_runs_it(root):
    from cogd.config import Config
    from cogd.rpc.protocol import RpcError
    from cogd.daemon.service import Service
    from cogd.paths import Layout

    config = Config()
    config.embed.enabled = False
    config.watch.enabled = False
    service = Service(Layout(root).ensure(), config, start_index=False, start_embedder=False)
    try:
        a = service.call("memory.record", {"type": "rule", "text": "Keep json/ free of imports", "session_id": "s1"})
        b = arrive(service.memory, "keep json/ free of imports!", session_id="s2")
        plan = service.call("memory.consolidate", {"dry_run": True})
        assert plan["dry_run"] and plan["counts"]["dedup"] == 0  # b is an observation, a a rule: other types
        c = service.call("memory.record", {"type": "observation", "text": "json/ has no third-party imports",
                                           "session_id": "s1"})["record"]["id"]
        d = arrive(service.memory, "JSON/ has no third party imports", session_id="s3")
        consolidator = service.consolidator
        with consolidator._run_lock:  # no consolidation can run until this test lets it
            assert service.call("session.end", {"session_id": "s3", "reason": "other"})["ok"]
            # the reply came while the consolidation it started was still waiting: it did not wait for it
            assert consolidator.runs == 0 and consolidator.last_report is None
        service.consolidator.join(WAIT_S)
        assert service.consolidator.last_report["trigger"] == "session_end"
        got = service.call("memory.get", {"id": d})
        assert got["record"]["status"] == "superseded" and got["survivor"]["id"] == c
        assert service.call("memory.get", {"id": c})["record"]["status"] == "active"  # corroborated by s3
        assert "survivor" not in service.call("memory.get", {"id": a["record"]["id"]})
        assert b
        assert service.call("memory.consolidate", {})["actions"] == []
        with pytest.raises(RpcError) as info:
            service.call("memory.consolidate", {"dry_run": "yes"})
        assert info.value.kind == "bad_request"
        assert service.consolidator.on_idle(0.0, config.consolidate.idle_after_s + 1.0)
        service.consolidator.join(WAIT_S)
        assert not service.consolidator.on_idle(0.0, config.consolidate.idle_after_s + 5.0)  # once per stretch
        assert service.consolidator.last_report["trigger"] == "idle"
    finally:
        service.close()


def test_retention_counts_from_the_rejection_not_from_the_file_s_dates(store, root):
    """An old claim rejected by a hand edit today (its file's updated_at untouched) is not pruned today."""
    mid = arrive(store, "The index is rebuilt on every start", created_at=time.time() - 200 * DAY)
    path = store.memory_dir / f"observations/{mid}.md"
    path.write_text(path.read_text().replace("status: candidate\n", "status: rejected\nrejected_reason: it is incremental\n"))
    store.sync()
    assert status(store, mid) == "rejected"
    assert run(store, root).as_dict()["actions"] == []
    (action,) = run(store, root, now=time.time() + 91 * DAY).as_dict()["actions"]
    assert action["id"] == mid and action["to"] == "pruned" and 90 < action["detail"]["age_days"] < 92
