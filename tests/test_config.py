"""The hook deadline: the hook and cogd.config read ``[hook] deadline_ms`` and the environment
with one parser, so what doctor reports is the deadline hooks really have."""

from __future__ import annotations

import pytest

from cogd import hookclient
from cogd.config import load_config
from cogd.rpc.client import DEADLINE_ENV, DEFAULT_DEADLINE_MS, MAX_DEADLINE_MS, parse_deadline_ms


@pytest.mark.parametrize("value, expected", [
    (1, 1), (2500, 2500), ("2500", 2500), (MAX_DEADLINE_MS + 1, MAX_DEADLINE_MS), ("999999999", MAX_DEADLINE_MS),
    (0, None), (-5, None), ("0", None), ("-5", None), ("1.5", None), ("", None), ("٣", None),
    ("1234567890", None), (True, None), (1.5, None), (None, None),
])
def test_parse_deadline_ms(value, expected):
    assert parse_deadline_ms(value) == expected


@pytest.mark.parametrize("file_value, env, expected", [
    (None, None, DEFAULT_DEADLINE_MS),
    ("3000", None, 3000),
    ("3000", "700", 700),          # the environment wins
    ("3000", "0", 3000),           # an unusable environment value falls through to the file
    ("0", None, DEFAULT_DEADLINE_MS),
    ("0", "abc", DEFAULT_DEADLINE_MS),
    ("120000", None, MAX_DEADLINE_MS),
])
def test_config_and_hook_agree_on_the_deadline(tmp_path, monkeypatch, file_value, env, expected):
    root = tmp_path / "repo"
    (root / ".cogd").mkdir(parents=True)
    config = root / ".cogd" / "config.toml"
    config.write_text("[embed]\nenabled = false\n" + (f"[hook]\ndeadline_ms = {file_value}\n" if file_value else ""))
    if env is None:
        monkeypatch.delenv(DEADLINE_ENV, raising=False)
    else:
        monkeypatch.setenv(DEADLINE_ENV, env)
    assert load_config(config).hook.deadline_ms == expected
    assert hookclient._deadline_ms(str(root)) == expected


def test_a_negative_deadline_is_a_config_error_and_no_hook_error(tmp_path, monkeypatch):
    """cogd.config refuses what it cannot use (the CLI says so); the hook only falls back."""
    from cogd.config import ConfigError

    root = tmp_path / "repo"
    (root / ".cogd").mkdir(parents=True)
    (root / ".cogd" / "config.toml").write_text("[hook]\ndeadline_ms = -1\n")
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    with pytest.raises(ConfigError, match="hook.deadline_ms must be a non-negative integer, got -1"):
        load_config(root / ".cogd" / "config.toml")
    assert hookclient._deadline_ms(str(root)) == DEFAULT_DEADLINE_MS
