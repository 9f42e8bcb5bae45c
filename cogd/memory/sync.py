"""The stat scan of ``.cogd/memory/``: hand edits, new files and deleted files, through the lattice.

For every ``<folder>/<name>.md`` (dot files — the atomic writer's temporaries —
are skipped) whose size or mtime differs from what the projection last saw:

- unreadable or broken frontmatter → a ``broken_frontmatter`` problem with line
  and column, stored against the file; the file is left untouched, its memory
  keeps its last legal state, and every other file keeps syncing; a file over
  ``record.MAX_FILE_BYTES`` is a ``too_large`` problem and is never read whole;
- a file holding a secret (in any field, private spans included) is first rewritten with it masked
  (:meth:`MemoryStore.mask_file_secrets`, a ``secret_masked`` event): the file is bound for git.
  The first scan of a process looks at every file this way, changed or not (files written before
  the scanner knew a key family);
- otherwise the record goes through :meth:`MemoryStore.apply_file_state`, which
  asks the lattice about the status change (from the ledger's last accepted
  status, else the projection's) and refuses
  illegal moves and tombstoned claims without touching the file.

A record file that disappears takes its memory out of the projection with a
``file_removed`` event (the pre-image keeps the text; ``purge`` erases it).
A deleted or replaced ``memory.db`` is reopened and rebuilt from the files.
Before any of this, :meth:`MemoryStore.recover` completes the writes a crash
interrupted (their intents), so cogd's own half-done writes never reach the scan.

The record files also answer two questions of :mod:`cogd.recovery` (which
imports nothing of memory): how many there are (:func:`count_record_files`)
and which tombstones a new ledger must get back (:func:`restore_tombstones`).
"""

from __future__ import annotations

import os
from pathlib import Path

from cogd.memory.errors import MemoryRefused
from cogd.memory.events import pre_image
from cogd.memory.normalise import content_hash
from cogd.memory.record import FOLDERS, RecordError, read
from cogd.secrets import strip_private


