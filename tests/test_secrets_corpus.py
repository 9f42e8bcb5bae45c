"""Acceptance: no credential reaches ``.cogd/`` in clear, by any path, in any field.

A corpus of fake credentials (tests/secret_corpus.py, every family the README lists) is pushed
through every memory field by the CLI (``cogd memory add``), the daemon's ``memory.*`` methods, the
real MCP server over stdio, hand-edited record files picked up by the daemon's sync, and through
prompts, PostToolUse, PreCompact and SessionEnd payloads sent by the real ``cogd-hook`` to a real
daemon. Then every file under ``.cogd/`` (databases with their WAL and SHM files, logs, record
files) is searched byte by byte for a distinctive middle part of each secret: none may be there.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import yaml
from mcp import Client, StdioServerParameters

from cogd.rpc.client import RemoteError, call
from cogd.memory.record import new_id
from cogd.paths import Layout
from conftest import COGD, WAIT_S, cogd_in_process, lexical_only, make_repo, payload, run_cogd, run_hook, wait_for
from secret_corpus import build

pytestmark = pytest.mark.timeout(600)

CORPUS = build()
MIDDLES = [middle for _, _, middle in CORPUS]
DB_PY = ('"""Database access."""\n\n\ndef connect_database(settings):\n    """Open the connection the settings name."""\n'
         '    url = settings["database_url"]\n    return url\n')
CONFIG_PY = ('"""Settings."""\n\n\ndef load_settings(path):\n    """Read the settings file at path."""\n'
             '    with open(path) as fh:\n        return dict(line.split("=", 1) for line in fh)\n')
ANCHOR = "app/db.py::connect_database"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = lexical_only(make_repo(tmp_path_factory.mktemp("secrets") / "repo",
                                  {"app/db.py": DB_PY, "app/config.py": CONFIG_PY}))
    try:
        run_cogd(root, "start")
        cogd_in_process(root, "index")  # after the real start: its code here, asking the daemon
        yield root
    finally:
        run_cogd(root, "stop", check=False)


def _rpc(root: Path, method: str, params: dict):
    return call(Layout(root).socket_path, method, params, timeout=60)


def _leaks(root: Path) -> dict[str, list[str]]:
    """``{relative file: [middles found]}`` over every regular file under ``.cogd/``."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / ".cogd").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        hits = [m for m in MIDDLES if m.encode() in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def _memory_files(root: Path) -> list[Path]:
    return sorted((root / ".cogd" / "memory").rglob("*.md"))


