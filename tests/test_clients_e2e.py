"""Every client, end to end: its payload fixtures piped through the real ``cogd-hook --client NAME``
process against one real daemon on a real (small) repository.

Each context event must come back in the client's own output form with a pack that holds the
expected entity; each tool event must leave the right hits in the ledger, under the client's
name. The fixtures (tests/fixtures/clients/, all SYNTHETIC: written from each client's schema or
documentation, docs/agents.md) use this module's repository: the edit they describe rewrites
``lonely_footer`` to the text it has here, as a hook sees a file after the tool wrote it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import (COGD_HOOK, FIXTURES, HOOK_DEADLINE_MS, SMALL_REPO, WAIT_S, deliveries_settled, lexical_only, make_repo,
                      running_daemon, wait_for)

CLIENT_FIXTURES = FIXTURES / "clients"
LONELY = {**SMALL_REPO, "pkg/lonely.py": SMALL_REPO["pkg/lonely.py"]}
PROMPT_ENTITY = "pkg/lonely.py::lonely_footer"
START_ENTITY = "pkg/core.py::normalise"
START_LINE = "- function **normalise** L4-6: `def normalise(text)`"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The small repository, lexical only, with one daemon for the whole module (stopped at the end)."""
    root = make_repo(tmp_path_factory.mktemp("clients") / "repo", LONELY)
    lexical_only(root)
    with running_daemon(root):
        yield root


def fixture(client: str, name: str, root: Path) -> dict:
    """One payload fixture with ``{{CWD}}`` filled in."""
    text = (CLIENT_FIXTURES / client / f"{name}.SYNTHETIC.json").read_text(encoding="utf-8")
    return json.loads(text.replace("{{CWD}}", str(root)))


def hook(client: str, event: str, data: dict, root: Path) -> subprocess.CompletedProcess:
    """The real ``cogd-hook --client CLIENT EVENT``, run in ``root`` with a generous deadline."""
    env = {**os.environ, "COGD_HOOK_DEADLINE_MS": str(HOOK_DEADLINE_MS)}
    env.pop("CLAUDE_PROJECT_DIR", None)
    proc = subprocess.run([COGD_HOOK, "--client", client, event], input=json.dumps(data).encode(),
                          capture_output=True, timeout=120, env=env, cwd=root)
    assert proc.returncode == 0 and proc.stderr == b"", proc
    return proc


