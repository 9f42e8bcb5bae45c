"""Pulling a snapshot: find the nearest ancestor of HEAD that has one, download it aside, verify
it, install it as the local projection. The caller holds the daemon lock (no store is open).

Order, and why:

1. **find** — ``git rev-list`` HEAD and at most ``[snapshot] max_ancestors`` commits before it,
   nearest first, against one listing of the repository's folder in the store;
2. **judge** — the manifest is parsed strictly (:func:`cogd.snapshot.manifest.parse`), then
   :func:`refusal`: another index schema or another embedding model (or text style or token
   cap) is refused with the reason, and cogd builds locally instead;
3. **download aside** into ``.cogd/snapshot/incoming/<commit>/``: each object to ``<name>.part``,
   its size bounded by the manifest and its SHA-256 checked, then renamed to its name; a pull
   that was killed finds the verified objects there and fetches only the rest;
4. **assemble and check** — each file decompressed (bounded) from its parts, its SHA-256
   checked, then opened as a database (:func:`cogd.snapshot.files.check_index`, ``check_vectors``);
5. **install** — the vectors into a fresh LanceDB directory and the embedding cache, then the
   directories and ``index.db`` renamed into place (stale ``-wal``/``-shm`` removed first),
   and ``.cogd/index/snapshot.json`` written last (:mod:`cogd.snapshot.state`).

The daemon then refreshes as always: files whose content differs from the snapshot's commit
are parsed again, and the embedding pass embeds only entities whose content hash changed.
Any failure leaves the local projection as it was and says why (:class:`PullResult`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cogd import faults, safepath
from cogd.config import Config
from cogd.errors import CogdError
from cogd.index import store as index_store
from cogd.paths import Layout
from cogd.snapshot import gitrepo, state
from cogd.snapshot.files import check_index, check_vectors, prepare_index, vector_rows
from cogd.snapshot.manifest import (INDEX_FILE, MANIFEST_NAME, MAX_MANIFEST_BYTES, VECTORS_FILE, FileEntry, Manifest,
                                    SnapshotError, parse)
from cogd.snapshot.objects import Store, StoreUnavailable
from cogd.snapshot.publish import repository_id, store_for

log = logging.getLogger("cogd.snapshot")

MAX_LISTED = 100_000  # names read from the repository's folder at most
RETRY_AFTER_S = 600.0  # a daemon's start does not retry a pull that failed for the same HEAD this recently
ObjectHook = Callable[[str, int], None]  # (object name, bytes) after each verified download


@dataclass
class PullResult:
    """How a pull ended. ``state``: ``installed`` | ``none`` (no ancestor has a snapshot) |
    ``refused`` (incompatible or failed verification) | ``failed`` (the store or the disk) |
    ``skipped`` (not configured, or a local index exists). ``reason`` says why for the last four."""

    state: str
    reason: str = ""
    commit: str | None = None
    behind: int | None = None  # commits from the snapshot's commit to HEAD
    downloaded_bytes: int = 0
    reused_bytes: int = 0  # objects a killed pull had already verified
    seconds: float = 0.0
    vectors: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def line(self) -> str:
        """One line for a log or a terminal."""
        if self.state == "installed":
            return (f"snapshot of {str(self.commit)[:12]} installed ({self.behind} commit{'' if self.behind == 1 else 's'} behind HEAD, "
                    f"{self.downloaded_bytes / 1e6:.1f} MB downloaded, {self.vectors} vectors) in {self.seconds:.1f} s")
        return f"snapshot {self.state}: {self.reason}"


def refusal(manifest: Manifest, config: Config, root: Path) -> str | None:
    """Why this cogd cannot use ``manifest``'s snapshot (None when it can): another index schema,
    or vectors of another model, text style or token cap than ``config`` embeds with."""
    if manifest.schema_version != index_store.SCHEMA_VERSION:
        return (f"it was built with index schema {manifest.schema_version!r}, this cogd uses "
                f"{index_store.SCHEMA_VERSION!r}")
    if manifest.model is None or not config.embed.enabled:
        return None
    from cogd.embed.model import resolve_model

    info = resolve_model(config.embed, root)  # ModelError: the model is broken here (a local build fails too)
    mine = {"id": info.id, "text": config.embed.text, "max_tokens": config.embed.max_tokens}
    theirs = {k: manifest.model[k] for k in mine}
    if mine != theirs:
        return f"its vectors are of {theirs}, this repository embeds with {mine}"
    return None


def find(store: Store, root: Path, config: Config) -> tuple[str, Manifest] | None:
    """``(repo id, manifest)`` of the nearest ancestor of HEAD with a snapshot, or None. Raises
    SnapshotError for a malformed manifest, StoreUnavailable."""
    rid = repository_id(root, config)
    listed = store.children(rid, MAX_LISTED)
    for commit in gitrepo.ancestors(root, config.snapshot.max_ancestors):
        if commit in listed:
            data = store.read(f"{rid}/{commit}/{MANIFEST_NAME}", MAX_MANIFEST_BYTES)
            if data is None:
                continue  # a publish in progress (objects without their manifest yet)
            return rid, parse(data, max_bytes=config.snapshot.max_mb << 20, repo_id=rid, commit=commit)
    return None


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch(store: Store, key: str, dest: Path, size: int, name: str) -> None:
    """Download ``key`` to ``dest`` through ``dest.part``, checking its size and SHA-256 ``name``."""
    part = dest.with_name(dest.name + ".part")
    with os.fdopen(safepath.open_file(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as fh:
        got = store.download(key, fh, size)
    if got != size:
        part.unlink()
        raise SnapshotError(f"object {name[:16]}… is damaged or truncated ({got} of {size} bytes)")
    if _sha256_file(part) != name:
        part.unlink()
        raise SnapshotError(f"object {name[:16]}… fails its SHA-256 check (the store's copy is damaged)")
    os.replace(part, dest)


def _download(store: Store, prefix: str, entries: list[FileEntry], incoming: Path, hook: ObjectHook | None,
              result: PullResult) -> None:
    objects = incoming / "objects"
    safepath.check_chain(objects, create=True)
    for entry in entries:
        for part in entry.parts:
            dest = objects / part.object
            if dest.is_file() and dest.stat().st_size == part.size and _sha256_file(dest) == part.object:
                result.reused_bytes += part.size  # verified by a pull that was killed after it
                continue
            _fetch(store, f"{prefix}/objects/{part.object}", dest, part.size, part.object)
            result.downloaded_bytes += part.size
            faults.point("snapshot:object")
            if hook is not None:
                hook(part.object, part.size)


def _assemble(entry: FileEntry, incoming: Path) -> Path:
    """Decompress ``entry``'s verified parts into ``incoming/<name>`` (bounded), check its SHA-256."""
    out_path = incoming / entry.name
    tmp = incoming / (entry.name + ".tmp")
    digest = hashlib.sha256()
    with os.fdopen(safepath.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as out:
        for part in entry.parts:
            unpack = zlib.decompressobj()
            with open(incoming / "objects" / part.object, "rb") as fh:
                try:
                    raw = unpack.decompress(fh.read(), part.raw_size + 1)  # never more than it claims (+1 to see excess)
                except zlib.error as exc:
                    raise SnapshotError(f"{entry.name}: an object does not decompress ({exc})") from exc
            if len(raw) != part.raw_size or not unpack.eof:
                raise SnapshotError(f"{entry.name}: an object decompresses to another size than its manifest says")
            digest.update(raw)
            out.write(raw)
    if digest.hexdigest() != entry.sha256:
        tmp.unlink()
        raise SnapshotError(f"{entry.name} fails its SHA-256 check after assembly")
    os.replace(tmp, out_path)
    return out_path


def _install_vectors(layout: Layout, incoming: Path, manifest: Manifest) -> int:
    """Fill a fresh LanceDB directory and the embedding cache from the checked ``vectors.db``, then
    rename the directory into place. Returns the vectors installed."""
    from cogd.embed.cache import EmbeddingCache
    from cogd.index.vectors import VectorStore

    model = manifest.model or {}
    staged = incoming / "vectors"
    shutil.rmtree(staged, ignore_errors=True)
    vectors = VectorStore(staged, int(model["dim"]))
    count = 0
    with EmbeddingCache(layout.index_dir / "embed_cache.db") as cache:
        for rows in vector_rows(incoming / VECTORS_FILE, model["id"], int(model["dim"])):
            cache.put_many({r["key"]: r["vector"] for r in rows}, model["id"])
            vectors.upsert([{k: v for k, v in r.items() if k != "key"} for r in rows])
            count += len(rows)
    vectors.compact(force=True)
    del vectors
    live = layout.index_dir / "vectors"
    old = layout.index_dir / "vectors.replaced"
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        os.replace(live, old)
    os.replace(staged, live)
    shutil.rmtree(old, ignore_errors=True)
    return count


def _install_index(layout: Layout, incoming: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):  # a stale WAL would be replayed onto the new file
        try:
            os.unlink(f"{layout.index_db}{suffix}")
        except FileNotFoundError:
            pass
    os.replace(incoming / INDEX_FILE, layout.index_db)


def _get(store: Store, layout: Layout, config: Config, rid: str, manifest: Manifest, hook: ObjectHook | None,
         result: PullResult) -> None:
    """Download, check and install ``manifest``'s snapshot (steps 3–5 of the module docstring)."""
    use_vectors = manifest.model is not None and config.embed.enabled
    entries = [e for e in manifest.files if e.name == INDEX_FILE or use_vectors]
    snapshots = layout.cogd_dir / "snapshot" / "incoming"
    safepath.check_chain(snapshots, create=True)
    for other in os.listdir(snapshots):  # what an older, killed pull of another commit left
        if other != manifest.commit:
            shutil.rmtree(snapshots / other, ignore_errors=True)
    incoming = snapshots / manifest.commit
    safepath.check_chain(incoming, create=True)
    _download(store, f"{rid}/{manifest.commit}", entries, incoming, hook, result)
    for entry in entries:
        _assemble(entry, incoming)
    check_index(incoming / INDEX_FILE, manifest)
    if use_vectors:
        check_vectors(incoming / VECTORS_FILE, manifest)
    prepare_index(incoming / INDEX_FILE)
    faults.point("snapshot:install")
    if use_vectors:
        result.vectors = _install_vectors(layout, incoming, manifest)
    _install_index(layout, incoming)
    state.record(layout, {"commit": manifest.commit, "repo_id": rid, "uri": store.uri, "created_at": manifest.created_at,
                          "model": manifest.model["id"] if use_vectors and manifest.model else None,
                          "vectors": result.vectors, "counts": manifest.counts})
    shutil.rmtree(incoming, ignore_errors=True)


def pull(layout: Layout, config: Config, *, uri: str | None = None, hook: ObjectHook | None = None) -> PullResult:
    """Find, verify and install the nearest snapshot of HEAD's history (module docstring).

    The caller holds the daemon lock. Never raises for what a store or a snapshot can do wrong:
    the result says ``none``, ``refused`` or ``failed`` with the reason, and the local projection is
    as it was (a rebuild from the work tree follows). ``hook(object, bytes)`` is called after each
    verified download (progress; tests). Raises only for the local disk (OSError) and bugs.
    """
    began = time.monotonic()
    result = PullResult("none")
    try:
        store = store_for(config, uri)
        found = find(store, layout.root, config)
        if found is None:
            result.reason = (f"no snapshot in {store.uri} for HEAD or the {config.snapshot.max_ancestors} "
                             "commits before it")
            return result
        rid, manifest = found
        result.commit = manifest.commit
        result.behind = gitrepo.distance(layout.root, manifest.commit)
        why = refusal(manifest, config, layout.root)
        if why is not None:
            result.state, result.reason = "refused", f"snapshot of {manifest.commit[:12]} refused: {why}"
            return result
        _get(store, layout, config, rid, manifest, hook, result)
        result.state = "installed"
    except StoreUnavailable as exc:
        result.state, result.reason = "failed", exc.line()
    except CogdError as exc:  # SnapshotError (bad manifest, damaged object, wrong schema), ModelError, git
        result.state, result.reason = "refused", exc.line()
    finally:
        result.seconds = time.monotonic() - began
    try:
        state.record_attempt(layout, gitrepo.head(layout.root), {"state": result.state, "reason": result.reason})
    except (CogdError, OSError):
        pass  # only an optimisation of the next start
    return result


def local_index_empty(layout: Layout) -> bool:
    """Whether this repository has no index worth keeping (no ``index.db``, or one without files)."""
    if not layout.index_db.is_file():
        return True
    try:
        conn = index_store.connect(layout.index_db, readonly=True)
        try:
            return not index_store.holds_index(conn) or not index_store.has_files(conn)
        finally:
            conn.close()
    except Exception:  # damaged or foreign: the daemon's own check moves it aside; nothing to keep
        return True


def pull_on_start(layout: Layout, config: Config) -> PullResult:
    """At a daemon's start (under its lock): pull when ``[snapshot] uri`` is set, ``pull_on_start`` is
    on and there is no local index. Logs the outcome; never raises (a failed pull is a local build)."""
    if not config.snapshot.uri or not config.snapshot.pull_on_start:
        return PullResult("skipped", "no [snapshot] uri configured")
    if not local_index_empty(layout):
        return PullResult("skipped", "a local index exists (`cogd snapshot pull` replaces it)")
    try:
        failed = state.recent_failure(layout, gitrepo.head(layout.root), RETRY_AFTER_S)
        if failed is not None:  # e.g. `cogd up` just tried: build locally instead of failing twice
            log.info("snapshot not pulled: the pull for this HEAD just ended %s (%s)", failed.get("state"),
                     failed.get("reason"))
            return PullResult("skipped", f"the last pull for this HEAD ended {failed.get('state')}")
        result = pull(layout, config)
    except Exception as exc:  # the disk, or a bug: the daemon must still start and build locally
        log.exception("snapshot pull failed")
        return PullResult("failed", f"{exc.__class__.__name__}: {exc}")
    (log.info if result.state in ("installed", "none") else log.warning)("%s", result.line())
    return result
