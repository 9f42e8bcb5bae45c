"""``cogd reset``: drop the projection and rebuild it from the work tree (and memory files).

The projection is ``.cogd/index/``: ``index.db`` (files, entities, edges,
refs, FTS5), the LanceDB vectors (``vectors/``) and ``memory.db`` when the
memory subsystem has made one. The embedding cache (``embed_cache.db``, keyed
by model and text hash) lives in the same folder but is *kept*: it is what
makes rebuilding the vectors a matter of reading the cache rather than running
the model again. The ledger (``.cogd/state.db``) and the memory files
(``.cogd/memory/``) are records, not projection: kept, except that
``wipe_ledger`` (``cogd reset --all``) deletes the ledger after the rebuild.

Sequence (:func:`reset`): stop the daemon if it runs; take the daemon lock
(so nothing else writes meanwhile); move ``.cogd/index/`` aside, keeping the
cache; rebuild the index in-process (a full refresh), then ``memory.db`` from
the memory files (``memory.sync``), then each hook of :data:`REBUILD_HOOKS`, then the vectors
(from the cache; the model only for texts it has never seen); delete the old
folder; optionally wipe the ledger; release the lock; restart the daemon if
it was running. If the rebuild fails, the old projection is put back as it
was and the error is raised: nothing is lost. Each rebuild step is a stage of
:class:`cogd.cli.progress.Stages` (a bar per stage on a terminal, lines otherwise).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import click

from cogd.cli.base import err, layout_from
from cogd.cli.progress import Stages
from cogd.config import Config, load_config
from cogd.errors import CogdError
from cogd.rpc import control
from cogd.paths import Layout

log = logging.getLogger("cogd.reset")

#: Files of the embedding cache (SQLite and its WAL side files), kept across a reset.
CACHE_FILES = ("embed_cache.db", "embed_cache.db-wal", "embed_cache.db-shm")
LEDGER_FILES = ("state.db", "state.db-wal", "state.db-shm")
MEMORY_DB_FILES = ("memory.db", "memory.db-wal", "memory.db-shm")
OLD_INDEX = "index.reset-old"  # where the old projection waits until the new one is built
INDEX_TIMEOUT_S = 3600.0  # the index rebuild is given up (and the old projection put back) after this long
POLL_S = 0.1  # how often a stage's progress is read

#: Extension point: functions ``(layout, config) -> dict`` that rebuild further parts of the
#: projection after the code index and ``memory.db`` (rebuilt by the daemon service's
#: ``memory.sync`` from ``.cogd/memory/*.md``). Each returns a small summary for the report.
REBUILD_HOOKS: list[Callable[[Layout, Config], dict]] = []


class ResetError(CogdError, RuntimeError):
    """The reset could not run (lock held by another process, daemon would not stop or restart).

    ``kind``: ``busy`` (another process holds the lock), ``unavailable`` (the daemon did not
    come back), ``internal`` (the rebuild did not finish).
    """

    def __init__(self, message: str, kind: str = "busy"):
        super().__init__(kind, message)


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    log.info(message)
    if progress is not None:
        progress(message)


def _rebuild_index(layout: Layout, config: Config, stages: Stages) -> dict:
    """A full refresh of a new, empty ``index.db``, then ``memory.db`` from the memory files;
    returns the refresh result and counts. Each is a stage of ``stages``."""
    from cogd.daemon.service import Service

    service = Service(layout, config, start_index=False, start_embedder=False)
    try:
        log.info("rebuilding the code index from the work tree")
        stages.start("index", "parsing the work tree")
        worker = service.worker
        ticket = service.call("index.refresh", {"wait": False, "full": True})["ticket"]
        deadline = time.monotonic() + INDEX_TIMEOUT_S
        while not (done := worker.wait(ticket, timeout=POLL_S)) and time.monotonic() < deadline:
            p = dict(worker.progress)
            stages.update(p.get("done", 0), p.get("total") or None, "files parsed")
        status = service.call("status", {})
        counts = {k: status["index"][k] for k in ("files", "entities", "edges")}
        if done:
            stages.finish(f"{counts['files']:,} files, {counts['entities']:,} code entities, "
                          f"{counts['edges']:,} edges", counts["files"])
        # memory.db (part of the projection) is rebuilt from .cogd/memory/*.md by a sync
        # after the code index, so anchors are judged against the rebuilt index.
        memory = None
        if done and "memory.sync" in service.methods:
            log.info("rebuilding memory.db from the memory files")
            stages.start("memory", "reading the memory files")
            memory = service.call("memory.sync", {})
            stages.finish(_memory_summary(memory), memory.get("seen", 0))
    finally:
        service.close()
    if not done:
        raise ResetError(f"the index rebuild did not finish: {status.get('last_error') or 'unknown reason'}",
                         "internal")
    return {"refresh": status["index"].get("last_refresh"), "memory": memory, **counts}


def _memory_summary(memory: dict) -> str:
    """``3 memory files read: 2 accepted, 1 broken`` from a ``memory.sync`` result."""
    counts = ", ".join(f"{memory[k]} {k}" for k in ("accepted", "refused", "broken", "removed") if memory.get(k))
    return f"{memory.get('seen', 0):,} memory files read" + (f": {counts}" if counts else "")


def _rebuild_vectors(layout: Layout, config: Config, wait_s: float, stages: Stages) -> dict:
    """Re-create the LanceDB vectors from the kept cache (the model embeds only cache misses).

    Waits at most ``wait_s`` seconds; what is left is done by the daemon later
    (vectors are upserted as they go). Returns the embedder's final status; its ``computed``
    is how many texts the model embedded (the rest came from the cache).
    """
    from cogd.daemon.embedder import EmbeddingWorker

    log.info("rebuilding vectors from the embedding cache")
    stages.start("vectors", "loading the model")
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, config.embed)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            status = worker.status()
            if status["state"] == "error":
                stages.finish(f"embeddings unavailable: {status['error']}")
                break
            if status["state"] == "idle" and not status["queued"]:
                stages.finish(f"{status['embedded_entities']:,} of {status['entities']:,} entities, "
                              f"{status['computed']:,} computed by the model (the rest from the cache)",
                              status["embedded_entities"])
                break
            if time.monotonic() > deadline:
                stages.finish(f"{status['pending']:,} left for the daemon to finish")
                break
            if worker.counted:
                stages.update(status["embedded_entities"], status["entities"] or None,
                              f"{status['computed']:,} computed by the model")
            time.sleep(POLL_S / 2)
    finally:
        worker.stop()
    log.info("vectors: %s of %s entities, %s computed by the model", status.get("embedded_entities"),
             status.get("entities"), status.get("computed"))
    return {k: status.get(k) for k in ("state", "model", "entities", "embedded_entities", "pending", "computed", "error")}


def _move(src: Path, dst: Path) -> None:
    if src.exists():
        os.replace(src, dst)


def reset(layout: Layout, config: Config, *, wipe_ledger: bool = False, restart: bool = True,
          wait_embed_s: float = 600.0, progress: Callable[[str], None] | None = None,
          stages: Stages | None = None) -> dict:
    """Drop and rebuild ``layout``'s projection; see the module doc for the sequence.

    ``wipe_ledger``: also delete ``.cogd/state.db`` (the caller has asked the
    user). ``restart``: start the daemon again if it was running.
    ``wait_embed_s``: how long to spend rebuilding vectors (with embeddings
    enabled). ``progress``: called with one line per step. ``stages``: where the rebuild's
    stages (index, memory, each hook, vectors) show their progress
    (:class:`cogd.cli.progress.Stages`; None: nowhere).

    Returns ``{"was_running", "restarted", "index": {...}, "hooks": [...],
    "vectors": {...} | None, "embed_cache_kept", "ledger_wiped",
    "duration_s"}``. Raises ResetError when another process holds the lock
    or the daemon does not stop; re-raises a rebuild failure after restoring
    the old projection.
    """
    started = time.monotonic()
    layout.ensure()
    was_running = _stop_daemon(layout, progress)
    fd = control.try_lock(layout)
    if fd is None:
        raise ResetError("another cogd process took the daemon lock meanwhile; try again")
    result: dict = {"was_running": was_running, "restarted": False, "hooks": [], "vectors": None,
                    "embed_cache_kept": False, "ledger_wiped": False}
    try:
        old = _set_aside(layout)
        result["embed_cache_kept"] = (layout.index_dir / CACHE_FILES[0]).exists()
        try:
            result.update(_rebuild(layout, config, wait_embed_s, stages or Stages(quiet=True)))
        except BaseException:
            log.exception("reset failed: restoring the previous projection")
            _put_back(layout, old)
            raise
        shutil.rmtree(old, ignore_errors=True)
        if wipe_ledger:
            _say(progress, "wiping the local ledger (.cogd/state.db)")
            _wipe_ledger(layout)
            result["ledger_wiped"] = True
    finally:
        os.close(fd)
    if was_running and restart:
        _say(progress, "restarting the daemon")
        control.spawn(layout, force=True)
        if not control.wait_ready(layout, timeout=60):
            raise ResetError("the projection was rebuilt but the daemon did not come back; see `cogd logs`",
                             "unavailable")
        result["restarted"] = True
    result["duration_s"] = round(time.monotonic() - started, 2)
    return result


def _stop_daemon(layout: Layout, progress: Callable[[str], None] | None) -> bool:
    """Stop ``layout``'s daemon if it runs; returns whether it ran. Raises ResetError when the
    lock is held by a process that is not the daemon (it cannot be stopped from here)."""
    if not control.is_running(layout):
        return False
    _say(progress, "stopping the daemon")
    if not control.stop(layout):
        raise ResetError("the daemon lock is held by a process that is not this repository's daemon "
                         "(a cogd command working in-process?); try again when it has finished")
    return True


def _set_aside(layout: Layout) -> Path:
    """Move ``.cogd/index/`` to :data:`OLD_INDEX` and start an empty one holding only the
    embedding cache; returns the old folder's path."""
    index_dir, old = layout.index_dir, layout.cogd_dir / OLD_INDEX
    if old.exists():
        shutil.rmtree(old)  # left by a reset that was killed half-way: the live index is index/
    if index_dir.exists():
        os.replace(index_dir, old)
    index_dir.mkdir(parents=True)
    for name in CACHE_FILES:
        _move(old / name, index_dir / name)
    return old


