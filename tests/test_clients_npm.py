"""The clients themselves load what the installer writes (no model call).

Needs the clients' own programs: ``claude`` (npm ``@anthropic-ai/claude-code``), ``codex`` (npm ``@openai/codex``) and ``gemini`` (npm
``@google/gemini-cli``), found in ``$COGD_CLIENTS_BIN`` (a folder, e.g. an npm prefix's
``node_modules/.bin``) or on PATH. Each test is skipped, with the reason, when its client is
absent: the suite never downloads them.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import COGD, COGD_HOOK, make_repo

CLIENT_WAIT_S = 90.0  # a client's start on a busy machine; these runs take seconds when quiet


def client_program(name: str) -> str:
    folder = os.environ.get("COGD_CLIENTS_BIN")
    found = shutil.which(name, path=folder) if folder else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (npm install the client, or set COGD_CLIENTS_BIN to its bin folder)")
    return found


@pytest.fixture
def wired(tmp_path):
    """A repository wired for every client by the real `cogd install-hooks --all`, and a private home."""
    root = make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    proc = subprocess.run([COGD, "install-hooks", "--all"], cwd=root, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return root, home, env


def test_codex_loads_cogd_hooks_and_mcp_server(wired):
    codex = client_program("codex")
    root, home, env = wired
    (home / ".codex").mkdir()
    # A project's .codex/ layer loads only in a trusted project (the user's own decision, in their config).
    (home / ".codex" / "config.toml").write_text(f'[projects."{root}"]\ntrust_level = "trusted"\n')
    listed = subprocess.run([codex, "mcp", "list", "--json"], cwd=root, capture_output=True, text=True,
                            timeout=CLIENT_WAIT_S, env=env)
    assert listed.returncode == 0, listed.stderr
    [server] = [s for s in json.loads(listed.stdout) if s["name"] == "cogd"]
    assert server["enabled"] and server["transport"]["command"] == COGD and server["transport"]["args"] == ["mcp"]
    answer = _codex_hooks_list(codex, root, env)
    [data] = answer["data"]
    assert data["errors"] == [] and data["warnings"] == []
    found = {h["eventName"]: (h["command"], h["timeoutSec"], h["matcher"]) for h in data["hooks"]}
    assert found == {
        "sessionStart": (f"{COGD_HOOK} --client codex session-start", 10, None),
        "userPromptSubmit": (f"{COGD_HOOK} --client codex prompt-submit", 10, None),
        "postToolUse": (f"{COGD_HOOK} --client codex post-tool-use", 10, "apply_patch|Bash"),
        "preCompact": (f"{COGD_HOOK} --client codex pre-compact", 5, None),
    }


def _codex_hooks_list(codex: str, root: Path, env: dict) -> dict:
    """Codex's own view of the project's hooks: ``hooks/list`` on its app server (JSON-RPC on stdio)."""
    server = subprocess.Popen([codex, "app-server"], cwd=root, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"clientInfo": {"name": "cogd-tests", "version": "0"}}},
                        {"jsonrpc": "2.0", "method": "initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(root)]}}):
            server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()
        replies: queue.Queue = queue.Queue()
        # a thread reads the lines: select() on a buffered pipe misses lines already in the buffer
        threading.Thread(target=lambda: [replies.put(line) for line in server.stdout], daemon=True).start()
        deadline = time.monotonic() + CLIENT_WAIT_S
        while time.monotonic() < deadline:
            try:
                reply = json.loads(replies.get(timeout=1.0))
            except queue.Empty:
                continue
            if reply.get("id") == 2:
                assert "error" not in reply, reply
                return reply["result"]
        raise AssertionError("codex app-server did not answer hooks/list")
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)


def test_gemini_loads_cogd_settings(wired):
    gemini = client_program("gemini")
    root, home, env = wired
    listed = subprocess.run([gemini, "mcp", "list"], cwd=root, capture_output=True, text=True,
                            timeout=CLIENT_WAIT_S, env=env)
    out = listed.stdout + listed.stderr
    assert listed.returncode == 0 and "Invalid configuration" not in out, out
    assert f"cogd: {COGD} mcp (stdio)" in out
    # the same check finds a broken hook entry: it is not blind
    settings = json.loads((root / ".gemini" / "settings.json").read_text())
    settings["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] = "ten seconds"
    (root / ".gemini" / "settings.json").write_text(json.dumps(settings))
    broken = subprocess.run([gemini, "mcp", "list"], cwd=root, capture_output=True, text=True,
                            timeout=CLIENT_WAIT_S, env=env)
    assert "Invalid configuration" in broken.stdout + broken.stderr
    assert "hooks.SessionStart[0].hooks[0].timeout" in broken.stdout + broken.stderr


def test_claude_code_validates_the_plugin_and_its_marketplace(tmp_path):
    """Claude Code's own `claude plugin validate` accepts hooks/ and the marketplace, and reads the
    plugin's five hooks with the installer's matcher."""
    from cogd.cli.install import CLAUDE_TOOLS

    claude = client_program("claude")
    project = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HOME": str(tmp_path)}
    plugin = subprocess.run([claude, "plugin", "validate", "hooks"], cwd=project, capture_output=True, text=True,
                            timeout=CLIENT_WAIT_S, env=env)
    assert plugin.returncode == 0 and "Validation passed" in plugin.stdout, plugin.stdout + plugin.stderr
    provided = [line.strip() for line in plugin.stdout.splitlines() if line.strip().startswith("❯ hooks:")]
    assert [line.split()[2] for line in provided] == ["SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact",
                                                      "SessionEnd"]
    assert provided[2].split()[3] == "|".join(CLAUDE_TOOLS)
    market = subprocess.run([claude, "plugin", "validate", "."], cwd=project, capture_output=True, text=True,
                            timeout=CLIENT_WAIT_S, env=env)
    assert market.returncode == 0 and "Validation passed" in market.stdout, market.stdout + market.stderr
    assert "warning" not in market.stdout.lower()
