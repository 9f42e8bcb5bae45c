"""Shared fixtures: real git repositories built from real code, real daemons.

The "standard-library repository" copies a few packages of the running
interpreter's standard library (real code nobody here wrote) into a temporary
git repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
PAYLOADS = FIXTURES / "hook-payloads"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
STDLIB_PACKAGES = ("json", "email", "http", "logging", "asyncio")
BIN = Path(sys.executable).parent
COGD = str(BIN / "cogd")
COGD_HOOK = str(BIN / "cogd-hook")


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` with a fixed identity; returns stdout."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def write(root: Path, rel: str, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8, or bytes) to ``root/rel``, creating folders."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def make_repo(root: Path, files: dict[str, str | bytes] | None = None, commit: bool = True) -> Path:
    """A git repository at ``root`` holding ``files`` (path → text or bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for rel, content in (files or {}).items():
        write(root, rel, content)
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "--allow-empty", "-m", "initial")
    return root


LEXICAL_ONLY = "# this test is about something other than embeddings\n[embed]\nenabled = false\n"


def lexical_only(root: Path) -> Path:
    """Configure ``root``'s cogd without embeddings (for tests about other things)."""
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text(LEXICAL_ONLY, encoding="utf-8")
    return root


def copy_stdlib(dest: Path, packages: tuple[str, ...] = STDLIB_PACKAGES) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in packages:
        shutil.copytree(STDLIB / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return make_repo(dest)


@pytest.fixture(scope="session")
def stdlib_template(tmp_path_factory) -> Path:
    """A committed git repository of STDLIB_PACKAGES (do not modify: copy it)."""
    return copy_stdlib(tmp_path_factory.mktemp("stdlib") / "repo")


def run_cogd(root: Path, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real ``cogd`` console script in ``root``."""
    proc = subprocess.run([COGD, *args], cwd=root, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_hook(event: str, payload: object, *, raw: bytes | None = None, timeout: float = 10,
             env: dict | None = None, args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, float]:
    """Pipe a payload through the real ``cogd-hook`` process; returns (process, seconds)."""
    data = raw if raw is not None else json.dumps(payload).encode()
    started = time.monotonic()
    proc = subprocess.run([COGD_HOOK, event, *args], input=data, capture_output=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return proc, time.monotonic() - started


def payload(name: str, cwd: Path, **overrides) -> dict:
    """A shared hook payload fixture with ``{{CWD}}`` filled in and fields overridden."""
    text = (PAYLOADS / name).read_text(encoding="utf-8").replace("{{CWD}}", str(cwd))
    data = json.loads(text)
    data.update(overrides)
    return data


class Daemon:
    """A real daemon for a repository, started through the CLI, stopped on teardown."""

    def __init__(self, root: Path):
        self.root = root

    def start(self) -> "Daemon":
        run_cogd(self.root, "start")
        run_cogd(self.root, "index")
        return self

    def status(self) -> dict:
        return json.loads(run_cogd(self.root, "status", "--json").stdout)

    def stop(self) -> None:
        run_cogd(self.root, "stop", check=False)


@pytest.fixture
def daemon_factory():
    started: list[Daemon] = []

    def start(root: Path) -> Daemon:
        d = Daemon(root).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
