"""Context packs that learn, end to end: real daemon, real hooks, real standard-library code.

Sessions are replayed through the real ``cogd-hook`` process with an injected
clock (``COGD_NOW``, honoured because the test's config trusts it).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import HOOK_DEADLINE_MS, STDLIB, WAIT_S, git, payload, run_cogd, run_hook, running_daemon, wait_for

PROMPT = "the date in an email header is parsed wrong"
# evidence_k = 0 and weights of 0.5: one session's evidence at a full, visible weight, so a single
# replayed session shows the mechanism end to end (the shipped shrinkage and weights, which need
# several sessions, are tests/test_evidence.py's)
CONFIG = ("[embed]\nenabled = false\n[usage]\ntrust_client_clock = true\n"
          "[rank]\nevidence_k = 0\nutility_weight = 0.5\nassociation_weight = 0.5\n")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("learning") / "repo"
    root.mkdir()
    for name in ("json", "email"):
        shutil.copytree(STDLIB / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "import")
    (root / ".cogd").mkdir()
    (root / ".cogd" / "config.toml").write_text(CONFIG)
    with running_daemon(root):
        yield root


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def env(self) -> dict:
        self.now += 10
        return {"COGD_NOW": repr(self.now)}


@pytest.fixture(scope="module")
def clock():
    return Clock()


def hook(root: Path, clock: Clock, event: str, data: dict) -> str:
    # what the packs hold is the point here: a generous deadline, set by the test
    proc, _ = run_hook(event, data, env=clock.env(), deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0
    return proc.stdout.decode()


def context_of(stdout: str) -> str:
    return json.loads(stdout)["hookSpecificOutput"]["additionalContext"] if stdout.strip() else ""


def prompt_items(root: Path, session: str) -> list[dict]:
    conn = sqlite3.connect(root / ".cogd" / "state.db")
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT id, source FROM deliveries WHERE session_id = ? AND event = 'prompt' "
                       "ORDER BY id DESC LIMIT 1", (session,)).fetchone()
    items = [dict(r) for r in conn.execute("SELECT * FROM delivery_items WHERE delivery_id = ? ORDER BY rank",
                                           (row["id"],))]
    conn.close()
    return [{**i, "delivery_source": row["source"]} for i in items]


def edit(root: Path, session: str, item: dict) -> dict:
    """A PostToolUse Edit whose one hunk covers the item's first lines."""
    data = payload("post_tool_use.edit.json", root, session_id=session)
    path = str(root / item["path"])
    data["tool_input"]["file_path"] = path
    data["tool_response"]["filePath"] = path
    data["tool_response"]["structuredPatch"][0].update(newStart=item["start_line"], newLines=2,
                                                        oldStart=item["start_line"], oldLines=2)
    return data


def test_session_start_sources(repo, clock):
    session = "learn-start"
    first = context_of(hook(repo, clock, "session-start", payload("session_start.startup.json", repo, session_id=session)))
    assert first.startswith("## cogd: repository map")
    assert "`email/" in first and "L" in first
    # resume: the session already holds this exact pack
    again = hook(repo, clock, "session-start", payload("session_start.resume.json", repo, session_id=session))
    assert again == ""
    # clear: a fresh pack
    cleared = context_of(hook(repo, clock, "session-start", payload("session_start.resume.json", repo,
                                                                    session_id=session, source="clear")))
    assert cleared == first
    conn = sqlite3.connect(repo / ".cogd" / "state.db")
    sources = [r[0] for r in conn.execute("SELECT source FROM deliveries WHERE session_id = ? ORDER BY id", (session,))]
    conn.close()
    assert sources == ["startup", "clear"]


