"""The hook path stays light, and the plugin wiring matches what the installer writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cogd.rpc.protocol import encode, request
from cogd.cli.install import merged_settings
from cogd.rpc.locate import socket_path

PROJECT = Path(__file__).resolve().parent.parent
COGD_HOOK = Path(sys.executable).parent / "cogd-hook"

# Modules that cost tens of milliseconds (or far more) to import: never on the hook path.
HEAVY = {"sqlite3", "asyncio", "tree_sitter", "rich", "click", "xxhash", "dataclasses", "typing",
         "subprocess", "concurrent", "logging", "tomllib", "pathlib", "cogd.paths",
         "cogd.daemon.service", "cogd.index"}
# Light by most standards, but together about 12 ms of a hook whose whole budget is 25 ms
# (the hook diet): json and re (+ enum, functools, collections), socket (+ selectors), signal, runpy.
SLOW_FOR_A_HOOK = {"json", "re", "enum", "functools", "collections", "socket", "selectors", "signal", "runpy",
                   "cogd.rpc.protocol", "cogd.rpc.control"}
# Everything the hook process may import beyond the interpreter's own start-up, on its happy path.
HOT_PATH_ALLOWED = {"cogd", "cogd.hookclient", "cogd.clients", "cogd.rpc", "cogd.rpc.client", "cogd.rpc.fastjson",
                    "cogd.rpc.locate", "cogd.safepath", "cogd.errors",
                    "_json", "_socket", "__future__"}


def test_hook_client_imports_nothing_heavy():
    code = "import sys, cogd.hookclient; print('\\n'.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "cogd.hookclient" in loaded
    assert HEAVY & loaded == set()
    assert SLOW_FOR_A_HOOK & loaded == set()
    # The hook's share of cogd is the wire package and the standard-library safe-path layer.
    ours = {name for name in loaded if name == "cogd" or name.startswith("cogd.")}
    allowed = {"cogd", "cogd.hookclient", "cogd.clients", "cogd.safepath", "cogd.errors"}
    assert {name for name in ours - allowed if not name.startswith("cogd.rpc")} == set()


PLUGIN_COMMAND = '"${CLAUDE_PLUGIN_ROOT}/find-cogd-hook"'


def test_plugin_hooks_json_matches_the_installer():
    plugin = json.loads((PROJECT / "hooks" / "hooks.json").read_text())
    installed = merged_settings({}, PLUGIN_COMMAND)
    assert plugin["hooks"] == installed["hooks"]


def test_plugin_manifest_and_marketplace_entry():
    """hooks/ is a Claude Code plugin (manifest in .claude-plugin/, its hooks file named there),
    listed by the repository's marketplace; its version is the package's."""
    import tomllib

    version = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["version"]
    manifest = json.loads((PROJECT / "hooks" / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "cogd" and manifest["version"] == version
    assert (PROJECT / "hooks" / manifest["hooks"]).resolve() == PROJECT / "hooks" / "hooks.json"
    market = json.loads((PROJECT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["name"] == "cogd" and market["owner"]["name"]
    [entry] = market["plugins"]
    assert entry["name"] == manifest["name"] and entry["version"] == version
    assert (PROJECT / entry["source"] / ".claude-plugin" / "plugin.json").is_file()
    assert os.access(PROJECT / "hooks" / "find-cogd-hook", os.X_OK)


def test_the_post_tool_use_matcher_is_the_tool_parser_list():
    """One list: the matcher names exactly the Claude Code tools whose payloads cogd parses (Agent too)."""
    from cogd.cli.install import CLAUDE_EVENTS, CLAUDE_TOOLS
    from cogd.usage.touches import BY_CLIENT

    assert set(CLAUDE_TOOLS) == set(BY_CLIENT["claude-code"]) and "Agent" in CLAUDE_TOOLS and "Task" in CLAUDE_TOOLS
    assert CLAUDE_EVENTS["PostToolUse"][1].split("|") == list(CLAUDE_TOOLS)


def _plugin_hook(event: str, path: str, payload: dict) -> subprocess.CompletedProcess:
    env = {"PATH": path, "CLAUDE_PLUGIN_ROOT": str(PROJECT / "hooks"), "HOME": os.environ.get("HOME", "/")}
    command = f"{PLUGIN_COMMAND} {event}"  # as Claude Code runs it: through a shell
    return subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload).encode(), capture_output=True,
                          timeout=60, env=env)


def test_plugin_hook_without_cogd_on_path_exits_0_with_one_line(repo):
    payload = {"session_id": "s", "cwd": str(repo), "hook_event_name": "SessionStart", "source": "startup"}
    start = _plugin_hook("session-start", "/usr/bin:/bin", payload)
    assert start.returncode == 0 and start.stderr == b""
    [line] = start.stdout.decode().splitlines()
    assert "cogd-hook is not on PATH" in json.loads(line)["systemMessage"]
    tool = _plugin_hook("post-tool-use", "/usr/bin:/bin", {**payload, "tool_name": "Read", "tool_input": {}})
    assert (tool.returncode, tool.stdout, tool.stderr) == (0, b"", b"")


def test_plugin_hook_runs_the_cogd_hook_on_path(repo):
    answer = encode({"jsonrpc": "2.0", "id": 1, "result": {"text": "T", "chars": 1, "items": [], "delivery_id": 3}})
    daemon = FakeDaemon(socket_path(str(repo)), answer)
    try:
        proc = _plugin_hook("prompt-submit", f"{COGD_HOOK.parent}:/usr/bin:/bin",
                            {"session_id": "s", "cwd": str(repo), "prompt": "p"})
    finally:
        daemon.close()
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                              "additionalContext": "T"}}


# ---- the real cogd-hook process against a stand-in daemon ----

class FakeDaemon:
    """Answers each connection's first line with ``answer`` and records what it received."""

    def __init__(self, path: str, answer: bytes):
        self.answer = answer
        self.received: list[bytes] = []
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.settimeout(10)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            self.received.append(data)
            conn.sendall(self.answer)

    def close(self) -> None:
        try:  # wakes an accept() still waiting (close() alone does not, on Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "r"
    (root / ".git").mkdir(parents=True)
    return root


