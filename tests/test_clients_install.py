"""The installer for every client: the documented shape of each generated file, merges that keep
the user's content, idempotence, byte-identical uninstall, ``--local``, detection, and Claude
Code's two settings files never both holding cogd's hooks."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from cogd.cli import wiring
from cogd.cli.install import detect
from cogd.clients import CLIENTS
from conftest import COGD, make_repo

HOOK = "/opt/cogd/bin/cogd-hook"
MCP = ("/opt/cogd/bin/cogd", ["mcp"])

# What a user may already have in each client's files (cogd must keep it, in order, byte for byte
# after an uninstall). Indentation and key order differ from cogd's own on purpose.
EXISTING = {
    ".claude/settings.json": '{\n    "model": "opus",\n    "hooks": {"PreToolUse": [{"matcher": "Bash", '
                             '"hooks": [{"type": "command", "command": "./guard.sh"}]}]}\n}\n',
    ".mcp.json": '{"mcpServers": {"github": {"command": "gh-mcp"}}}',
    ".codex/hooks.json": '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done", '
                         '"timeout": 3}]}]}}\n',
    ".codex/config.toml": 'model = "gpt-5.1-codex"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n',
    ".gemini/settings.json": '{\n  "theme": "GitHub",\n  "hooks": {\n    "BeforeTool": [\n      {"matcher": '
                             '"run_shell_command", "hooks": [{"type": "command", "command": "./check.sh", '
                             '"timeout": 2000}]}\n    ]\n  }\n}\n',
    ".cursor/hooks.json": '{"version": 1, "hooks": {"afterFileEdit": [{"command": "./format.sh"}]}}\n',
    ".cursor/mcp.json": '{"mcpServers": {"linear": {"url": "https://mcp.example.com/sse"}}}\n',
    ".github/hooks/cogd.json": None,  # cogd's own file: never there before
    ".clinerules/hooks/TaskStart": None,
}


def targets(client: str, local: bool = False) -> list[wiring.Target]:
    return wiring.targets(client, HOOK, MCP, local=local)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but .git and .cogd, with its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in (".git", ".cogd") or not path.is_file():
            continue
        found[rel] = path.read_bytes()
    return found


def dirs(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()
            and p.relative_to(root).as_posix().split("/")[0] not in (".git", ".cogd")}


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})


def seed(root: Path) -> None:
    for rel, text in EXISTING.items():
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- the documented shapes

def test_codex_files_have_the_documented_shape(repo):
    for target in targets("codex"):
        wiring.install(repo, target)
    hooks = json.loads((repo / ".codex/hooks.json").read_text())["hooks"]
    assert sorted(hooks) == ["PostToolUse", "PreCompact", "SessionStart", "UserPromptSubmit"]
    assert hooks["PostToolUse"] == [{"matcher": "apply_patch|Bash", "hooks": [
        {"type": "command", "command": f"{HOOK} --client codex post-tool-use", "timeout": 10}]}]
    for event in hooks:  # seconds, on every handler
        assert all(isinstance(h["timeout"], int) and 0 < h["timeout"] <= 10 for g in hooks[event] for h in g["hooks"])
    config = tomllib.loads((repo / ".codex/config.toml").read_text())
    assert config == {"mcp_servers": {"cogd": {"command": MCP[0], "args": MCP[1]}}}


def test_gemini_settings_have_the_documented_shape(repo):
    [target] = targets("gemini")
    wiring.install(repo, target)
    settings = json.loads((repo / ".gemini/settings.json").read_text())
    assert sorted(settings["hooks"]) == ["AfterTool", "BeforeAgent", "PreCompress", "SessionEnd", "SessionStart"]
    assert settings["hooks"]["BeforeAgent"] == [{"hooks": [{"type": "command", "name": "cogd prompt-submit",
                                                            "command": f"{HOOK} --client gemini prompt-submit",
                                                            "timeout": 10_000}]}]  # milliseconds
    assert settings["hooks"]["AfterTool"][0]["matcher"].split("|") == list(wiring.GEMINI_TOOLS)
    assert settings["mcpServers"] == {"cogd": {"command": MCP[0], "args": MCP[1]}}


def test_cursor_copilot_cline_files_have_the_documented_shape(repo):
    for client in ("cursor", "copilot", "cline"):
        for target in targets(client):
            wiring.install(repo, target)
    cursor = json.loads((repo / ".cursor/hooks.json").read_text())
    assert cursor["version"] == 1
    assert sorted(cursor["hooks"]) == ["afterFileEdit", "postToolUse", "preCompact", "sessionEnd", "sessionStart"]
    assert "beforeSubmitPrompt" not in cursor["hooks"]  # it cannot add context
    assert cursor["hooks"]["sessionStart"] == [{"command": f"{HOOK} --client cursor session-start", "timeout": 10}]
    assert json.loads((repo / ".cursor/mcp.json").read_text()) == {"mcpServers": {"cogd": {"command": MCP[0],
                                                                                             "args": MCP[1]}}}
    copilot = json.loads((repo / ".github/hooks/cogd.json").read_text())
    assert copilot == {"version": 1, "hooks": {
        "postToolUse": [{"type": "command", "bash": f"{HOOK} --client copilot post-tool-use", "timeoutSec": 10}],
        "preCompact": [{"type": "command", "bash": f"{HOOK} --client copilot pre-compact", "timeoutSec": 5}],
        "sessionEnd": [{"type": "command", "bash": f"{HOOK} --client copilot session-end", "timeoutSec": 5}]}}
    hooks = repo / ".clinerules/hooks"
    assert sorted(p.name for p in hooks.iterdir()) == sorted(wiring.CLINE_HOOKS)
    task_start = hooks / "TaskStart"
    assert task_start.stat().st_mode & stat.S_IXUSR
    assert task_start.read_text().splitlines()[0] == "#!/bin/sh"
    assert task_start.read_text().splitlines()[-1] == f"exec {HOOK} --client cline session-start"


def test_a_cline_script_runs_the_hook_and_answers_json(repo):
    """The generated executable really runs cogd-hook (this installation's) and Cline gets its JSON."""
    from conftest import COGD_HOOK

    for target in wiring.targets("cline", COGD_HOOK, MCP):
        wiring.install(repo, target)
    payload = {"taskId": "t", "hookName": "PreCompact", "workspaceRoots": [str(repo)], "preCompact": {}}
    proc = subprocess.run([str(repo / ".clinerules/hooks/PreCompact")], input=json.dumps(payload).encode(),
                          capture_output=True, timeout=60, cwd=repo)
    assert proc.returncode == 0 and proc.stdout == b'{"cancel": false}\n' and proc.stderr == b""


# ---------------------------------------------------------------- merge, idempotence, undo

@pytest.mark.parametrize("client", CLIENTS)
def test_install_reinstall_uninstall_is_byte_identical(repo, client):
    seed(repo)
    before, before_dirs = snapshot(repo), dirs(repo)
    found = targets(client)
    first = [wiring.install(repo, t) for t in found]
    assert all(o.changed for o in first)
    for outcome in first:  # the user's content is still there, cogd's is added
        original = EXISTING.get(outcome.target.rel)
        if original and outcome.target.kind == "json":
            merged = json.loads(outcome.path.read_text())
            assert wiring._prune(outcome.target.strip(merged), json.loads(original)) == json.loads(original)
            assert wiring.holds_cogd(repo, outcome.target)
        if original is not None:
            assert outcome.backup is not None and outcome.backup.read_text() == original
    after_first = snapshot(repo)
    again = [wiring.install(repo, t) for t in found]
    assert not any(o.changed for o in again) and snapshot(repo) == after_first  # no write, no new backup
    removed = [wiring.uninstall(repo, t) for t in found]
    assert all(o.changed for o in removed)
    assert snapshot(repo) == before  # the backups are under .cogd/wiring/backups/, out of the tree's files
    assert dirs(repo) == before_dirs  # the folders cogd made are gone too
    assert not any(wiring.holds_cogd(repo, t) for t in found)
    assert [wiring.uninstall(repo, t).changed for t in found] == [False] * len(found)


def test_uninstall_keeps_what_the_user_added_since(repo):
    seed(repo)
    [target] = targets("gemini")
    wiring.install(repo, target)
    settings = json.loads((repo / ".gemini/settings.json").read_text())
    settings["theme"] = "Dracula"  # the user changed something else after the install
    (repo / ".gemini/settings.json").write_text(json.dumps(settings))
    assert wiring.uninstall(repo, target).changed
    left = json.loads((repo / ".gemini/settings.json").read_text())
    assert left == {**json.loads(EXISTING[".gemini/settings.json"]), "theme": "Dracula"}


def test_a_users_cline_hook_is_never_overwritten(repo):
    mine = "#!/bin/sh\necho mine\n"
    (repo / ".clinerules/hooks").mkdir(parents=True)
    (repo / ".clinerules/hooks/TaskStart").write_text(mine)
    start = next(t for t in targets("cline") if t.rel.endswith("/TaskStart"))
    with pytest.raises(wiring.SettingsError, match="not cogd's"):
        wiring.install(repo, start)
    assert wiring.uninstall(repo, start).note.endswith("is not cogd's: left as it is")
    assert (repo / ".clinerules/hooks/TaskStart").read_text() == mine


def test_a_users_own_cogd_mcp_table_in_codex_config_is_refused(repo):
    text = '[mcp_servers.cogd]\ncommand = "my-cogd"\n'
    (repo / ".codex").mkdir()
    (repo / ".codex/config.toml").write_text(text)
    with pytest.raises(wiring.SettingsError, match="invalid TOML"):
        wiring.install(repo, targets("codex")[1])
    assert (repo / ".codex/config.toml").read_text() == text


@pytest.mark.parametrize("rel, content, message", [
    (".gemini/settings.json", "[]", "not an object"),
    (".cursor/hooks.json", '{"version": 1, "hooks": []}', '"hooks" is not an object'),
    (".codex/hooks.json", '{"hooks": {"SessionStart": {}}}', '"hooks.SessionStart" is not a list'),
    (".cursor/mcp.json", "{not json", "not valid JSON"),
])
def test_unmergeable_files_are_left_untouched(repo, rel, content, message):
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(content)
    client = {".gemini": "gemini", ".cursor": "cursor", ".codex": "codex"}[rel.split("/")[0]]
    target = next(t for t in targets(client) if t.rel == rel)
    with pytest.raises(wiring.SettingsError, match=message):
        wiring.install(repo, target)
    assert (repo / rel).read_text() == content
    assert sorted(p.name for p in (repo / rel).parent.iterdir()) == [Path(rel).name]


# ---------------------------------------------------------------- the command

def cogd(root: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex"), "COLUMNS": "200"}
    return subprocess.run([COGD, *args], cwd=root, capture_output=True, text=True, timeout=120, env=env)


def test_claude_code_local_after_project_is_not_installed_twice(repo, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert cogd(repo, "install-hooks", home=home).returncode == 0
    proc = cogd(repo, "install-hooks", "--local", home=home)
    assert proc.returncode == 0
    assert f"cogd's hooks are already in {repo / '.claude' / 'settings.json'}" in proc.stdout
    assert not (repo / ".claude" / "settings.local.json").exists()
    # and the other way round
    assert cogd(repo, "install-hooks", "--uninstall", home=home).returncode == 0
    assert cogd(repo, "install-hooks", "--local", home=home).returncode == 0
    proc = cogd(repo, "install-hooks", home=home)
    assert f"cogd's hooks are already in {repo / '.claude' / 'settings.local.json'}" in proc.stdout
    settings = repo / ".claude" / "settings.json"
    assert not settings.exists() or "cogd-hook" not in settings.read_text()


def test_local_keeps_other_clients_out_of_git(repo, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = cogd(repo, "install-hooks", "--client", "cursor", "--local", home=home)
    assert proc.returncode == 0, proc.stderr
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert "/.cursor/hooks.json\n" in exclude and "/.cursor/mcp.json\n" in exclude
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
    assert ".cursor" not in status
    assert cogd(repo, "install-hooks", "--client", "cursor", "--uninstall", "--local", home=home).returncode == 0
    assert "cogd" not in (repo / ".git" / "info" / "exclude").read_text()
    assert not (repo / ".cursor").exists()
    # a tracked file cannot be kept out of commits: refused, nothing written
    (repo / ".cursor").mkdir()
    (repo / ".cursor/mcp.json").write_text("{}\n")
    subprocess.run(["git", "-C", str(repo), "add", ".cursor/mcp.json"], check=True)
    proc = cogd(repo, "install-hooks", "--client", "cursor", "--local", home=home)
    assert proc.returncode != 0 and "tracked by git" in proc.stderr + proc.stdout
    assert not (repo / ".cursor/hooks.json").exists() and (repo / ".cursor/mcp.json").read_text() == "{}\n"


def test_detection_and_list(repo, tmp_path):
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)  # the user runs Gemini CLI
    (repo / ".clinerules").mkdir()  # the repository has Cline rules
    assert detect(repo, home) == ["claude-code", "gemini", "cline"]
    proc = cogd(repo, "install-hooks", home=home)
    assert proc.returncode == 0, proc.stderr
    assert (repo / ".gemini/settings.json").is_file() and (repo / ".clinerules/hooks/TaskStart").is_file()
    assert not (repo / ".codex").exists() and not (repo / ".cursor").exists()
    listing = cogd(repo, "install-hooks", "--list", home=home).stdout.splitlines()
    assert [line.split()[:2] for line in listing] == [["claude-code", "detected"], ["codex", "-"], ["gemini", "detected"],
                                                      ["cursor", "-"], ["copilot", "-"], ["cline", "detected"]]
    assert listing[0].endswith("wired in .claude/settings.json, .mcp.json")
    assert listing[1].endswith("not wired") and listing[5].endswith("wired in .clinerules/hooks/")
    assert cogd(repo, "install-hooks", "--all", home=home).returncode == 0
    assert all(not line.endswith("not wired") for line in cogd(repo, "install-hooks", "--list", home=home).stdout
               .splitlines())
    bad = cogd(repo, "install-hooks", "--client", "vim", home=home)
    assert bad.returncode == 2 and "unknown client vim" in bad.stderr


def test_the_plugin_and_the_settings_hooks_together_are_flagged(repo, tmp_path):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"enabledPlugins": {"cogd@cogd": true}}')
    proc = cogd(repo, "install-hooks", home=home)
    assert proc.returncode == 0
    assert f"the cogd plugin is enabled in {home / '.claude' / 'settings.json'}" in proc.stdout


def test_one_unmergeable_client_does_not_keep_the_others_unwired(repo, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (repo / ".gemini").mkdir()
    (repo / ".gemini" / "settings.json").write_text("[]")
    proc = cogd(repo, "install-hooks", "--client", "gemini,cursor", home=home)
    assert proc.returncode != 0 and "Gemini CLI:" in proc.stderr and "not an object" in proc.stderr
    assert (repo / ".gemini" / "settings.json").read_text() == "[]"
    assert wiring.holds_cogd(repo, targets("cursor")[0])  # wired all the same


def test_local_keeps_claude_codes_private_file_out_of_git_and_any_uninstall_takes_it_back(repo, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    exclude = repo / ".git" / "info" / "exclude"
    before = exclude.read_bytes() if exclude.exists() else None
    assert cogd(repo, "install-hooks", "--local", home=home).returncode == 0
    assert "/.claude/settings.local.json\n" in exclude.read_text()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
    assert ".claude" not in status, status
    # A plain uninstall (no --local) removes the hooks from whichever settings file holds them.
    proc = cogd(repo, "install-hooks", "--uninstall", home=home)
    assert proc.returncode == 0, proc.stderr
    local = repo / ".claude" / "settings.local.json"
    assert not local.exists() or "cogd-hook" not in local.read_text()
    assert (exclude.read_bytes() if exclude.exists() else None) == before
    listing = cogd(repo, "install-hooks", "--list", home=home).stdout
    assert "wired in" not in listing, listing


def test_up_goes_on_when_a_clients_file_holds_comments(repo, tmp_path):
    # Gemini CLI reads settings with comments; cogd cannot merge them without losing the comments.
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (repo / ".cogd").mkdir()
    (repo / ".cogd" / "config.toml").write_text("[embed]\nenabled = false\n", encoding="utf-8")
    (repo / ".gemini").mkdir()
    commented = '{\n  // my theme\n  "theme": "GitHub"\n}\n'
    (repo / ".gemini" / "settings.json").write_text(commented, encoding="utf-8")
    try:
        proc = cogd(repo, "up", home=home)
        assert proc.returncode == 0, proc.stderr
        assert "not wired: Gemini CLI:" in proc.stdout and "holds comments" in proc.stdout, proc.stdout
        assert "sample context pack" in proc.stdout
        assert (repo / ".gemini" / "settings.json").read_text(encoding="utf-8") == commented
        assert wiring.holds_cogd(repo, targets("claude-code")[0])  # the others are wired all the same
    finally:
        cogd(repo, "stop", home=home)
