"""Tests for cogd.cli.install: merging cogd's hooks into .claude/settings.json."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from cogd.cli.install import CLAUDE_EVENTS, SettingsError, hook_command, install_claude_hooks, merged_settings

CMD = "/opt/cogd/bin/cogd-hook"


def settings_path(root: Path) -> Path:
    return root / ".claude" / "settings.json"


def write_settings(root: Path, data) -> str:
    path = settings_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data, indent=4) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


def read_settings(root: Path) -> dict:
    return json.loads(settings_path(root).read_text(encoding="utf-8"))


def backups(root: Path) -> list[Path]:
    return sorted((root / ".cogd" / "wiring" / "backups").glob(".claude__settings.json.*"))


def cogd_entry(event: str, command: str = CMD) -> dict:
    cogd_event, matcher, timeout = CLAUDE_EVENTS[event]
    entry = {"hooks": [{"type": "command", "command": f"{command} {cogd_event}", "timeout": timeout}]}
    return {"matcher": matcher, **entry} if matcher else entry


EXPECTED_FRESH = {
    "hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": f"{CMD} session-start", "timeout": 10}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"{CMD} prompt-submit", "timeout": 10}]}],
        "PostToolUse": [{
            "matcher": "Read|Edit|MultiEdit|Write|NotebookEdit|Grep|Glob|Bash|Task|Agent",
            "hooks": [{"type": "command", "command": f"{CMD} post-tool-use", "timeout": 10}],
        }],
        "PreCompact": [{"hooks": [{"type": "command", "command": f"{CMD} pre-compact", "timeout": 5}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "command": f"{CMD} session-end", "timeout": 5}]}],
    }
}

USER_SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(npm run test:*)"], "deny": ["Read(./.env)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./scripts/guard.sh"}]}],
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write \"$FILE\""}]},
        ],
        "SessionStart": [{"hooks": [{"type": "command", "command": "echo hello"}]}],
    },
    "env": {"FOO": "1"},
    "model": "opus",
}


def test_missing_file_is_created(tmp_path):
    result = install_claude_hooks(tmp_path, CMD)
    assert result == {"path": str(settings_path(tmp_path)), "changed": True, "backup": None}
    assert read_settings(tmp_path) == EXPECTED_FRESH
    assert list(read_settings(tmp_path)["hooks"]) == ["SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "SessionEnd"]
    assert settings_path(tmp_path).read_text().endswith("}\n")
    assert backups(tmp_path) == []
    assert not (tmp_path / ".claude" / ".settings.json.cogd-tmp").exists()


def test_existing_keys_and_hooks_are_preserved_in_order(tmp_path):
    original = write_settings(tmp_path, USER_SETTINGS)
    result = install_claude_hooks(tmp_path, CMD)
    assert result["changed"] is True
    merged = read_settings(tmp_path)
    assert list(merged) == ["$schema", "permissions", "hooks", "env", "model"]
    assert {k: merged[k] for k in ("$schema", "permissions", "env", "model")} == {
        k: USER_SETTINGS[k] for k in ("$schema", "permissions", "env", "model")}
    hooks = merged["hooks"]
    assert list(hooks) == ["PreToolUse", "PostToolUse", "SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"]
    assert hooks["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert hooks["PostToolUse"] == USER_SETTINGS["hooks"]["PostToolUse"] + [cogd_entry("PostToolUse")]
    assert hooks["SessionStart"] == USER_SETTINGS["hooks"]["SessionStart"] + [cogd_entry("SessionStart")]
    assert hooks["UserPromptSubmit"] == [cogd_entry("UserPromptSubmit")]
    assert hooks["SessionEnd"] == [cogd_entry("SessionEnd")]
    # the backup holds the original bytes
    assert [b.name for b in backups(tmp_path)] == [Path(result["backup"]).name]
    assert Path(result["backup"]).read_text(encoding="utf-8") == original


def test_second_run_is_a_no_op(tmp_path):
    write_settings(tmp_path, USER_SETTINGS)
    first = install_claude_hooks(tmp_path, CMD)
    text_after_first = settings_path(tmp_path).read_bytes()
    mtime = settings_path(tmp_path).stat().st_mtime_ns
    second = install_claude_hooks(tmp_path, CMD)
    assert second == {"path": str(settings_path(tmp_path)), "changed": False, "backup": None}
    assert settings_path(tmp_path).read_bytes() == text_after_first
    assert settings_path(tmp_path).stat().st_mtime_ns == mtime
    assert [str(b) for b in backups(tmp_path)] == [first["backup"]]


def test_second_run_on_a_created_file_is_a_no_op(tmp_path):
    install_claude_hooks(tmp_path, CMD)
    assert install_claude_hooks(tmp_path, CMD)["changed"] is False
    assert backups(tmp_path) == []


def test_changed_command_replaces_cogd_entries(tmp_path):
    write_settings(tmp_path, USER_SETTINGS)
    install_claude_hooks(tmp_path, "/old/venv/bin/cogd-hook")
    before = settings_path(tmp_path).read_text()
    result = install_claude_hooks(tmp_path, CMD)
    assert result["changed"] is True
    assert Path(result["backup"]).read_text() == before
    hooks = read_settings(tmp_path)["hooks"]
    assert hooks["PostToolUse"] == USER_SETTINGS["hooks"]["PostToolUse"] + [cogd_entry("PostToolUse")]
    assert hooks["SessionStart"] == USER_SETTINGS["hooks"]["SessionStart"] + [cogd_entry("SessionStart")]
    text = settings_path(tmp_path).read_text()
    assert "/old/venv" not in text
    assert text.count("cogd-hook") == 5


def test_quick_successive_changes_keep_every_backup(tmp_path):
    original = write_settings(tmp_path, USER_SETTINGS)
    first = install_claude_hooks(tmp_path, "/a/cogd-hook")
    after_first = settings_path(tmp_path).read_text()
    second = install_claude_hooks(tmp_path, "/b/cogd-hook")
    third = install_claude_hooks(tmp_path, "/c/cogd-hook")
    assert len({first["backup"], second["backup"], third["backup"]}) == 3
    assert len(backups(tmp_path)) == 3
    assert Path(first["backup"]).read_text() == original
    assert Path(second["backup"]).read_text() == after_first
    assert "/b/cogd-hook" in Path(third["backup"]).read_text()


def test_python_module_form_is_recognised_as_cogd(tmp_path):
    old = "/usr/bin/python3 -m cogd.hookclient"
    write_settings(tmp_path, {"hooks": {"SessionEnd": [cogd_entry("SessionEnd", old)]}})
    install_claude_hooks(tmp_path, CMD)
    assert read_settings(tmp_path)["hooks"]["SessionEnd"] == [cogd_entry("SessionEnd")]


def test_cogd_handler_sharing_a_group_with_another_handler(tmp_path):
    shared = {"matcher": "Edit", "hooks": [
        {"type": "command", "command": "/old/cogd-hook post-tool-use"},
        {"type": "command", "command": "ruff format"},
    ]}
    write_settings(tmp_path, {"hooks": {"PostToolUse": [shared]}})
    install_claude_hooks(tmp_path, CMD)
    assert read_settings(tmp_path)["hooks"]["PostToolUse"] == [
        {"matcher": "Edit", "hooks": [{"type": "command", "command": "ruff format"}]},
        cogd_entry("PostToolUse"),
    ]


def test_groups_of_unexpected_shape_are_kept(tmp_path):
    odd = [{"matcher": "X"}, "a string", {"hooks": "not a list"}, {"hooks": []}]
    write_settings(tmp_path, {"hooks": {"SessionStart": odd}})
    install_claude_hooks(tmp_path, CMD)
    assert read_settings(tmp_path)["hooks"]["SessionStart"] == odd + [cogd_entry("SessionStart")]


def test_invalid_json_raises_and_leaves_the_file_untouched(tmp_path):
    raw = b'{\n  "hooks": {,\n  // a comment\n}\n'
    path = settings_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with pytest.raises(SettingsError, match="not valid JSON"):
        install_claude_hooks(tmp_path, CMD)
    assert path.read_bytes() == raw
    assert backups(tmp_path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "not an object"),
    ('"text"', "not an object"),
    ('{"hooks": []}', '"hooks" is not an object'),
    ('{"hooks": {"SessionEnd": {"x": 1}}}', '"hooks.SessionEnd" is not a list'),
])
def test_unexpected_structure_raises_and_leaves_the_file_untouched(tmp_path, content, message):
    write_settings(tmp_path, content)
    with pytest.raises(SettingsError, match=message):
        install_claude_hooks(tmp_path, CMD)
    assert settings_path(tmp_path).read_text() == content
    assert backups(tmp_path) == []


def test_settings_error_is_a_value_error():
    assert issubclass(SettingsError, ValueError)


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_empty_or_blank_file_is_treated_as_empty_settings(tmp_path, content):
    write_settings(tmp_path, content)
    result = install_claude_hooks(tmp_path, CMD)
    assert result["changed"] is True
    assert read_settings(tmp_path) == EXPECTED_FRESH
    assert Path(result["backup"]).read_text() == content
    assert install_claude_hooks(tmp_path, CMD)["changed"] is False


def test_unicode_is_kept_verbatim(tmp_path):
    write_settings(tmp_path, {"env": {"GREETING": "héllo ✓"}})
    install_claude_hooks(tmp_path, CMD)
    text = settings_path(tmp_path).read_text(encoding="utf-8")
    assert '"héllo ✓"' in text
    assert read_settings(tmp_path)["env"] == {"GREETING": "héllo ✓"}


def test_merged_settings_does_not_mutate_its_input():
    existing = json.loads(json.dumps(USER_SETTINGS))
    merged = merged_settings(existing, CMD)
    assert existing == USER_SETTINGS
    assert merged != existing
    assert merged_settings(merged, CMD) == merged


def test_hook_command_points_at_this_installation():
    command = hook_command()
    first = shlex.split(command)[0]
    assert Path(first).parent == Path(sys.executable).parent
    assert Path(first).name in ("cogd-hook", Path(sys.executable).name)
    if Path(first).name != "cogd-hook":
        assert command.endswith("-m cogd.hookclient")


def test_default_command_is_used_when_none_given(tmp_path):
    install_claude_hooks(tmp_path)
    commands = [h["command"] for groups in read_settings(tmp_path)["hooks"].values() for g in groups for h in g["hooks"]]
    assert commands == [f"{hook_command()} {CLAUDE_EVENTS[e][0]}" for e in CLAUDE_EVENTS]


def test_local_install_keeps_the_machine_path_out_of_mcp_json(tmp_path):
    from conftest import make_repo, run_cogd

    root = make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})
    proc = run_cogd(root, "install-hooks", "--local")
    assert (root / ".claude" / "settings.local.json").is_file()
    assert not (root / ".claude" / "settings.json").exists()
    assert not (root / ".mcp.json").exists()
    assert "claude mcp add cogd --" in proc.stdout and " mcp" in proc.stdout
    run_cogd(root, "install-hooks")
    assert json.loads((root / ".mcp.json").read_text())["mcpServers"]["cogd"]["args"][-1] == "mcp"