def test_an_edited_item_is_a_hit_and_ranks_higher_next_time(repo, clock):
    first_session = "learn-1"
    hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo, session_id=first_session, prompt=PROMPT))
    before = prompt_items(repo, first_session)
    full = [i for i in before if not i["pointer"]]
    assert len(full) >= 6
    target = full[4]  # a fifth-ranked function the agent then edits
    hook(repo, clock, "post-tool-use", edit(repo, first_session, target))
    hook(repo, clock, "session-end", payload("session_end.other.json", repo, session_id=first_session))

    conn = sqlite3.connect(repo / ".cogd" / "state.db")
    associated = conn.execute("SELECT entity_id, query FROM associations").fetchall()
    conn.close()
    assert (target["entity_id"], PROMPT) in associated  # the edit links the function to the prompt
    after_first = {i["entity_id"]: i["outcome"] for i in prompt_items(repo, first_session)}
    assert after_first[target["entity_id"]] == "hit"
    assert set(after_first.values()) == {"hit", "miss"}  # everything else closed as a miss at session end

    shown = json.loads(run_cogd(repo, "show", target["entity_id"], "--json").stdout)
    assert (shown["retrieval_count"], shown["used_count"], shown["ignored_count"]) == (1, 1, 0)
    assert shown["utility"] > shown["base_rate"]
    stats = json.loads(run_cogd(repo, "stats", "--json").stdout)
    assert stats["hits"] >= 1 and stats["misses"] >= len(before) - 1
    assert stats["hit_rate"] == pytest.approx(stats["hits"] / (stats["hits"] + stats["misses"]), abs=1e-4)
    assert stats["deliveries"] >= 1
    # evidence behind each learned source: for utility this session and the session-start test's (its
    # startup pack closed as misses at "clear"), for association this session; this module's
    # evidence_k = 0 applies the weights in full
    # history's sources count commits: the one commit (an import of whole packages) is a mass
    # change, so no change request stands behind them and they weigh nothing
    assert stats["learned"] == {"utility": {"sessions": 2, "weight": 0.5, "effective_weight": 0.5},
                                "association": {"sessions": 1, "weight": 0.5, "effective_weight": 0.5},
                                "history_association": {"commits": 0, "weight": 0.5, "effective_weight": 0.0},
                                "co_change": {"commits": 0, "weight": 0.5, "effective_weight": 0.0}}

    second_session = "learn-2"
    hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo, session_id=second_session, prompt=PROMPT))
    ranks = {i["entity_id"]: i["rank"] for i in prompt_items(repo, second_session)}
    assert ranks[target["entity_id"]] < target["rank"]

    explained = run_cogd(repo, "context", PROMPT, "--explain")
    block = explained.stderr[explained.stderr.index(target["entity_id"]):]
    block = re.split(r"\n\s*\d+\. ", block)[0]  # up to the next item (rich may wrap the signal line)
    assert "utility_x=" in block and "why: " in block and "utility" in block.split("why: ")[1]
    hook(repo, clock, "session-end", payload("session_end.other.json", repo, session_id=second_session))


def test_compaction_keeps_the_working_set(repo, clock):
    session = "learn-compact"
    hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo, session_id=session,
                                               prompt="how are json strings decoded and escaped"))
    items = [i for i in prompt_items(repo, session) if not i["pointer"]]
    target = items[1]
    hook(repo, clock, "post-tool-use", edit(repo, session, target))
    hook(repo, clock, "pre-compact", payload("pre_compact.auto.json", repo, session_id=session))
    compact = context_of(hook(repo, clock, "session-start", payload("session_start.compact.json", repo, session_id=session)))
    assert compact.startswith("## cogd: this session's working set")
    assert target["entity_id"] in compact
    # No item of the compact pack was touched: the next prompt re-adds the working set first.
    text = context_of(hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo, session_id=session,
                                                                 prompt="where is a JSON number parsed")))
    assert "re-added after compaction" in text
    pinned = prompt_items(repo, session)
    assert pinned[0]["entity_id"] == target["entity_id"] and pinned[0]["delivery_source"] == "compact_recovery"