def _imported(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def _run_hook(event: str, payload: dict, *, importtime: bool = False, client: str | None = None,
              ) -> subprocess.CompletedProcess:
    argv = [sys.executable, *(["-X", "importtime"] if importtime else []), str(COGD_HOOK),
            *(["--client", client] if client else []), event]
    env = {k: v for k, v in os.environ.items() if k != "COGD_HOOK_DEADLINE_MS"}
    return subprocess.run(argv, input=json.dumps(payload).encode(), capture_output=True, timeout=30, env=env)


def test_installed_cogd_hook_is_the_light_script():
    """``cogd-hook`` is bin/cogd-hook (not pip's entry-point wrapper, which imports ``re``)."""
    installed = COGD_HOOK.read_text(encoding="utf-8").splitlines()[1:]
    source = (PROJECT / "bin" / "cogd-hook").read_text(encoding="utf-8").splitlines()[1:]
    assert installed == source, f"{COGD_HOOK} is stale or not bin/cogd-hook: reinstall cogd (pip install -e .)"


def test_prompt_submit_hot_path_imports_and_output(repo):
    text = "## cogd: code that may matter\n- `a.py:1-2` caf\u00e9 \"quoted\" \\ \ud800"
    answer = encode({"jsonrpc": "2.0", "id": 1, "result": {"text": text, "chars": len(text), "items": [], "delivery_id": 3}})
    daemon = FakeDaemon(socket_path(str(repo)), answer)
    try:
        payload = {"session_id": "s1", "cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "why \u00e9?"}
        proc = _run_hook("prompt-submit", payload, importtime=True)
    finally:
        daemon.close()
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": text}}
    assert proc.stdout == (json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                              "additionalContext": text}}) + "\n").encode()
    # the request is byte for byte what cogd.rpc.protocol would write
    assert daemon.received == [encode(request("context.prompt", {"session_id": "s1", "prompt": "why \u00e9?",
                                                                  "client": "claude-code", "ack": True}))]
    baseline = _imported(subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"],
                                        capture_output=True, text=True).stderr)
    extra = _imported(proc.stderr.decode()) - baseline
    assert "cogd.hookclient" in extra
    assert extra <= HOT_PATH_ALLOWED, f"new imports on the hook path: {sorted(extra - HOT_PATH_ALLOWED)}"
    assert not (repo / ".cogd" / "logs" / "hook.log").exists()  # nothing went wrong, nothing logged


def test_post_tool_use_is_slimmed_and_silent(repo):
    daemon = FakeDaemon(socket_path(str(repo)), encode({"jsonrpc": "2.0", "id": 1, "result": {"tool_use": 1, "touches": []}}))
    big = "x = 1\n" * 200_000
    payload = {"session_id": "s1", "cwd": str(repo), "tool_name": "Read", "tool_use_id": "t1",
               "tool_input": {"file_path": str(repo / "a.py"), "offset": 3},
               "tool_response": {"type": "text", "file": {"filePath": str(repo / "a.py"), "content": big, "numLines": 9}}}
    try:
        proc = _run_hook("post-tool-use", payload, importtime=True)
    finally:
        daemon.close()
    assert proc.returncode == 0 and proc.stdout == b""
    sent = json.loads(daemon.received[0])
    assert sent["method"] == "usage.tool_use"
    assert sent["params"]["payload"]["tool_response"]["file"] == {"filePath": str(repo / "a.py"), "numLines": 9}
    assert sent["params"]["payload"]["tool_input"] == {"file_path": str(repo / "a.py"), "offset": 3}
    assert len(daemon.received[0]) < 1000
    assert not SLOW_FOR_A_HOOK & _imported(proc.stderr.decode())


def test_error_answer_is_logged_and_nothing_printed(repo):
    error = {"code": -32001, "message": "prompt must be a string", "data": {"kind": "bad_request"}}
    daemon = FakeDaemon(socket_path(str(repo)), encode({"jsonrpc": "2.0", "id": 1, "error": error}))
    try:
        proc = _run_hook("prompt-submit", {"session_id": "s", "cwd": str(repo), "prompt": "x"})
    finally:
        daemon.close()
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    logged = (repo / ".cogd" / "logs" / "hook.log").read_text()
    assert "daemon refused the request (bad_request): prompt must be a string" in logged