def record_files(memory_dir) -> dict[str, os.stat_result]:
    """``{"observations/<name>.md": stat}`` for every record file under ``memory_dir``."""
    found: dict[str, os.stat_result] = {}
    for folder in sorted(set(FOLDERS.values())):
        try:
            entries = os.scandir(memory_dir / folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(".md"):
                    continue
                try:
                    if entry.is_file(follow_symlinks=False):
                        found[f"{folder}/{entry.name}"] = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
    return found


def count_record_files(memory_dir: Path) -> int:
    """How many record files ``memory_dir`` holds (what :func:`cogd.recovery.classify_ledger` is told)."""
    return len(record_files(memory_dir))


def restore_tombstones(memory_dir: Path, ledger) -> int:
    """Put back the tombstones that rejected and pruned record files carry in their frontmatter.

    Run when the ledger is new or was lost (see :mod:`cogd.recovery`).
    ``ledger``: a :class:`cogd.memory.events.MemoryLedger`. A rejected record
    without a ``tombstone`` key gets the hash of its normalised body (as
    rejecting it would have written). Files that do not parse are skipped
    (doctor reports them). Returns how many tombstones were not there before.
    """
    restored = 0
    for rel in sorted(record_files(memory_dir)):
        try:
            record = read(memory_dir / rel)
        except (RecordError, OSError, UnicodeDecodeError):
            continue
        if record.status not in ("rejected", "pruned"):
            continue
        body = strip_private(record.body).strip()
        stone = record.tombstone or (content_hash(body) if body else "")
        if not stone or ledger.tombstone(stone) is not None:
            continue
        ledger.add_tombstone(stone, record.id, record.rejected_reason or f"{record.status} (restored from its file)",
                             record.updated_at)
        restored += 1
    return restored


def _problem(kind: str, message: str, fix: str, line: int = 0, column: int = 0) -> dict:
    return {"kind": kind, "message": message, "fix": fix, "line": line, "column": column}


def scan(store) -> dict:
    """One pass over the memory folder (call with ``store``'s lock held). Returns counts:
    ``{"seen", "changed", "accepted", "refused", "broken", "removed"}``.

    ``store``: the :class:`cogd.memory.api.MemoryStore` being synced (its
    :meth:`~cogd.memory.api.MemoryStore.sync` calls this). Not imported here:
    this module sits below the API.
    """
    projection = store.projection
    if projection.replaced():
        projection.open()
    counts = {"seen": 0, "changed": 0, "accepted": 0, "refused": 0, "broken": 0, "removed": 0}
    on_disk = record_files(store.memory_dir)
    swept = _sweep_secrets(store, on_disk)
    known = projection.files()
    counts["seen"] = len(on_disk)
    # id -> the path that holds it, for files that were already fine
    claimed: dict[str, str] = {row["id"]: rel for rel, row in known.items()
                               if rel in on_disk and row["id"] and not row["problem"]}
    for rel in sorted(on_disk):
        st = on_disk[rel]
        seen = known.get(rel)
        if seen is not None and seen["mtime_ns"] == st.st_mtime_ns and seen["size"] == st.st_size:
            continue
        counts["changed"] += 1
        counts[_sync_file(store, rel, st, seen, claimed)] += 1
    counts["removed"] = _drop_removed(store, known, on_disk, claimed)
    if swept:  # the masked records replaced projected text in place: merge it out of the files
        projection.merge_text()
        store.ledger.checkpoint()
    return counts


def _sweep_secrets(store, on_disk: dict[str, os.stat_result]) -> bool:
    """Mask secrets in every record file, once per process; True when a file was rewritten.

    Files older than the scanner's current rules may hold a key family it did
    not know when they were synced. ``on_disk`` gets the new stats.
    """
    if store.secrets_swept:
        return False
    swept = False
    for rel, st in on_disk.items():
        try:
            on_disk[rel] = store.mask_file_secrets(rel, st)
        except OSError:
            continue  # left to the per-file checks of the scan
        swept = swept or on_disk[rel] is not st
    store.secrets_swept = True
    return swept


def _sync_file(store, rel: str, st: os.stat_result, seen, claimed: dict[str, str]) -> str:
    """Carry one changed record file into the projection; returns the count it adds to.

    ``seen``: the file's projection row (None for a new file); ``claimed``: id
    -> path of the files that hold an id legally (updated on acceptance).
    Returns ``broken`` (unreadable, too large, bad frontmatter), ``refused`` (a
    duplicate id, a misplaced file, a move the lattice refuses) or ``accepted``.
    """
    projection = store.projection
    try:
        st = store.mask_file_secrets(rel, st)  # bound for git: a secret is masked in the file itself
        record = read(store.memory_dir / rel)
    except RecordError as exc:
        fix = ("shorten it, or split it into several memories; the memory keeps its last good state meanwhile"
               if exc.kind == "too_large" else
               "fix the frontmatter at that line and column; the memory keeps its last good state meanwhile")
        projection.set_file(rel, st.st_mtime_ns, st.st_size, seen["id"] if seen else "",
                            _problem(exc.kind, exc.message, fix, exc.line, exc.column))
        return "broken"
    except OSError as exc:
        projection.set_file(rel, st.st_mtime_ns, st.st_size, seen["id"] if seen else "",
                            _problem("unreadable", str(exc), "check the file's permissions"))
        return "broken"
    other = claimed.get(record.id)
    if other is not None and other != rel:
        projection.set_file(rel, st.st_mtime_ns, st.st_size, "", _problem(
            "duplicate_id", f"id {record.id} is already used by {other}",
            "give this file a new id (or delete one of the two copies)"))
        return "refused"
    if rel != record.relpath():
        projection.set_file(rel, st.st_mtime_ns, st.st_size, record.id, _problem(
            "misplaced", f"a {record.type} with id {record.id} belongs at {record.relpath()}",
            f"move the file to .cogd/memory/{record.relpath()} (type and id decide its place)"))
        return "refused"
    row = projection.row(record.id)
    try:
        action = store.apply_file_state(record, _last_legal_status(store, record.id, row), row,
                                        actor="human" if row is not None else "sync", relpath=rel,
                                        arrival=row is None)
    except (MemoryRefused, OSError) as exc:  # defensive: apply_file_state records problems itself
        projection.set_file(rel, st.st_mtime_ns, st.st_size, record.id,
                            _problem("error", str(exc), "see the daemon log"))
        return "refused"
    claimed[record.id] = rel
    return "refused" if action == "refused" else "accepted"


def _last_legal_status(store, entity_id: str, row) -> str | None:
    """The status a change of ``entity_id``'s file is judged from: the projection's, or the ledger's when ahead.

    The projection is rebuildable and lags after a crash between an event and
    its projection; the ledger's last accepted status is then the last legal state.
    """
    logged = store.ledger.last_status(entity_id)
    if row is not None and logged not in (None, "purged", row["status"]):
        return logged
    return row["status"] if row is not None else logged


def _drop_removed(store, known: dict, on_disk: dict[str, os.stat_result], claimed: dict[str, str]) -> int:
    """Take the memories whose record file is gone out of the projection; returns how many.

    Each gets a ``file_removed`` event carrying its pre-image. A file row whose
    memory lives in another file (moved, or a duplicate) is only dropped.
    """
    projection, removed = store.projection, 0
    for rel, seen in known.items():
        if rel in on_disk:
            continue
        projection.drop_file(rel)
        entity_id = seen["id"]
        row = projection.row(entity_id) if entity_id else None
        if row is None or row["path"] != rel or entity_id in claimed and claimed[entity_id] != rel:
            continue
        store.ledger.append("human", entity_id, "file_removed", row["status"], None, pre_image(row),
                            {"path": rel})
        projection.delete(entity_id)
        removed += 1
    return removed