def test_rules_and_memories_ride_in_packs(repo, clock):
    run_cogd(repo, "memory", "add", "rule", "Never change the wire format of email header folding")
    note = run_cogd(repo, "memory", "add", "knowledge",
                    "Date headers are parsed by email.utils.parsedate_to_datetime, which returns naive datetimes "
                    "for -0000 offsets", "--title", "How date headers are parsed")
    assert note.returncode == 0
    start = context_of(hook(repo, clock, "session-start", payload("session_start.startup.json", repo,
                                                                  session_id="learn-memory")))
    assert "### Rules (follow these)" in start and "Never change the wire format" in start
    assert start.index("### Rules") < start.index("`email/")  # rules first, then code
    text = context_of(hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo,
                                                                 session_id="learn-memory", prompt=PROMPT)))
    assert "How date headers are parsed" in text
    assert text.index("How date headers are parsed") < text.index("1. `")
    kinds = [i["kind"] for i in prompt_items(repo, "learn-memory")]
    assert kinds[:2] == ["rule", "knowledge"]  # the rule matches the prompt's words too; code follows


def test_a_stale_memory_is_marked_with_its_age():
    from cogd.memory.projection import MemoryHit
    from cogd.retrieve.memories import render_memories

    now = 1_700_000_000.0
    stale = MemoryHit("01STALE", "observation", "Parser keeps a cache", "It caches headers.", "stale", now - 3 * 86400)
    fresh = MemoryHit("01FRESH", "observation", "Parser is strict", "", "active", now - 60)
    text, items = render_memories([], [stale, fresh], 2000, now=now)
    assert "may be outdated" in text and "3 days ago" in text and "`01STALE`" in text
    assert [i.entity_id for i in items] == ["01STALE", "01FRESH"]
    assert items[0].path == ".cogd/memory/observations/01STALE.md"
    hidden, items = render_memories([], [stale, fresh], 2000, now=now, show_stale=False)
    assert "01STALE" not in hidden and [i.entity_id for i in items] == ["01FRESH"]
    assert render_memories([], [stale], 10, now=now) == ("", [])


def test_an_editor_save_counts_as_a_touch(repo, clock):
    session = "learn-save"
    hook(repo, clock, "prompt-submit", payload("user_prompt_submit.json", repo, session_id=session,
                                               prompt="how does the json encoder indent nested objects"))
    items = [i for i in prompt_items(repo, session) if not i["pointer"] and i["kind"] in ("function", "method")]
    target = items[0]
    path = repo / target["path"]
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(target["start_line"], "    # edited in an editor\n")
    path.write_text("".join(lines))
    proc, _ = run_hook("file-save", None, raw=b"", args=(str(path),), env=clock.env(), deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0

    def outcome() -> str | None:
        got = {i["entity_id"]: i["outcome"] for i in prompt_items(repo, session)}[target["entity_id"]]
        return got if got == "hit" else None

    assert wait_for(outcome, WAIT_S, "the saved entity's outcome to be a hit") == "hit"
    git(repo, "checkout", "--", target["path"])


def test_a_candidate_rides_marked_unconfirmed():
    from cogd.memory.projection import MemoryHit
    from cogd.retrieve.memories import render_memories

    candidate = MemoryHit("01CAND", "observation", "Folding breaks long headers", "", "candidate", 1_700_000_000.0)
    assert render_memories([], [candidate], 2000) == ("", [])  # left out unless asked
    text, items = render_memories([], [candidate], 2000, show_candidates=True)
    assert "unconfirmed" in text and [i.entity_id for i in items] == ["01CAND"]


def test_status_reports_consolidation_after_session_ends(repo, clock):
    hook(repo, clock, "session-end", payload("session_end.other.json", repo, session_id="learn-consolidate"))

    def consolidated() -> dict | None:
        run = json.loads(run_cogd(repo, "status", "--json").stdout)["consolidation"]
        return run if run and run["runs"] >= 1 else None

    run = wait_for(consolidated, WAIT_S, "a consolidation run")
    assert run["runs"] >= 1 and run["last_trigger"] == "session_end" and run["last_error"] is None
    assert "consolidation:" in run_cogd(repo, "status").stdout