def test_refused_connection_is_logged(repo):
    path = socket_path(str(repo))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a socket file nobody listens on: ECONNREFUSED
    dead.close()
    proc = _run_hook("post-tool-use", {"session_id": "s", "cwd": str(repo), "tool_name": "Read", "tool_input": {}})
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert "daemon unavailable" in (repo / ".cogd" / "logs" / "hook.log").read_text()
    assert "ConnectionRefusedError" in (repo / ".cogd" / "logs" / "hook.log").read_text()


# ---- every client's path: the same imports, its own output form, its own request ----

# client → (cogd-hook event, payload, expected stdout as JSON, params the daemon must receive)
CLIENT_PATHS = {
    "codex": ("prompt-submit", {"session_id": "s", "cwd": "{root}", "turn_id": "1", "prompt": "p"},
              {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "T"}},
              {"session_id": "s", "prompt": "p", "client": "codex", "ack": True}),
    "gemini": ("prompt-submit", {"session_id": "s", "cwd": "{root}", "hook_event_name": "BeforeAgent", "prompt": "p"},
               {"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": "T"}},
               {"session_id": "s", "prompt": "p", "client": "gemini", "ack": True}),
    "cursor": ("session-start", {"conversation_id": "s", "workspace_roots": ["{root}"], "hook_event_name": "sessionStart"},
               {"additional_context": "T"},
               {"session_id": "s", "source": "startup", "client": "cursor", "ack": True}),
    "cline": ("prompt-submit", {"taskId": "s", "workspaceRoots": ["{root}"], "hookName": "UserPromptSubmit",
                                "userPromptSubmit": {"prompt": "p"}},
              {"cancel": False, "contextModification": "T"},
              {"session_id": "s", "prompt": "p", "client": "cline", "ack": True}),
}


@pytest.mark.parametrize("client", sorted(CLIENT_PATHS))
def test_every_client_path_is_as_light_and_speaks_its_form(repo, client):
    event, payload, expected, params = CLIENT_PATHS[client]
    payload = json.loads(json.dumps(payload).replace("{root}", str(repo)))
    answer = encode({"jsonrpc": "2.0", "id": 1, "result": {"text": "T", "chars": 1, "items": [], "delivery_id": 3}})
    daemon = FakeDaemon(socket_path(str(repo)), answer)
    try:
        proc = _run_hook(event, payload, importtime=True, client=client)
    finally:
        daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected
    method = "context.session_start" if event == "session-start" else "context.prompt"
    assert daemon.received == [encode(request(method, params))]
    baseline = _imported(subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"],
                                        capture_output=True, text=True).stderr)
    extra = _imported(proc.stderr.decode()) - baseline
    own = {f"cogd.clients.{client}"}  # its adapter, and no other client's
    assert own <= extra
    assert extra <= HOT_PATH_ALLOWED | own, f"new imports on the {client} hook path: {sorted(extra - HOT_PATH_ALLOWED)}"


def test_copilot_tool_args_string_is_parsed_and_slim(repo):
    """Copilot sends its tool arguments as a JSON string: the hook sends them parsed, bulky text left out."""
    daemon = FakeDaemon(socket_path(str(repo)), encode({"jsonrpc": "2.0", "id": 1, "result": {"tool_use": 1}}))
    args = {"path": str(repo / "a.py"), "old_str": "x" * 100_000, "new_str": "y = 2"}
    payload = {"sessionId": "s", "cwd": str(repo), "toolName": "edit", "toolArgs": json.dumps(args),
               "toolResult": {"resultType": "success", "textResultForLlm": "z" * 100_000}}
    try:
        proc = _run_hook("post-tool-use", payload, importtime=True, client="copilot")
    finally:
        daemon.close()
    assert proc.returncode == 0 and proc.stdout == b""
    sent = json.loads(daemon.received[0])["params"]["payload"]
    assert sent == {"session_id": "s", "cwd": str(repo), "tool_name": "edit", "tool_use_id": "",
                    "tool_input": {"path": str(repo / "a.py"), "new_str": "y = 2"}, "tool_response": {},
                    "client": "copilot"}
    assert not SLOW_FOR_A_HOOK & _imported(proc.stderr.decode())


def test_cline_gets_its_json_even_when_no_daemon_answers(repo):
    """Cline reads a JSON answer from every hook: with no daemon the hook still prints it (and exits 0)."""
    payload = {"taskId": "s", "workspaceRoots": [str(repo)], "hookName": "PostToolUse",
               "postToolUse": {"toolName": "read_file", "parameters": {"path": "a.py"}}}
    proc = _run_hook("post-tool-use", payload, client="cline")
    assert proc.returncode == 0 and proc.stdout == b'{"cancel": false}\n'
    assert "tool use spooled for the daemon" in (repo / ".cogd" / "logs" / "hook.log").read_text()