def ledger(root: Path, sql: str, *args) -> list[tuple]:
    deliveries_settled(root)
    conn = sqlite3.connect(f"file:{root / '.cogd' / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def context_of(client: str, native: str, proc: subprocess.CompletedProcess) -> str:
    """The pack text from a context hook's stdout, checking the client's output form."""
    out = json.loads(proc.stdout)
    if client in ("claude-code", "codex", "gemini"):
        assert set(out) == {"hookSpecificOutput"}
        assert out["hookSpecificOutput"]["hookEventName"] == native
        return out["hookSpecificOutput"]["additionalContext"]
    if client == "cursor":
        assert set(out) == {"additional_context"}
        return out["additional_context"]
    assert client == "cline" and out["cancel"] is False and set(out) == {"cancel", "contextModification"}
    return out["contextModification"]


def hits(root: Path, session: str) -> set[tuple[str, str, str, str]]:
    """``(client, event, entity, hit action)`` of the session's hit delivery items."""
    return set(ledger(root, "SELECT d.client, d.event, i.entity_id, i.hit_action FROM delivery_items i "
                            "JOIN deliveries d ON d.id = i.delivery_id WHERE d.session_id = ? AND i.outcome = 'hit'",
                      session))


def items(root: Path, session: str, event: str) -> list[str]:
    """The entity ids of the session's ``event`` deliveries, by rank."""
    return [r[0] for r in ledger(root, "SELECT i.entity_id FROM delivery_items i JOIN deliveries d ON d.id = "
                                       "i.delivery_id WHERE d.session_id = ? AND d.event = ? ORDER BY d.id, i.rank",
                                 session, event)]


def delivered(root: Path, session: str) -> list[tuple]:
    return ledger(root, "SELECT client, event, source FROM deliveries WHERE session_id = ? ORDER BY id", session)


# client → (session id, [(fixture, cogd event, native event name or None: no context)], tool fixtures,
#           (line range the edit touches), session-end fixture or None)
PROMPTING = {
    "claude-code": ("5a0c1de0-0000-4000-8000-00000000cc01",
                    [("session_start.startup", "session-start", "SessionStart"),
                     ("user_prompt_submit", "prompt-submit", "UserPromptSubmit")],
                    ["post_tool_use.edit"], "pre_compact.auto", "session_end.prompt_input_exit"),
    "codex": ("019ad5c0-0000-7000-8000-00000000cd01",
              [("session_start.startup", "session-start", "SessionStart"),
               ("user_prompt_submit", "prompt-submit", "UserPromptSubmit")],
              ["post_tool_use.bash", "post_tool_use.apply_patch"], "pre_compact.auto", None),
    "gemini": ("6e3b1f20-0000-4000-8000-00000000ge01",
               [("session_start.startup", "session-start", "SessionStart"),
                ("before_agent", "prompt-submit", "BeforeAgent")],
               ["after_tool.read_file", "after_tool.replace"], "pre_compress.auto", "session_end.exit"),
    "cline": ("1764619200000",
              [("task_start", "session-start", "TaskStart"), ("user_prompt_submit", "prompt-submit", "UserPromptSubmit")],
              ["post_tool_use.replace_in_file"], "pre_compact", "task_complete"),
}


@pytest.mark.parametrize("client", sorted(PROMPTING))
def test_prompting_client_gets_packs_and_its_edit_hits(repo, client):
    session, contexts, tools, compact, end = PROMPTING[client]
    packs = []
    for name, event, native in contexts:
        packs.append(context_of(client, native, hook(client, event, fixture(client, name, repo), repo)))
    assert START_LINE in packs[0]  # the repository map leads with the code everything calls
    assert f"`{PROMPT_ENTITY}`" in packs[1]  # the prompt pack's first candidate for the footer bug
    wait_for(lambda: len(delivered(repo, session)) == 2, WAIT_S, "both packs recorded")
    assert delivered(repo, session) == [(client, "session_start", "startup"), (client, "prompt", "")]
    assert START_ENTITY in items(repo, session, "session_start")
    for name in tools:
        assert hook(client, "post-tool-use", fixture(client, name, repo), repo).stdout == (
            b'{"cancel": false}\n' if client == "cline" else b"")
    rows = ledger(repo, "SELECT client, touches FROM tool_uses WHERE session_id = ? ORDER BY id", session)
    assert [r[0] for r in rows] == [client] * len(tools)
    edit = json.loads(rows[-1][1])
    assert {"path": "pkg/lonely.py", "action": "edit", "start_line": 7, "end_line": 8} in edit or \
        {"path": "pkg/lonely.py", "action": "edit", "start_line": 6, "end_line": 8} in edit, edit
    assert (client, "prompt", PROMPT_ENTITY, "edit") in hits(repo, session)
    if client == "gemini":  # its read_file of normalise's lines (start_line/end_line) is a read of that entity
        assert (client, "session_start", START_ENTITY, "read") in hits(repo, session)
    hook(client, "pre-compact", fixture(client, compact, repo), repo)
    assert ledger(repo, "SELECT count(*) FROM working_sets WHERE session_id = ?", session) == [(1,)]
    if end is not None:
        hook(client, "session-end", fixture(client, end, repo), repo)
        wait_for(lambda: ledger(repo, "SELECT client FROM sessions WHERE session_id = ? AND ended_at IS NOT NULL",
                                session) == [(client,)], WAIT_S, "the session ended")


def test_codex_bash_mentions_a_file(repo):
    """A Codex shell command naming a repository file is a weak touch of it."""
    hook("codex", "post-tool-use", fixture("codex", "post_tool_use.bash", repo), repo)
    rows = ledger(repo, "SELECT tool_name, touches FROM tool_uses WHERE client = 'codex' AND tool_name = 'Bash'")
    assert rows and json.loads(rows[-1][1]) == [{"path": "pkg/core.py", "action": "mention", "start_line": None,
                                                 "end_line": None}]


def test_cursor_session_start_pack_and_file_edit_hit(repo):
    """Cursor: context on sessionStart only (additional_context); its afterFileEdit hits the pack."""
    session = "c0a1b2c3-0000-4000-8000-00000000cu01"
    pack = context_of("cursor", "sessionStart", hook("cursor", "session-start", fixture("cursor", "session_start", repo),
                                                     repo))
    assert START_LINE in pack
    # beforeSubmitPrompt cannot add context: the installer wires no prompt hook, and the event injects nothing
    assert hook("cursor", "prompt-submit", {"prompt": "x", "conversation_id": session}, repo).stdout == b"{}\n"
    wait_for(lambda: delivered(repo, session) == [("cursor", "session_start", "startup")], WAIT_S, "the pack recorded")
    assert START_ENTITY in items(repo, session, "session_start")
    assert hook("cursor", "post-tool-use", fixture("cursor", "after_file_edit", repo), repo).stdout == b"{}\n"
    assert hook("cursor", "post-tool-use", fixture("cursor", "post_tool_use.read", repo), repo).stdout == b"{}\n"
    rows = ledger(repo, "SELECT tool_name, touches FROM tool_uses WHERE session_id = ? ORDER BY id", session)
    assert [(r[0], json.loads(r[1])) for r in rows] == [
        ("afterFileEdit", [{"path": "pkg/core.py", "action": "edit", "start_line": 6, "end_line": 6}]),
        ("Read", [{"path": "pkg/lonely.py", "action": "read", "start_line": None, "end_line": None}])]
    assert ("cursor", "session_start", "pkg/core.py::normalise", "edit") in hits(repo, session)
    hook("cursor", "session-end", fixture("cursor", "session_end", repo), repo)
    wait_for(lambda: ledger(repo, "SELECT client, end_reason FROM sessions WHERE session_id = ?", session)
             == [("cursor", "completed")], WAIT_S, "the session ended")


def test_copilot_records_tool_uses_without_packs(repo):
    """Copilot CLI processes no output of sessionStart/userPromptSubmitted: no pack is made or
    recorded for them; its tool uses (camelCase, arguments as a JSON string) are recorded."""
    session = "a7c4e9d0-0000-4000-8000-00000000cp01"
    for name, event in (("session_start.new", "session-start"), ("user_prompt_submitted", "prompt-submit")):
        assert hook("copilot", event, fixture("copilot", name, repo), repo).stdout == b""
    for name in ("post_tool_use.edit", "post_tool_use.view"):
        assert hook("copilot", "post-tool-use", fixture("copilot", name, repo), repo).stdout == b""
    hook("copilot", "session-end", fixture("copilot", "session_end.complete", repo), repo)
    assert delivered(repo, session) == []
    rows = ledger(repo, "SELECT client, tool_name, touches FROM tool_uses WHERE session_id = ? ORDER BY id", session)
    assert [(r[0], r[1], json.loads(r[2])) for r in rows] == [
        ("copilot", "edit", [{"path": "pkg/lonely.py", "action": "edit", "start_line": 7, "end_line": 8}]),
        ("copilot", "view", [{"path": "pkg/core.py", "action": "read", "start_line": 4, "end_line": 6}])]
    wait_for(lambda: ledger(repo, "SELECT client, end_reason FROM sessions WHERE session_id = ?", session)
             == [("copilot", "complete")], WAIT_S, "the session ended")


def test_unknown_client_exits_quietly_and_logs(repo):
    proc = subprocess.run([COGD_HOOK, "--client", "emacs", "session-start"], input=b"{}", capture_output=True,
                          timeout=60, cwd=repo)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    log = (repo / ".cogd" / "logs" / "hook.log").read_text()
    assert "unknown client 'emacs'" in log


def test_stats_and_show_break_hit_rates_down_by_client(repo):
    """`cogd stats` and `cogd show` report each client's deliveries and hits as the ledger holds them."""
    from conftest import run_cogd

    stats = json.loads(run_cogd(repo, "stats", "--json").stdout)["by_client"]
    expected = {}
    for client, deliveries in ledger(repo, "SELECT client, count(*) FROM deliveries GROUP BY client"):
        hits, misses, pending = ledger(
            repo, "SELECT sum(i.outcome = 'hit'), sum(i.outcome = 'miss'), sum(i.outcome = 'pending') "
                  "FROM delivery_items i JOIN deliveries d ON d.id = i.delivery_id WHERE d.client = ?", client)[0]
        expected[client] = (deliveries, hits, misses, pending)
    assert {c: (r["deliveries"], r["hits"], r["misses"], r["pending"]) for c, r in stats.items()
            if r["deliveries"]} == expected
    assert stats["copilot"]["deliveries"] == 0 and stats["copilot"]["tool_uses"] == 2
    assert set(expected) == {"claude-code", "cline", "codex", "cursor", "gemini"}
    shown = run_cogd(repo, "show", PROMPT_ENTITY).stdout
    for client in ("claude-code", "cline", "codex", "gemini"):  # each delivered it twice and edited it
        [(n, hits)] = ledger(repo, "SELECT count(*), sum(i.outcome = 'hit') FROM delivery_items i JOIN deliveries d "
                                   "ON d.id = i.delivery_id WHERE d.client = ? AND i.entity_id = ?", client, PROMPT_ENTITY)
        assert f"  {client}: {n} deliveries, {hits} hits" in shown
        assert n == 2 and hits >= 1
    table = run_cogd(repo, "stats").stdout
    assert "hit rate by client" in table and "copilot" in table
