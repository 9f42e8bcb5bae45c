"""Incremental indexing by content hash.

A refresh lists the source files, skips those whose size and mtime match the
stored row (a cheap stat), hashes the rest, re-parses only files whose content
hash changed, and drops files that are gone. Entity ids derive from path and
qualified name, so an edit that renames nothing keeps every id.
"""

from __future__ import annotations

import logging
import os
import posixpath
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cogd.index import resolve, store
from cogd.index.extract import Entity, ParsedFile, content_hash, extract, line_count
from cogd.index.languages import language_for_path
from cogd.index.sources import git_head, list_source_files

log = logging.getLogger("cogd.index")

# A file modified this close to the scan may change again within the same
# mtime tick; store mtime 0 so the next scan re-hashes it (git's "racy clean").
RACY_WINDOW_NS = 2_000_000_000
BATCH_FILES = 200  # files per transaction: readers see progress, writes stay short
BINARY_SNIFF_BYTES = 8192

ProgressFn = Callable[[int, int, str], None]  # (done, total, current path)


@dataclass
class RefreshResult:
    """What one refresh did. Counts are files."""

    scanned: int = 0
    parsed: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    commit: str | None = None
    duration_ms: float = 0.0

    def as_dict(self) -> dict:
        return {
            "scanned": self.scanned, "parsed": self.parsed, "unchanged": self.unchanged,
            "removed": self.removed, "skipped": dict(self.skipped), "commit": self.commit,
            "duration_ms": round(self.duration_ms, 1),
        }


def _file_only(path: str, language: str, data: bytes, line_count: int) -> ParsedFile:
    """A file entity with no code entities (for skipped content)."""
    entity = Entity(
        id=path, kind="file", path=path, name=path.rsplit("/", 1)[-1], qualname=path,
        start_line=1, end_line=max(line_count, 1), language=language, hash=content_hash(data),
    )
    return ParsedFile(path, language, [entity])


class Indexer:
    """Keeps ``index.db`` in step with the work tree of ``root``.

    Not thread-safe: the daemon calls it from its single index worker thread.
    """

    def __init__(self, root: Path, db_path: Path, max_file_bytes: int = 1 << 20):
        self.root = root
        self.conn = store.connect(db_path)
        self.max_file_bytes = max_file_bytes

    def close(self) -> None:
        self.conn.close()

    def _parse(self, path: str, data: bytes) -> tuple[ParsedFile, str]:
        language = language_for_path(path) or "text"
        if len(data) > self.max_file_bytes:
            return _file_only(path, language, data, line_count(data)), "too_large"
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            return _file_only(path, language, data, 0), "binary"
        try:
            return extract(path, data, language), "ok"
        except Exception:  # one bad file must never stop the index
            log.exception("parse failed: %s", path)
            return _file_only(path, language, data, line_count(data)), "unreadable"

    def _resolve(
        self, known: dict, parsed_paths: list[str], gone: list[str], names_before: set[tuple[str, str]],
        everything: bool,
    ) -> None:
        """Bring reference edges in step with the files just written.

        When the set of files changed (an import may now find, or lose, its
        target) everything is re-resolved; otherwise only the re-parsed files
        and the files that mention a name whose definitions were added,
        removed or re-identified.
        """
        if everything or gone or any(p not in known for p in parsed_paths):
            resolve.resolve(self.conn, str(self.root), None)
        elif parsed_paths:
            names_after = resolve.entity_names(self.conn, parsed_paths)
            affected = {name for name, _id in names_before ^ names_after}
            resolve.resolve(self.conn, str(self.root), resolve.files_to_reresolve(self.conn, set(parsed_paths), affected))

    def refresh(
        self, paths: Iterable[str] | None = None, progress: ProgressFn | None = None, *, full: bool = False
    ) -> RefreshResult:
        """Bring the index up to date; returns what changed.

        ``paths``: repo-relative paths to check (for example from a save
        event); None scans the whole tree. ``full``: re-parse every file even
        when its stat and hash are unchanged (each file is replaced in place,
        so readers never see an emptied index). A listed path that no longer exists
        or is no longer a source file is removed from the index. Commits every
        ``BATCH_FILES`` files so concurrent readers see a consistent, growing
        index. Raises sqlite3.Error only when the database itself fails.
        """
        started = time.perf_counter()
        result = RefreshResult()
        known = store.known_files(self.conn)
        if paths is None:
            current = list_source_files(self.root)
            current_set = set(current)
            gone = [p for p in known if p not in current_set]
        else:
            wanted = sorted({posixpath.normpath(p.replace(os.sep, "/")).lstrip("/") for p in paths})
            present = set(list_source_files(self.root)) if wanted else set()
            current = [p for p in wanted if p in present]
            gone = [p for p in wanted if p not in present and p in known]
        result.scanned = len(current)

        to_parse: list[tuple[str, os.stat_result]] = []
        for path in current:
            try:
                st = os.stat(self.root / path)
            except OSError:  # vanished between listing and stat
                if path in known:
                    gone.append(path)
                continue
            row = known.get(path)
            if not full and row is not None and row["mtime_ns"] == st.st_mtime_ns and row["size"] == st.st_size:
                result.unchanged += 1
                continue
            to_parse.append((path, st))

        now_ns = time.time_ns()
        total = len(to_parse)
        parsed_paths: list[str] = []
        names_before: set[tuple[str, str]] = set()  # (name, id) defined in re-parsed files, before
        for i, (path, st) in enumerate(to_parse, 1):
            try:
                data = (self.root / path).read_bytes()
            except OSError as exc:
                log.warning("unreadable %s: %s", path, exc)
                result.skipped["unreadable"] = result.skipped.get("unreadable", 0) + 1
                continue
            mtime_ns = 0 if now_ns - st.st_mtime_ns < RACY_WINDOW_NS else st.st_mtime_ns
            row = known.get(path)
            if not full and row is not None and row["hash"] == content_hash(data) and row["status"] == "ok":
                store.update_file_stat(self.conn, path, st.st_size, mtime_ns)
                result.unchanged += 1
            else:
                parsed, status = self._parse(path, data)
                if status != "ok":
                    result.skipped[status] = result.skipped.get(status, 0) + 1
                names_before |= resolve.entity_names(self.conn, [path])
                store.write_file(self.conn, parsed, size=st.st_size, mtime_ns=mtime_ns, status=status, now=time.time())
                parsed_paths.append(path)
                result.parsed += 1
            if i % BATCH_FILES == 0:
                self.conn.commit()
            if progress is not None:
                progress(i, total, path)

        for path in gone:
            store.delete_file(self.conn, path)
        result.removed = len(gone)
        self._resolve(known, parsed_paths, gone, names_before, everything=full and paths is None)
        result.commit = git_head(self.root)
        store.set_meta(self.conn, "commit", result.commit or "")
        store.set_meta(self.conn, "indexed_at", f"{time.time():.3f}")
        self.conn.commit()
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result
