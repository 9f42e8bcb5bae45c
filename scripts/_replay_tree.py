"""Shared plumbing for the history replays (``replay_sessions.py``; usable by ``eval_retrieval.py``).

Three things every replay of a foreign repository's history needs:

* :class:`ScratchTree` — a work tree in a temporary directory moved from
  commit to commit of a git directory *without writing into it*: a private
  ``GIT_INDEX_FILE``, ``git read-tree -u --reset`` the first time and ``git
  read-tree -u -m OLD NEW`` afterwards (only changed files are rewritten, which
  is what cogd's watcher and incremental index see in real life); by default
  the tree is its own git repository borrowing the objects through
  ``alternates``. :func:`snapshot` proves the git directory was left alone.
* :class:`Daemon` — one cogd daemon serving one scratch tree: ``cogd start`` /
  ``cogd stop`` through the console scripts, and the JSON-RPC methods
  (``index.refresh`` with wait, ``status``) over the daemon's socket through
  cogd's own client, falling back to the CLI when it cannot be imported.
* :func:`clean_env` — cogd's processes never see a ``GIT_*`` variable, so the
  scratch tree (not a git repository) is never confused with the git directory.

Standard library only, plus cogd's client when it is importable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # not resolved: the venv's bin/ holds the console scripts
_TWIN = re.compile(r"~\d+$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class ReplayError(RuntimeError):
    """A step of the replay failed (a subprocess exited non-zero, a daemon did not answer)."""


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for cogd's processes: no ``GIT_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if extra:
        env.update(extra)
    return env


def run(cmd: list[str], *, env: dict | None = None, input: str | None = None, timeout: float = 600,
        check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` capturing text output; raise :class:`ReplayError` on a non-zero exit when ``check``."""
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, cwd=cwd,
                          env=env if env is not None else clean_env(), timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise ReplayError(f"{' '.join(cmd[:4])} … exited {proc.returncode}: "
                          f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def gold_form(entity_id: str) -> str:
    """An entity id as the gold spells it: cogd names a repeated definition ``name~2``, the gold ``name``."""
    return _TWIN.sub("", entity_id)


def file_of(entity_id: str) -> str:
    """The path part of an entity id (a file entity's id is its path)."""
    return entity_id.split("::", 1)[0]


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    """name → (size, mtime_ns) of everything under ``path``: to prove nothing was written there."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            out[os.path.relpath(full, path)] = (0 if os.path.isdir(full) else st.st_size, st.st_mtime_ns)
    return out


class ScratchTree:
    """A work tree at ``scratch/tree`` that follows commits of ``git_dir`` without writing into it.

    With ``as_repo`` (the default) the tree is a git repository of its own,
    ``tree/.git``, whose ``objects/info/alternates`` names ``git_dir``'s object
    store and whose detached ``HEAD`` is the checked-out commit: ``git log`` and
    ``git status`` inside the tree then answer as in a real clone (cogd reads
    recently changed files from them), while every write — the index, ``HEAD``,
    new objects — lands in ``tree/.git``, never in ``git_dir``. Without it the
    tree is a plain directory and the index a private file next to it.
    """

    def __init__(self, git_dir: Path, scratch: Path, *, as_repo: bool = True):
        self.git_dir = git_dir
        self.scratch = scratch
        self.root = scratch / "tree"
        self.root.mkdir(parents=True, exist_ok=True)
        self.as_repo = as_repo
        self.commit: str | None = None
        if as_repo:
            run(["git", "init", "-q", str(self.root)], env=clean_env(), timeout=60)
            self.repo_dir = self.root / ".git"
            alternates = self.repo_dir / "objects" / "info" / "alternates"
            alternates.parent.mkdir(parents=True, exist_ok=True)
            alternates.write_text(str((git_dir / "objects").resolve()) + "\n", encoding="utf-8")
            self.index_file = self.repo_dir / "index"
        else:
            self.repo_dir = git_dir
            self.index_file = scratch / "git-index"  # outside the tree, so cogd never indexes it

    def git(self, *args: str, timeout: float = 300) -> str:
        """Run git with this tree and its private index (objects from ``git_dir``); returns stdout."""
        env = clean_env({"GIT_INDEX_FILE": str(self.index_file)})
        return run(["git", f"--git-dir={self.repo_dir}", f"--work-tree={self.root}", *args],
                   env=env, timeout=timeout).stdout

    def move(self, commit: str) -> None:
        """Check ``commit`` out into the tree (only files that differ from the current commit change)."""
        if self.commit is None:
            self.git("read-tree", "-u", "--reset", commit)
        elif commit != self.commit:
            self.git("read-tree", "-u", "-m", self.commit, commit)
        if self.as_repo and commit != self.commit:
            self.git("update-ref", "--no-deref", "HEAD", commit)
        self.commit = commit

    def commit_time(self, commit: str) -> int:
        """The committer time of ``commit`` (unix seconds)."""
        return int(self.git("show", "-s", "--format=%ct", commit).strip())

    def old_hunks(self, parent: str, commit: str, path: str) -> list[tuple[int, int]]:
        """The changed line ranges of ``path`` on the ``parent`` side of ``parent..commit``, 1-based inclusive.

        A pure insertion (``-a,0``) becomes the one line after which it inserts.
        """
        try:
            diff = self.git("diff", "--no-color", "--no-ext-diff", "-U0", parent, commit, "--", path)
        except ReplayError:
            return []
        ranges = []
        for line in diff.splitlines():
            match = _HUNK.match(line)
            if match:
                start = int(match.group(1))
                count = 1 if match.group(2) is None else int(match.group(2))
                ranges.append((max(start, 1), max(start, 1) + max(count, 1) - 1))
        return ranges


def wait_embeddings(status, timeout: float, poll_s: float = 0.2) -> tuple[float, dict | None, bool]:
    """Wait until the embedder has caught up: ``(seconds waited, last embedding status, timed out)``.

    ``status``: a callable returning ``cogd status --json`` as a dict. Caught
    up = state ``idle`` with no pass queued (coverage alone is not enough: the
    daemon reports it while still loading the model). Idle with coverage below
    1.0 means the embedder stalled; the caller records the coverage. No
    ``embedding`` key or the states ``disabled``/``error``/``stopped`` end the
    wait at once.
    """
    started = time.perf_counter()
    while True:
        emb = status().get("embedding")
        if not isinstance(emb, dict) or emb.get("state") in ("disabled", "error", "stopped"):
            return time.perf_counter() - started, emb, False
        if emb.get("state") == "idle" and not emb.get("queued"):
            return time.perf_counter() - started, emb, False
        if time.perf_counter() - started > timeout:
            return time.perf_counter() - started, emb, True
        time.sleep(poll_s)


def toml_value(text: str) -> str:
    """A ``--set`` value as TOML: numbers and booleans bare, anything else quoted."""
    if re.fullmatch(r"-?\d+(\.\d+)?|true|false", text):
        return text
    return json.dumps(text)


def render_config(sections: dict[str, dict[str, str]], extra: list[str]) -> str:
    """``config.toml`` text from ``{section: {key: toml-literal}}`` plus ``section.key=value`` overrides."""
    sections = {s: dict(kv) for s, kv in sections.items()}
    for item in extra:
        key, eq, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (section and name and dot and eq):
            raise ReplayError(f"--set wants section.key=value, got {item!r}")
        sections.setdefault(section, {})[name] = toml_value(value)
    return "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) + "\n" for s, kv in sections.items())


class Daemon:
    """The cogd daemon of one tree: CLI for start/stop, JSON-RPC over its socket for the rest."""

    def __init__(self, root: Path):
        self.root = root
        self._socket: str | None = None
        try:
            import importlib

            importlib.import_module("cogd.rpc.client")  # the client rpc() uses
            from cogd.rpc.locate import socket_path

            self._socket = socket_path(str(root))
        except Exception:  # noqa: BLE001 — an older or broken cogd: use the CLI
            self._socket = None

    def cogd(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``cogd --root ROOT ARGS`` (the console script next to this interpreter)."""
        return run([str(BIN / "cogd"), "--root", str(self.root), *args], timeout=timeout, check=check)

    def start(self) -> None:
        proc = self.cogd("start", timeout=120, check=False)
        if proc.returncode != 0:
            raise ReplayError(f"cogd start failed: {(proc.stderr or proc.stdout).strip()[-600:]}")

    def stop(self) -> None:
        self.cogd("stop", timeout=60, check=False)

    def rpc(self, method: str, params: dict | None = None, timeout: float = 60) -> object:
        """Call one daemon method; raises :class:`ReplayError` when it cannot."""
        if self._socket is None:
            raise ReplayError("cogd's client is not importable")
        from cogd.rpc.client import DaemonUnavailable, RemoteError, call

        try:
            return call(self._socket, method, params or {}, timeout=timeout)
        except (DaemonUnavailable, RemoteError, ValueError) as exc:
            raise ReplayError(f"{method}: {exc.__class__.__name__}: {exc}") from exc

    def refresh(self, timeout: float = 1800) -> dict:
        """Bring the index up to date and return when it is current (``index.refresh`` with wait)."""
        if self._socket is None:
            self.cogd("index", timeout=timeout)
            return {}
        result = self.rpc("index.refresh", {"wait": True, "timeout_s": timeout}, timeout=timeout + 10)
        if isinstance(result, dict) and result.get("done") is False:
            raise ReplayError(f"index.refresh did not finish within {timeout:.0f} s")
        return result if isinstance(result, dict) else {}

    def status(self) -> dict:
        if self._socket is None:
            return json.loads(self.cogd("status", "--json", timeout=60).stdout)
        result = self.rpc("status", {}, timeout=30)
        return result if isinstance(result, dict) else {}

    def wait_history(self, head: str, timeout: float = 1800.0, poll_s: float = 0.1) -> tuple[float, dict]:
        """Wait until the history miner has synchronised with ``head`` and mined all it may (what
        a pack may use is then exactly the history reachable from ``head``): ``(seconds waited,
        the last history.status)``. Raises :class:`ReplayError` on timeout or a failed miner."""
        started = time.perf_counter()
        while True:
            state = self.rpc("history.status", {}, timeout=30)
            state = state if isinstance(state, dict) else {}
            if state.get("error"):
                raise ReplayError(f"history mining failed: {state['error']}")
            if state.get("usable") and state.get("synced_head") == head and state.get("state") == "idle" \
                    and not (state.get("last_pass") or {}).get("more"):
                return time.perf_counter() - started, state
            if time.perf_counter() - started > timeout:
                raise ReplayError(f"history not synchronised with {head[:10]} after {timeout:.0f} s")
            time.sleep(poll_s)

    def wait_embeddings(self, timeout: float, poll_s: float = 0.2) -> tuple[float, dict | None, bool]:
        """:func:`wait_embeddings` on this daemon's ``status``."""
        return wait_embeddings(self.status, timeout, poll_s)