def _rebuild(layout: Layout, config: Config, wait_embed_s: float, stages: Stages) -> dict:
    """Rebuild the index (and ``memory.db``), then each of :data:`REBUILD_HOOKS`, then the vectors,
    each a stage of ``stages``; returns ``{"index", "hooks", "vectors"}`` for :func:`reset`'s result."""
    out: dict = {"index": _rebuild_index(layout, config, stages), "hooks": [], "vectors": None}
    for hook in REBUILD_HOOKS:
        log.info("rebuilding: %s", getattr(hook, "__name__", "hook"))
        stages.start(getattr(hook, "__name__", "hook"), "rebuilding")
        out["hooks"].append(hook(layout, config))
        stages.finish("rebuilt")
    if config.embed.enabled:
        out["vectors"] = _rebuild_vectors(layout, config, wait_embed_s, stages)
    return out


def _put_back(layout: Layout, old: Path) -> None:
    """Undo :func:`_set_aside` after a failed rebuild: the old projection, cache included, is live again."""
    index_dir = layout.index_dir
    for name in CACHE_FILES:  # the cache goes back with the old projection
        _move(index_dir / name, old / name)
    shutil.rmtree(index_dir, ignore_errors=True)
    if old.exists():
        os.replace(old, index_dir)


def _wipe_ledger(layout: Layout) -> None:
    """Delete the ledger (``state.db``) on request, and ``memory.db`` before it.

    The ledger holds the memory tombstones too. ``memory.db`` goes first, so the next sync
    rebuilds it from the record files — and re-reads each rejected or pruned file's
    ``tombstone`` — instead of skipping files it has already seen (a kill between the two
    steps leaves the ledger intact and ``memory.db`` to rebuild: nothing is lost).
    """
    from cogd.recovery import forget_ledger

    for name in MEMORY_DB_FILES:
        (layout.index_dir / name).unlink(missing_ok=True)
    for name in LEDGER_FILES:
        (layout.cogd_dir / name).unlink(missing_ok=True)
    forget_ledger(layout.cogd_dir)  # a wipe on request is not a loss: drop the marker of what it held


