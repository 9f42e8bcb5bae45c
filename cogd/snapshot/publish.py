"""``cogd snapshot publish``: write the index projection of HEAD to a store, once per commit.

Steps (each object is written whole before the manifest names it, and the manifest last, so a
reader finds either a complete snapshot or none; a publish killed half-way resumes, because
objects already in the store are not written again):

1. refuse a work tree that differs from HEAD (the index would not be the commit's) and an
   index that is not at HEAD;
2. copy ``index.db`` with the backup API and export the current vectors (:mod:`cogd.snapshot.files`)
   into ``.cogd/snapshot/outgoing/``;
3. cut each file into parts of :data:`~cogd.snapshot.manifest.PART_BYTES`, compress each with
   zlib and name it by the SHA-256 of its stored bytes;
4. upload the objects the store lacks, then the manifest.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import sqlite3
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cogd
from cogd import safepath
from cogd.config import Config
from cogd.index import store as index_store
from cogd.paths import Layout
from cogd.snapshot import gitrepo
from cogd.snapshot.files import backup_index, export_vectors
from cogd.snapshot.manifest import (INDEX_FILE, MANIFEST_NAME, PART_BYTES, VECTORS_FILE, FileEntry, Manifest, Part,
                                    SnapshotError)
from cogd.snapshot.objects import Store, open_store

log = logging.getLogger("cogd.snapshot")

ZLIB_LEVEL = 1  # fast: the index compresses about 3:1 at 1 and barely better at 6 (README figures)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
Progress = Callable[[str], None]


@dataclass
class PublishResult:
    """What a publish did: ``state`` ``published`` or ``exists`` (a no-op), sizes in bytes."""

    state: str
    uri: str
    repo_id: str
    commit: str
    files_bytes: int = 0
    stored_bytes: int = 0
    uploaded_bytes: int = 0
    counts: dict | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def store_for(config: Config, uri: str | None = None) -> Store:
    """The store ``uri`` (default ``[snapshot] uri``) names; raises SnapshotError when none is configured."""
    uri = uri or config.snapshot.uri
    if not uri:
        raise SnapshotError("no snapshot store configured", "set [snapshot] uri in .cogd/config.toml or pass --to URI")
    return open_store(uri, endpoint=config.snapshot.endpoint, region=config.snapshot.region)


def repository_id(root: Path, config: Config) -> str:
    """``[snapshot] repo_id`` when set (checked: a plain name), else the root commit."""
    configured = config.snapshot.repo_id
    if configured:
        if not REPO_ID.match(configured):
            raise SnapshotError(f"snapshot.repo_id {configured[:40]!r} must be letters, digits, '.', '_' or '-'")
        return configured
    return gitrepo.repo_id(root)


def model_entry(config: Config, root: Path) -> dict | None:
    """The manifest's ``model`` for this configuration (None with embedding off); raises ModelError."""
    if not config.embed.enabled:
        return None
    from cogd.embed.model import resolve_model

    info = resolve_model(config.embed, root)
    return {"id": info.id, "sha256": info.sha256, "dim": info.dim, "text": config.embed.text,
            "max_tokens": config.embed.max_tokens}


def _cut(path: Path, objects: Path) -> tuple[str, list[Part]]:
    """Cut ``path`` into compressed parts written to ``objects/<sha256>``; its sha256 and the parts."""
    whole = hashlib.sha256()
    parts = []
    with open(path, "rb") as fh:
        while chunk := fh.read(PART_BYTES):
            whole.update(chunk)
            packed = zlib.compress(chunk, ZLIB_LEVEL)
            name = hashlib.sha256(packed).hexdigest()
            safepath.write_atomic(objects / name, packed)
            parts.append(Part(name, len(packed), len(chunk)))
    return whole.hexdigest(), parts


def _stage(layout: Layout, config: Config, commit: str, staging: Path) -> tuple[list[FileEntry], dict, dict | None]:
    """The snapshot's files cut into objects under ``staging``; (files, counts, model)."""
    index_copy = staging / INDEX_FILE
    backup_index(layout.index_db, index_copy)
    conn = sqlite3.connect(f"file:{index_copy}?mode=ro", uri=True)
    try:
        at = index_store.get_meta(conn, "commit")
        counts = index_store.counts(conn)
    finally:
        conn.close()
    if at != commit:
        raise SnapshotError(f"the index is at commit {str(at)[:12] or 'none'}, HEAD is {commit[:12]}",
                            "run `cogd index` (or let the daemon catch up), then publish again")
    model = model_entry(config, layout.root)
    names = [INDEX_FILE]
    counts["vectors"] = 0
    if model is not None:
        counts["vectors"] = export_vectors(index_copy, layout.index_dir / "vectors", model, staging / VECTORS_FILE)
        names.append(VECTORS_FILE)
    objects = staging / "objects"
    safepath.check_chain(objects, create=True)
    entries = []
    for name in names:
        digest, parts = _cut(staging / name, objects)
        entries.append(FileEntry(name, (staging / name).stat().st_size, digest, tuple(parts)))
    return entries, counts, model


def publish(layout: Layout, config: Config, uri: str | None = None, progress: Progress = log.info) -> PublishResult:
    """Publish the snapshot of HEAD to ``uri`` (default ``[snapshot] uri``); a no-op when it exists.

    The caller has brought the index up to date. Raises SnapshotError (dirty tree, index not
    at HEAD, no store), StoreUnavailable, ModelError, sqlite3.Error.
    """
    began = time.monotonic()
    target = store_for(config, uri)
    commit, rid = gitrepo.head(layout.root), repository_id(layout.root, config)
    prefix = f"{rid}/{commit}"
    target.children(rid, 1)  # reach the store first (a missing share fails here, before any copying)
    if target.exists(f"{prefix}/{MANIFEST_NAME}"):
        progress(f"snapshot of {commit[:12]} already in {target.uri}: nothing to do")
        return PublishResult("exists", target.uri, rid, commit, seconds=time.monotonic() - began)
    dirty = gitrepo.dirty_paths(layout.root)
    if dirty:
        raise SnapshotError(f"the work tree differs from HEAD ({', '.join(dirty[:3])}{' …' if len(dirty) > 3 else ''}): "
                            "its index is not the commit's", "commit or stash the changes (CI publishes from a clean checkout)")
    staging = layout.cogd_dir / "snapshot" / "outgoing"
    shutil.rmtree(staging, ignore_errors=True)  # a killed publish's leftovers: made again from the index
    safepath.check_chain(staging, create=True)
    try:
        entries, counts, model = _stage(layout, config, commit, staging)
        uploaded = 0
        for entry in entries:
            for part in entry.parts:
                key = f"{prefix}/objects/{part.object}"
                if not target.exists(key):
                    target.upload(key, staging / "objects" / part.object)
                    uploaded += part.size
        manifest = Manifest(rid, commit, gitrepo.parents(layout.root, commit), time.time(), cogd.__version__,
                            index_store.SCHEMA_VERSION, model, counts, entries)
        safepath.write_atomic(staging / MANIFEST_NAME, manifest.to_json())
        target.upload(f"{prefix}/{MANIFEST_NAME}", staging / MANIFEST_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = PublishResult("published", target.uri, rid, commit, manifest.total_bytes, manifest.stored_bytes, uploaded,
                           counts, time.monotonic() - began)
    progress(f"published {commit[:12]} to {target.uri}: {counts['entities']} entities, {counts['vectors']} vectors, "
             f"{manifest.total_bytes / 1e6:.1f} MB ({manifest.stored_bytes / 1e6:.1f} MB stored) in {result.seconds:.1f} s")
    return result
