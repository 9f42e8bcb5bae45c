"""Status says what is so: embedding words, why a pack is empty, errors that clear.

Deterministic states come from holding real objects at known points (the
embedding worker in-process) or from ``cogd.faults`` in a real daemon (the
first index held back, a ledger write failing as a full disk does).
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import COGD, COGD_HOOK, WAIT_S, cogd_in_process, make_repo, payload, wait_for
from cogd.cli.progress import embedding_line as _embedding_line
from cogd.config import EmbedConfig
from cogd.daemon.embedder import EmbeddingWorker
from cogd.index.indexer import Indexer
from cogd.paths import Layout

FILES = {
    "app/models.py": "class User:\n    def display_name(self):\n        return 'u'\n",
    "app/views.py": "from app.models import User\n\n\ndef render_profile(user: User):\n    return user.display_name()\n",
}


# ---------------------------------------------------------------- the embedding worker, in-process

def test_embedding_words_follow_the_worker_through_each_phase(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "repo", FILES)
    layout = Layout(root).ensure()
    indexer = Indexer(root, layout.index_db)
    indexer.refresh()
    entities = indexer.conn.execute("SELECT count(*) FROM entities").fetchone()[0]
    indexer.close()
    assert entities == 5  # 2 files, 1 class, 1 method, 1 function

    gates = {name: threading.Event() for name in ("load", "pass", "chunk")}
    real_load, real_pass, real_interrupted = EmbeddingWorker._load, EmbeddingWorker._pass, EmbeddingWorker._interrupted

    def held_load(self):
        gates["load"].wait(WAIT_S)
        return real_load(self)

    def held_pass(self, conn, vectors):
        gates["pass"].wait(WAIT_S)
        return real_pass(self, conn, vectors)

    def held_interrupted(self):
        gates["chunk"].wait(WAIT_S)  # called after the count, before the first chunk
        return real_interrupted(self)

    monkeypatch.setattr(EmbeddingWorker, "_load", held_load)
    monkeypatch.setattr(EmbeddingWorker, "_pass", held_pass)
    monkeypatch.setattr(EmbeddingWorker, "_interrupted", held_interrupted)
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=1))
    try:
        status = worker.status()
        assert (status["phase"], status["coverage"], _embedding_line(status)) == ("loading", 0.0, "loading the model")

        gates["load"].set()
        wait_for(lambda: worker.state == "embedding", what="the pass to start")
        status = worker.status()
        model = status["model"]
        assert model
        assert (status["phase"], _embedding_line(status)) == ("counting", f"counting the entities to embed ({model})")

        gates["pass"].set()
        wait_for(lambda: worker.counted, what="the count")
        status = worker.status()
        assert status["phase"] == "embedding"
        assert _embedding_line(status) == f"embedding 0 of {entities} entities (0.0%) ({model})"

        gates["chunk"].set()
        status = wait_for(lambda: (s := worker.status())["phase"] == "current" and s, what="current")
        assert (status["coverage"], status["embedded_entities"]) == (1.0, entities)
        assert _embedding_line(status) == f"current: all {entities} entities embedded ({model})"
    finally:
        for gate in gates.values():
            gate.set()
        worker.stop()


def test_no_percentage_before_anything_is_counted():
    for phase in ("loading", "counting"):
        line = _embedding_line({"state": "idle", "phase": phase, "model": "m", "coverage": 1.0, "entities": 0})
        assert "%" not in line and "0 entities" not in line
    assert _embedding_line({"phase": "current", "model": "m", "entities": 0}) == "current: no entities to embed (m)"


# ---------------------------------------------------------------- real daemons

class Repo:
    """A repository with a real daemon driven through the CLI and the hook; faults through a file."""

    def __init__(self, root: Path, faults: Path):
        self.root, self.faults = root, faults
        self.env = {**os.environ, "COLUMNS": "400", "COGD_FAULTS": str(faults), "COGD_HOOK_DEADLINE_MS": "30000"}

    def cogd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([COGD, *args], cwd=self.root, capture_output=True, text=True, timeout=180, env=self.env)
        if check and proc.returncode != 0:
            raise AssertionError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def status(self) -> dict:
        """``cogd status --json``, its code in this process with this repository's environment
        (polled while the daemon works; the text form, :meth:`cogd` ``("status")``, is the real command)."""
        return json.loads(cogd_in_process(self.root, "status", "--json", env=self.env).stdout)

    def fault(self, *names: str) -> None:
        if names:
            self.faults.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
        else:
            self.faults.unlink(missing_ok=True)

    def hook(self, event: str, data: dict) -> str:
        proc = subprocess.run([COGD_HOOK, event], input=json.dumps(data).encode(), capture_output=True,
                              timeout=60, env=self.env)
        assert proc.returncode == 0
        return proc.stdout.decode()

    def hook_log(self) -> list[str]:
        path = Layout(self.root).hook_log
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def repo(tmp_path):
    made = Repo(make_repo(tmp_path / "repo", FILES), tmp_path / "faults")
    (made.root / ".cogd").mkdir()
    (made.root / ".cogd" / "config.toml").write_text("[embed]\nenabled = false\n", encoding="utf-8")
    yield made
    made.fault()
    made.cogd("stop", check=False)


def test_status_right_after_start_never_reads_as_finished(repo):
    (repo.root / ".cogd" / "config.toml").write_text("[embed]\nthreads = 1\n", encoding="utf-8")
    repo.fault("hold_index")  # the first index waits: the entities are not listed yet
    repo.cogd("start")
    seen = set()

    def counting() -> bool:
        status = repo.status()
        embedding = status["embedding"]
        assert embedding["phase"] in ("loading", "counting"), embedding
        seen.add(embedding["phase"])
        return embedding["phase"] == "counting"

    wait_for(counting, what="the first index to be waited for")
    text = repo.cogd("status").stdout
    # The model loads only after the first index (the two peaks of memory do not overlap).
    assert repo.status()["embedding"]["model"] is None
    assert re.search(r"embedding   counting the entities to embed *\n", text), text
    assert "%" not in text

    repo.fault()
    repo.cogd("index")
    status = wait_for(lambda: (s := repo.status())["embedding"]["phase"] == "current" and s, what="embedding to be current")
    total = status["index"]["files"] + status["index"]["entities"]
    assert (total, status["embedding"]["entities"]) == (5, 5)
    model = status["embedding"]["model"]
    assert model and model.startswith("all-MiniLM-L6-v2")
    assert f"embedding   current: all 5 entities embedded ({model})" in repo.cogd("status").stdout


def test_every_empty_pack_has_its_reason_in_the_hook_log(repo):
    repo.fault("hold_index")
    repo.cogd("start")
    wait_for(lambda: repo.status()["index"]["state"] == "indexing", what="the held first index")
    prompt = payload("user_prompt_submit.json", repo.root, prompt="how is the user profile rendered")
    assert repo.hook("prompt-submit", prompt) == ""
    assert " event=prompt-submit " in repo.hook_log()[-1]
    assert repo.hook_log()[-1].split("ms ", 1)[1] == "empty pack: index_building"

    repo.fault()
    repo.cogd("index")
    reasons = []
    for text in ("thanks!", "zyxwvut quuxbaz"):
        assert repo.hook("prompt-submit", {**prompt, "prompt": text}) == ""
        reasons.append(repo.hook_log()[-1].split("ms ", 1)[1])
    assert reasons == ["empty pack: empty_prompt", "empty pack: no_match"]

    lines = len(repo.hook_log())
    delivered = repo.hook("prompt-submit", prompt)
    assert "render_profile" in delivered
    assert len(repo.hook_log()) == lines  # a delivered pack writes nothing to the log

    start = payload("session_start.startup.json", repo.root)
    assert "app/models.py" in repo.hook("session-start", start)
    assert repo.hook("session-start", {**start, "source": "resume"}) == ""
    assert repo.hook_log()[-1].split("ms ", 1)[1] == "empty pack: already_delivered"
    assert repo.hook("session-start", {**start, "source": "compact"}) == ""
    assert repo.hook_log()[-1].split("ms ", 1)[1] == "empty pack: no_working_set"


def test_a_write_failure_shows_in_status_until_a_write_succeeds_again(repo):
    repo.cogd("start")
    repo.cogd("index")
    prompt = payload("user_prompt_submit.json", repo.root, prompt="how is the user profile rendered")
    repo.fault("ledger_write")
    assert repo.hook("prompt-submit", prompt) == ""
    assert "daemon refused the request (internal)" in repo.hook_log()[-1]
    status = repo.status()
    assert status["last_error"] == "context.prompt: database or disk is full"
    assert [(e["kind"], e["error"], e["count"]) for e in status["errors"]] == [
        ("context.prompt", "context.prompt: database or disk is full", 1)]
    assert status["last_resolved"] is None
    assert "last error  context.prompt: database or disk is full" in repo.cogd("status").stdout
    doctor = {c["name"]: c for c in json.loads(repo.cogd("doctor", "--json", "--no-model-load", check=False).stdout)["checks"]}
    assert doctor["daemon"]["status"] == "warn"

    repo.fault()  # the disk has room again
    assert "render_profile" in repo.hook("prompt-submit", prompt)
    status = repo.status()
    assert (status["last_error"], status["errors"]) == (None, [])
    resolved = status["last_resolved"]
    assert (resolved["kind"], resolved["error"]) == ("context.prompt", "context.prompt: database or disk is full")
    assert resolved["since"] <= resolved["at"] <= resolved["resolved_at"]
    text = repo.cogd("status").stdout
    assert "last error  -" in text
    assert "resolved    context.prompt: database or disk is full (cleared " in text
    doctor = {c["name"]: c for c in json.loads(repo.cogd("doctor", "--json", "--no-model-load", check=False).stdout)["checks"]}
    assert doctor["daemon"]["status"] == "ok"
