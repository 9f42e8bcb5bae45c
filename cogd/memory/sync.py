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
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cogd.memory.errors import MemoryRefused
from cogd.memory.record import FOLDERS, RecordError, read

if TYPE_CHECKING:
    from cogd.memory.api import MemoryStore


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


def _problem(kind: str, message: str, fix: str, line: int = 0, column: int = 0) -> dict:
    return {"kind": kind, "message": message, "fix": fix, "line": line, "column": column}


def scan(store: "MemoryStore") -> dict:
    """One pass over the memory folder (call with ``store``'s lock held). Returns counts:
    ``{"seen", "changed", "accepted", "refused", "broken", "removed"}``."""
    projection = store.projection
    if projection.replaced():
        projection.open()
    counts = {"seen": 0, "changed": 0, "accepted": 0, "refused": 0, "broken": 0, "removed": 0}
    on_disk = record_files(store.memory_dir)
    swept = False
    if not store.secrets_swept:  # once per process: files older than the scanner's current rules
        for rel, st in on_disk.items():
            try:
                on_disk[rel] = store.mask_file_secrets(rel, st)
            except OSError:
                continue  # left to the per-file checks below
            swept = swept or on_disk[rel] is not st
        store.secrets_swept = True
    known = projection.files()
    counts["seen"] = len(on_disk)
    claimed: dict[str, str] = {}  # id -> the path that holds it, for files that were already fine
    for rel, row in known.items():
        if rel in on_disk and row["id"] and not row["problem"]:
            claimed[row["id"]] = rel
    for rel in sorted(on_disk):
        st = on_disk[rel]
        seen = known.get(rel)
        if seen is not None and seen["mtime_ns"] == st.st_mtime_ns and seen["size"] == st.st_size:
            continue
        counts["changed"] += 1
        path = store.memory_dir / rel
        try:
            st = store.mask_file_secrets(rel, st)  # bound for git: a secret is masked in the file itself
            record = read(path)
        except RecordError as exc:
            fix = ("shorten it, or split it into several memories; the memory keeps its last good state meanwhile"
                   if exc.kind == "too_large" else
                   "fix the frontmatter at that line and column; the memory keeps its last good state meanwhile")
            projection.set_file(rel, st.st_mtime_ns, st.st_size, seen["id"] if seen else "",
                                _problem(exc.kind, exc.message, fix, exc.line, exc.column))
            counts["broken"] += 1
            continue
        except OSError as exc:
            projection.set_file(rel, st.st_mtime_ns, st.st_size, seen["id"] if seen else "",
                                _problem("unreadable", str(exc), "check the file's permissions"))
            counts["broken"] += 1
            continue
        other = claimed.get(record.id)
        if other is not None and other != rel:
            projection.set_file(rel, st.st_mtime_ns, st.st_size, "", _problem(
                "duplicate_id", f"id {record.id} is already used by {other}",
                "give this file a new id (or delete one of the two copies)"))
            counts["refused"] += 1
            continue
        if rel != record.relpath():
            projection.set_file(rel, st.st_mtime_ns, st.st_size, record.id, _problem(
                "misplaced", f"a {record.type} with id {record.id} belongs at {record.relpath()}",
                f"move the file to .cogd/memory/{record.relpath()} (type and id decide its place)"))
            counts["refused"] += 1
            continue
        row = projection.row(record.id)
        logged = store.ledger.last_status(record.id)
        old_status = row["status"] if row is not None else logged
        if row is not None and logged not in (None, "purged", row["status"]):
            # The ledger is ahead of the projection (which is rebuildable and lags after a crash
            # between an event and its projection): the last legal state is the ledger's.
            old_status = logged
        try:
            action = store.apply_file_state(record, old_status, row, actor="human" if row is not None else "sync",
                                            relpath=rel, arrival=row is None)
        except (MemoryRefused, OSError) as exc:  # defensive: apply_file_state records problems itself
            projection.set_file(rel, st.st_mtime_ns, st.st_size, record.id,
                                _problem("error", str(exc), "see the daemon log"))
            counts["refused"] += 1
            continue
        counts["refused" if action == "refused" else "accepted"] += 1
        claimed[record.id] = rel
    for rel, seen in known.items():
        if rel in on_disk:
            continue
        projection.drop_file(rel)
        entity_id = seen["id"]
        row = projection.row(entity_id) if entity_id else None
        if row is None or row["path"] != rel or entity_id in claimed and claimed[entity_id] != rel:
            continue
        store.ledger.append("human", entity_id, "file_removed", row["status"], None, store._pre_image(row),
                            {"path": rel})
        projection.delete(entity_id)
        counts["removed"] += 1
    if swept:  # the masked records replaced projected text in place: merge it out of the files
        projection.merge_text()
        store.ledger.checkpoint()
    return counts