def test_no_secret_reaches_dot_cogd_by_any_path(repo):
    root = repo
    files_before = _memory_files(root)

    # ---- 1. the daemon's memory methods: each secret in each field on its own -------------------------
    for family, text, _ in CORPUS:
        attempts = [
            {"text": f"Deploy notes ({family}):\n{text}"},
            {"text": "a note about the deploy", "title": " ".join(text.split())[:200]},
            {"text": "a note about the deploy", "tags": [text]},
            {"text": "a note about the deploy", "creation_reason": text[:500]},
            {"text": "a note about the deploy", "anchors": [text]},
            {"text": "a note about the deploy", "session_id": text[:200]},
        ]
        for params in attempts:
            with pytest.raises(RemoteError) as info:
                _rpc(root, "memory.record", {"type": "knowledge", "source": "agent", **params})
            assert info.value.kind in ("secret_detected", "bad_request"), (family, params.keys(), info.value)
            if info.value.kind == "bad_request":  # only a title that a secret's line breaks made too long
                assert "title" in params and len(" ".join(text.split())) > 200, (family, str(info.value))
    benign = _rpc(root, "memory.record", {"type": "knowledge", "source": "human",
                                         "text": "connect_database reads database_url from the settings"})
    benign_id = benign["record"]["id"]
    for family, text, _ in CORPUS:
        with pytest.raises(RemoteError) as info:
            _rpc(root, "memory.transition", {"id": benign_id, "status": "rejected", "reason": text})
        assert info.value.kind == "secret_detected", family

    # ---- 2. the CLI: every secret through every field (batched per field) --------------------------------
    def cli_refused(*args: str, stdin: str | None = None) -> None:
        import subprocess

        proc = subprocess.run([COGD, "memory", "add", "knowledge", *args], cwd=root, input=stdin,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "secret" in (proc.stdout + proc.stderr), (args[:3], proc.stdout, proc.stderr)

    cli_refused("-", stdin="\n\n".join(text for _, text, _ in CORPUS))
    cli_refused("a note about the deploy", *[a for _, text, _ in CORPUS for a in ("--tag", text)])
    cli_refused("a note about the deploy", *[a for _, text, _ in CORPUS for a in ("--anchor", text)])
    for family, text, _ in CORPUS:
        one_line = " ".join(text.split())
        if len(one_line) <= 200:
            cli_refused("a note about the deploy", "--title", one_line)
        cli_refused("a note about the deploy", "--reason", text[:500])

    # ---- 2b. `cogd memory edit` adding secrets in $EDITOR: refused, and the kept copy is masked -----------
    import os
    import stat
    import subprocess

    editor = root.parent / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "%s\\n" "$SECRET" >> "$1"\n', encoding="utf-8")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    record_path = next(p for p in _memory_files(root) if p.stem == benign_id)
    before = record_path.read_bytes()
    for family, text, middle in (CORPUS[0], CORPUS[-3], next(c for c in CORPUS if c[0] == "private_key")):
        proc = subprocess.run([COGD, "memory", "edit", benign_id], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "EDITOR": str(editor), "VISUAL": str(editor), "SECRET": text},
                              timeout=120)
        assert proc.returncode == 1 and "secret_detected" in proc.stderr, (family, proc.stderr)
        kept = Path(proc.stderr.split("your edit is kept in")[1].split()[0])
        assert middle not in kept.read_text(encoding="utf-8") and "[secret:" in kept.read_text(encoding="utf-8")
        kept.unlink()
        assert record_path.read_bytes() == before

    # ---- 3. the MCP server over stdio: each secret in each field of each memory tool ---------------------
    async def mcp_calls(client):
        results = []
        for family, text, _ in CORPUS:
            for tool in ("record_observation", "create_rule", "create_knowledge"):
                for args in ({"text": text}, {"text": "a deploy note", "title": " ".join(text.split())[:200]},
                             {"text": "a deploy note", "tags": [text]}, {"text": "a deploy note", "reason": text[:500]},
                             {"text": "a deploy note", "anchors": [text]},
                             {"text": "a deploy note", "session_id": text[:200]}):
                    if tool != "record_observation" and set(args) != {"text"}:
                        continue  # the three tools share one path; every field is tried on one of them
                    results.append((family, tool, await client.call_tool(tool, args)))
            results.append((family, "reject", await client.call_tool("reject", {"id": benign_id, "reason": text[:500]})))
            results.append((family, "get_context", await client.call_tool(
                "get_context", {"prompt": f"where is connect_database? {text}", "session_id": "mcp-secrets"})))
        return results

    async def mcp_main():
        params = StdioServerParameters(command=COGD, args=["mcp"], cwd=str(root))
        async with Client(params, read_timeout_seconds=120) as client:
            return await mcp_calls(client)

    for family, tool, result in asyncio.run(mcp_main()):
        if tool == "get_context":
            assert not result.is_error, (family, result.content)
        else:
            assert result.is_error, (family, tool, result.content)

    # ---- 4. hand-edited record files: a secret in each field, the daemon's sync masks the file -----------
    placements = ("body", "title", "tags", "creation_reason", "anchor", "extra", "private_body")
    written: dict[Path, str] = {}
    for index, (family, text, middle) in enumerate(CORPUS):
        where = placements[index % len(placements)]
        entity_id = new_id()
        front = {"id": entity_id, "type": "knowledge", "title": f"hand note {index}", "status": "active",
                 "created_at": "2026-11-30T10:12:00.000000Z", "updated_at": "2026-11-30T10:12:00.000000Z",
                 "source": "human", "creation_reason": "written by hand", "anchors": [], "tags": ["ops"]}
        body = f"hand-written note {index} about connect_database"
        if where == "body":
            body += f"\n\n{text}"
        elif where == "private_body":
            body += f"\n\n<private>{text}</private>"
        elif where == "title":
            front["title"] = " ".join(text.split())[:190]
            if middle not in front["title"]:
                body += f"\n\n{text}"
        elif where == "tags":
            front["tags"] = ["ops", text]
        elif where == "creation_reason":
            front["creation_reason"] = text
        elif where == "anchor":
            front["anchors"] = [{"entity": text, "hash": "0" * 16}]
        else:
            front["reviewed_by"] = {"note": text}
        path = root / ".cogd" / "memory" / "knowledge" / f"{entity_id}.md"
        path.write_text("---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n" + body + "\n",
                        encoding="utf-8")
        written[path] = middle
    def unmasked() -> list[str]:
        return [p.name for p, m in written.items() if m in p.read_text(encoding="utf-8")]

    wait_for(lambda: not unmasked(), WAIT_S, "the sync to mask every file")
    assert not unmasked(), f"not masked by the sync: {unmasked()}"
    events = _rpc(root, "memory.events", {"limit": 100_000})["events"]
    masked_ids = {e["entity_id"] for e in events if e["action"] == "secret_masked"}
    assert {p.stem for p in written} <= masked_ids
    for path in written:  # the masked file is a good record: it was accepted (no pending problem)
        got = _rpc(root, "memory.get", {"id": path.stem})
        assert got["problem"] is None, (path.name, got["problem"])
        assert "[secret:" in got["text"]

    # ---- 5. prompts, tool uses, compaction, session end through the real cogd-hook -----------------------
    groups: list[list[str]] = [[]]
    for _, text, _ in CORPUS:
        if sum(len(t) for t in groups[-1]) + len(text) > 1500:
            groups.append([])
        groups[-1].append(text)
    for number, group in enumerate(groups):
        session = f"secrets-session-{number}"
        prompt = "connect_database fails with these settings, why?\n" + "\n".join(group)
        proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, prompt=prompt, session_id=session))
        assert proc.returncode == 0 and proc.stdout, proc.stderr  # a pack came back: the delivery is recorded
        edit = payload("post_tool_use.edit.json", root, session_id=session, tool_use_id=f"toolu_{number}")
        edit["tool_input"] = {"file_path": str(root / "app" / "db.py"), "old_string": "return url",
                              "new_string": "return url  # " + group[0]}
        edit["tool_response"] = {"filePath": str(root / "app" / "db.py"), "oldString": "return url",
                                 "newString": "return url  # " + group[0],
                                 "structuredPatch": [{"oldStart": 4, "oldLines": 4, "newStart": 4, "newLines": 4,
                                                      "lines": [" def connect_database(settings):", "+" + group[0]]}]}
        assert run_hook("post-tool-use", edit)[0].returncode == 0
        bash = payload("post_tool_use.bash.json", root, session_id=session,
                       tool_use_id=group[-1].split()[0][:200] if number == 0 else f"toolu_bash_{number}")
        bash["tool_input"] = {"command": "export " + " ".join(group), "description": group[0]}
        bash["tool_response"] = {"stdout": "\n".join(group), "stderr": group[-1]}
        assert run_hook("post-tool-use", bash)[0].returncode == 0
        assert run_hook("pre-compact", {"session_id": session, "cwd": str(root), "hook_event_name": "PreCompact",
                                        "trigger": group[0]})[0].returncode == 0
        assert run_hook("session-end", {"session_id": session, "cwd": str(root), "hook_event_name": "SessionEnd",
                                        "reason": group[-1]})[0].returncode == 0
    # A secret in the session id itself, and a prompt beyond what the ledger keeps.
    proc, _ = run_hook("prompt-submit", payload("user_prompt_submit.json", root, session_id=CORPUS[0][1].split()[-1] + "-s",
                                                prompt="connect_database again " + CORPUS[1][1]))
    assert proc.returncode == 0

    # The prompts did reach the ledger (masked): the test is not vacuous.
    with sqlite3.connect(root / ".cogd" / "state.db") as conn:
        queries = [r[0] for r in conn.execute("SELECT query FROM deliveries WHERE event = 'prompt'")]
        associations = [r[0] for r in conn.execute("SELECT query FROM associations")]
        tool_uses = conn.execute("SELECT count(*) FROM tool_uses").fetchone()[0]
    assert sum("connect_database fails" in q for q in queries) == len(groups)
    assert all("[secret:" in q for q in queries if "connect_database fails" in q)
    assert len(associations) >= len(groups) and all("[secret:" in a for a in associations)
    assert tool_uses >= 2 * len(groups)

    # ---- 6. the raw bytes of everything under .cogd/, while the daemon runs and after it stops ----------
    assert _leaks(root) == {}
    run_cogd(root, "stop")
    assert _leaks(root) == {}
    assert len(_memory_files(root)) == len(files_before) + 1 + len(written)  # the benign memory and the hand files
