"""The MCP, consolidation and doctor acceptance, end to end, with the real processes: ``cogd mcp`` (driven by the MCP SDK's own
stdio client), the daemon with the real MiniLM encoder, the real ``cogd-hook session-end``, a person's
hand edit of a record file, ``cogd doctor`` and ``cogd reset``.

1. A session records three observations through MCP; two of them are the same claim in other words.
2. At SessionEnd the daemon merges them: the later one becomes ``superseded`` by the earlier one,
   which keeps the union of their anchors. Both came from the *same* session, so the merge is not
   independent corroboration: the survivor stays a ``candidate`` (promotion needs hits in two
   sessions, an observation from another session, or a person's verify).
3. A person rejects the third by editing its file (``status: rejected`` and a ``rejected_reason``).
4. The next session's attempt to record that claim again is refused, naming the rejected record.
5. ``cogd doctor`` is green; ``cogd reset`` reproduces the same projection and the same stats.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client, StdioServerParameters

from cogd.paths import Layout
from conftest import (COGD, HOOK_DEADLINE_MS, HOOK_EXIT_SLACK_S, WAIT_S, Daemon, cogd_in_process, copy_stdlib, payload,
                      run_cogd, run_hook, wait_for)
from test_reset import dump, stats

pytestmark = pytest.mark.timeout(900)  # a hang guard: the real model loads, embeds and merges on a busy machine

DECODE = "json/decoder.py::JSONDecoder.decode"
LOADS = "json/__init__.py::loads"
CLAIM = "JSONDecoder.decode raises an error when extra data follows the JSON document"
OTHER_WORDS = "JSONDecoder.decode fails with 'Extra data' if anything trails the JSON value"
THIRD = "json.loads accepts NaN and Infinity by default; pass parse_constant to refuse them"
REASON = "parse_constant only sees -Infinity, Infinity and NaN: it cannot refuse them all alike"


def mcp_session(root, calls):
    async def main():
        params = StdioServerParameters(command=COGD, args=["mcp"], cwd=str(root))
        async with Client(params, read_timeout_seconds=WAIT_S) as client:
            return await calls(client)
    return asyncio.run(main())


def cogd_json(root, *args):
    return json.loads(run_cogd(root, *args, "--json").stdout)


def polled_json(root, *args):
    """``cogd_json`` for a wait's poll: the command's code in this process (a CLI process per poll
    took CPU from the daemon being waited for); the commands around the waits are the real ones."""
    return json.loads(cogd_in_process(root, *args, "--json").stdout)


@pytest.fixture
def repo(tmp_path):
    root = copy_stdlib(tmp_path / "repo", ("json",))  # embeddings on: "other words" needs them
    yield root
    Daemon(root).stop()


def test_acceptance(repo, daemon_factory):
    daemon = daemon_factory(repo)
    wait_for(lambda: daemon.status()["embedding"]["model"], 3 * WAIT_S, "the encoder")
    end = payload("session_end.other.json", repo)
    session = end["session_id"]

    # 1. three observations through MCP, two of them the same claim in other words
    async def record_three(client):
        out = []
        for text, anchors in ((CLAIM, [DECODE]), (OTHER_WORDS, [DECODE, LOADS]), (THIRD, [LOADS])):
            out.append(await client.call_tool("record_observation", {
                "text": text, "anchors": anchors, "session_id": session, "reason": "read json/decoder.py"}))
        return out

    results = mcp_session(repo, record_three)
    for result in results:
        assert not result.is_error, result.content
    first, second, third = (r.structured_content["record"]["id"] for r in results)
    assert all(r.structured_content["record"]["status"] == "candidate" for r in results)

    # 2. SessionEnd: the real hook hands off (silent); the daemon merges in the background (that
    # the reply does not wait for the merge: test_consolidate's hand-off test)
    proc, seconds = run_hook("session-end", end, deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0 and proc.stdout == b"" and seconds < HOOK_DEADLINE_MS / 1000 + HOOK_EXIT_SLACK_S
    merged = wait_for(lambda: (lambda r: r if r["record"]["status"] == "superseded" else None)(
        polled_json(repo, "memory", "show", second)), 3 * WAIT_S, "the merge")
    assert merged["record"]["superseded_by"] == first and merged["survivor"]["id"] == first
    consolidation = [e for e in merged["events"] if e["actor"] == "consolidation"]
    assert [(e["action"], e["old_status"], e["new_status"]) for e in consolidation] == [
        ("supersede", "candidate", "superseded")]
    detail = consolidation[0]["detail"]
    assert detail["step"] == "dedup" and detail["how"] == "embedding" and 0.85 <= detail["score"] < 0.97
    survivor = cogd_json(repo, "memory", "show", first)["record"]
    assert survivor["status"] == "candidate"  # the same session twice is not independent corroboration
    assert survivor["supersedes"] == second
    assert [a["entity"] for a in survivor["anchors"]] == [DECODE, LOADS]  # the union of anchors
    assert cogd_json(repo, "memory", "show", third)["record"]["status"] == "candidate"
    again = cogd_json(repo, "consolidate")
    assert again["actions"] == [] and not again["errors"]  # idempotent

    # 3. a person rejects the third by editing its file
    path = repo / ".cogd" / "memory" / "observations" / f"{third}.md"
    text = path.read_text(encoding="utf-8")
    assert "status: candidate\n" in text
    path.write_text(text.replace("status: candidate\n", f"status: rejected\nrejected_reason: '{REASON}'\n"),
                    encoding="utf-8")
    rejected = wait_for(lambda: (lambda r: r if r["record"]["status"] == "rejected" else None)(
        polled_json(repo, "memory", "show", third)), 3 * WAIT_S, "the hand edit")
    assert [(e["actor"], e["action"]) for e in rejected["events"]][-1] == ("human", "reject")

    # 4. the next session's attempt to record that claim again is refused with a pointer
    async def record_again(client):
        return await client.call_tool("record_observation", {
            "text": "  JSON.loads accepts NaN and infinity by default -- pass parse_constant to refuse them!",
            "session_id": "next-session"})

    refused = mcp_session(repo, record_again)
    assert refused.is_error
    message = refused.content[0].text
    assert "[tombstoned]" in message and third in message and REASON in message
    assert f"cogd memory show {third}" in message

    # 5. doctor is green; reset reproduces the same projection and stats
    doctor = run_cogd(repo, "doctor", "--json", "--no-model-load", check=False)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["ok"], [c for c in report["checks"] if c["status"] != "ok"]
    # the projection compared across the reset must be settled: every code entity embedded (on a busy
    # machine the embedding pass can still be running here, and the dump would hold no vectors yet)
    wait_for(lambda: (e := daemon.status()["embedding"])["phase"] == "current" and e["coverage"] == 1.0,
             3 * WAIT_S, "the code embeddings")
    before, stats_before = dump(repo), stats(repo)
    memories = {row[0]: row[3] for row in before["memories"]}
    assert memories == {first: "candidate", second: "superseded", third: "rejected"}
    out = run_cogd(repo, "reset", "--yes").stdout
    assert "projection rebuilt" in out
    after = dump(repo)
    for key in before:
        assert after[key] == before[key], key
    assert stats(repo) == stats_before
    sock = Layout(repo).socket_path
    assert sock.exists()
    assert cogd_json(repo, "consolidate", "--dry-run")["actions"] == []  # nothing to redo after the rebuild