@click.command("reset")
@click.option("--all", "wipe_all", is_flag=True, help="Also wipe the local ledger (.cogd/state.db): deliveries, tool uses, sessions.")
@click.option("--yes", is_flag=True, help="Do not ask before wiping the ledger.")
@click.option("--wait-embed", default=600, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to spend rebuilding vectors (from the embedding cache) before leaving the rest to the daemon.")
@click.pass_context
def reset_command(ctx: click.Context, wipe_all: bool, yes: bool, wait_embed: float) -> None:
    """Drop and rebuild the projection (.cogd/index/) from the work tree; the embedding cache is kept.

    Stops the daemon if it runs and starts it again afterwards.
    """
    layout = layout_from(ctx)
    config = load_config(layout.config_file)
    if wipe_all and not yes:
        click.confirm(f"Wipe the local ledger {layout.state_db} (deliveries, tool uses, sessions)? "
                      "It cannot be rebuilt", abort=True, err=True)
    with Stages() as stages:
        result = reset(layout, config, wipe_ledger=wipe_all, wait_embed_s=wait_embed,
                       progress=lambda line: err.print(f"[dim]{line}[/]"), stages=stages)
    index = result["index"]
    click.echo(f"projection rebuilt: {index['files']} files, {index['entities']} code entities, "
               f"{index['edges']} edges ({result['duration_s']:.1f} s)")
    v = result["vectors"]
    if v is not None:
        click.echo(f"vectors: {v.get('embedded_entities')} of {v.get('entities')}, "
                   f"{v.get('computed')} computed by the model (the rest from the cache)"
                   + (f"; error: {v['error']}" if v.get("error") else ""))
    if result["ledger_wiped"]:
        click.echo("ledger wiped")
    if result["restarted"]:
        click.echo(f"daemon restarted (pid {(control.read_pid(layout) or {}).get('pid')})")
