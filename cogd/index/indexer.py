"""Incremental indexing by content hash.

A refresh lists the source files, skips those whose size and mtime match the
stored row (a cheap stat), hashes the rest, re-parses only files whose content
hash changed, and drops files that are gone. Entity ids derive from path and
qualified name, so an edit that renames nothing keeps every id.

Files that cannot or should not be parsed keep a file entity only (so they
stay findable by path) and record why in ``files.status``, counted per reason
in :attr:`RefreshResult.skipped`:

``binary``
    a NUL byte in the first 8 KiB (after any UTF-16/32 transcoding);
``minified``
    generated or minified text: a line longer than ``minified_line_bytes``
    (default 4,096) anywhere in the file, or a mean line length above
    ``minified_mean_line_bytes`` (default 300) in a file of 4 KiB or more.
    Checked before the size limit, on the first 64 KiB of a file over it. The
    thresholds are chosen so hand-written code with one long literal (the
    standard library's longest line is 1,181 bytes, in ``test_bz2.py``) stays
    parsed, while a one-line bundle or a minifier's 500-column output does not;
``too_large``
    more than ``max_file_bytes`` (default 1 MiB);
``timeout``
    the tree-sitter parse ran longer than ``parse_timeout_ms`` (default
    2,000 ms; 0 = no limit) and was cancelled; a warning is logged;
``unreadable``
    reading failed (OSError; retried on every refresh) or extraction raised.

Decoding: a UTF-8 BOM is stripped and a UTF-16 or UTF-32 file with a BOM is
transcoded to UTF-8 before parsing (newlines map one to one, so line numbers
are the file's). Anything else goes to tree-sitter as it is: invalid UTF-8
(Latin-1 and such) parses, with the odd byte replaced in extracted text.
"""

from __future__ import annotations

import codecs
import logging
import os
import posixpath
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cogd.config import IndexConfig
from cogd.index import resolve, store
from cogd.index.extract import Entity, ParsedFile, content_hash, extract, line_count
from cogd.index.languages import grammar, language_for_path
from cogd.index.sources import git_head, list_source_files

log = logging.getLogger("cogd.index")

# A file modified this close to the scan may change again within the same
# mtime tick; store mtime 0 so the next scan re-hashes it (git's "racy clean").
RACY_WINDOW_NS = 2_000_000_000
BATCH_FILES = 200  # files per transaction: readers see progress, writes stay short
BINARY_SNIFF_BYTES = 8192
MINIFIED_SNIFF_BYTES = 65536  # how much of a file over the size limit the minified check reads
MINIFIED_MEAN_MIN_BYTES = 4096  # the mean-line-length rule needs at least this much text
READ_CHUNK_BYTES = 8192  # slice handed to tree-sitter per read callback
_DEFAULTS = IndexConfig()
# UTF-32 first: its little-endian BOM begins with UTF-16's.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)

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


def to_utf8(data: bytes) -> bytes:
    """``data`` as UTF-8 for the parser: UTF-8 BOM stripped, UTF-16/32 with a BOM transcoded.

    Other bytes are returned unchanged (not copied). Never raises: undecodable
    UTF-16/32 code units become U+FFFD.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data[len(codecs.BOM_UTF8):]
    for bom, codec in _WIDE_BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace").encode("utf-8", errors="replace")
    return data


def looks_minified(text: bytes, max_line: int, max_mean: int) -> bool:
    """Whether ``text`` reads as generated/minified (see the module docstring)."""
    if len(text) <= max_line and len(text) < MINIFIED_MEAN_MIN_BYTES:
        return False
    lines = text.split(b"\n")
    if max(map(len, lines)) > max_line:
        return True
    if lines[-1] == b"":
        lines.pop()
    return len(text) >= MINIFIED_MEAN_MIN_BYTES and len(text) / max(len(lines), 1) > max_mean


class ParseTimeout(Exception):
    """A tree-sitter parse ran past its deadline and was cancelled."""


class _DeadlineParser:
    """Stands in for a grammar's ``tree_sitter.Parser`` during one ``extract`` call.

    py-tree-sitter honours ``progress_callback`` only when the source comes
    from a read callback (it warns and ignores it for a bytestring), so the
    bytes are served in slices and the callback cancels the parse once the
    deadline has passed; the parser is then reset so its next parse starts
    afresh. A tree parsed from a callback answers ``Node.text`` by calling it
    again, slowly, so a finished parse is redone from the bytes with that tree
    as ``old_tree``: nothing changed, every node is reused (about a tenth of
    a parse). Everything else is delegated to the real parser.
    """

    def __init__(self, parser, budget_s: float):
        self._parser = parser
        self._budget_s = budget_s

    def parse(self, source, old_tree=None, encoding="utf8"):
        extra = {} if old_tree is None else {"old_tree": old_tree}  # 0.26 refuses old_tree=None
        if not isinstance(source, (bytes, bytearray, memoryview)):
            return self._parser.parse(source, encoding=encoding, **extra)
        data = bytes(source)
        deadline = time.perf_counter() + self._budget_s

        def read(offset: int, _point) -> bytes:
            return data[offset : offset + READ_CHUNK_BYTES]

        def past_deadline(_offset: int, _has_error: bool) -> bool:
            return time.perf_counter() > deadline

        try:
            tree = self._parser.parse(read, encoding=encoding, progress_callback=past_deadline, **extra)
        except ValueError:  # "Parsing failed": how 0.26 reports a cancelled parse
            if time.perf_counter() <= deadline:
                raise
            tree = None
        if tree is None:
            self._parser.reset()
            raise ParseTimeout(f"parse cancelled after {self._budget_s * 1000:.0f} ms")
        return self._parser.parse(data, old_tree=tree, encoding=encoding)

    def __getattr__(self, name: str):
        return getattr(self._parser, name)


class Indexer:
    """Keeps ``index.db`` in step with the work tree of ``root``.

    Not thread-safe: the daemon calls it from its single index worker thread.
    The limits default to :class:`cogd.config.IndexConfig`'s defaults.
    """

    def __init__(
        self,
        root: Path,
        db_path: Path,
        max_file_bytes: int = _DEFAULTS.max_file_bytes,
        *,
        parse_timeout_ms: int = _DEFAULTS.parse_timeout_ms,
        minified_line_bytes: int = _DEFAULTS.minified_line_bytes,
        minified_mean_line_bytes: int = _DEFAULTS.minified_mean_line_bytes,
    ):
        self.root = root
        self.conn = store.connect(db_path)
        self.max_file_bytes = max_file_bytes
        self.parse_timeout_ms = parse_timeout_ms
        self.minified_line_bytes = minified_line_bytes
        self.minified_mean_line_bytes = minified_mean_line_bytes

    @classmethod
    def from_config(cls, root: Path, db_path: Path, config: IndexConfig) -> "Indexer":
        """An Indexer with the limits of an ``[index]`` config section."""
        return cls(
            root, db_path, config.max_file_bytes, parse_timeout_ms=config.parse_timeout_ms,
            minified_line_bytes=config.minified_line_bytes,
            minified_mean_line_bytes=config.minified_mean_line_bytes,
        )

    def close(self) -> None:
        self.conn.close()

    def _extract(self, path: str, text: bytes, language: str) -> ParsedFile:
        """``extract`` with the parse bounded by ``parse_timeout_ms`` (raises ParseTimeout)."""
        if not self.parse_timeout_ms:
            return extract(path, text, language)
        gram = grammar(language)  # the per-thread grammar extract() itself will use
        real = gram.parser
        gram.parser = _DeadlineParser(real, self.parse_timeout_ms / 1000)
        try:
            return extract(path, text, language)
        finally:
            gram.parser = real

    def _parse(self, path: str, data: bytes) -> tuple[ParsedFile, str]:
        """Entities of ``path`` (raw bytes ``data``) and its status (``ok`` or a skip reason)."""
        language = language_for_path(path) or "text"
        text = to_utf8(data)
        if b"\0" in text[:BINARY_SNIFF_BYTES]:
            return _file_only(path, language, data, 0), "binary"
        oversized = len(data) > self.max_file_bytes
        sample = text[:MINIFIED_SNIFF_BYTES] if oversized else text
        if looks_minified(sample, self.minified_line_bytes, self.minified_mean_line_bytes):
            return _file_only(path, language, data, line_count(text)), "minified"
        if oversized:
            return _file_only(path, language, data, line_count(text)), "too_large"
        try:
            parsed = self._extract(path, text, language)
        except ParseTimeout:
            log.warning("parse of %s (%d bytes) exceeded %d ms: indexed by path only",
                        path, len(data), self.parse_timeout_ms)
            return _file_only(path, language, data, line_count(text)), "timeout"
        except Exception:  # one bad file must never stop the index
            log.exception("parse failed: %s", path)
            return _file_only(path, language, data, line_count(text)), "unreadable"
        if text is not data:  # the file's hash is of its bytes on disk, as refresh() compares
            parsed.entities[0].hash = content_hash(data)
        return parsed, "ok"

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
            except FileNotFoundError:  # vanished between stat and read
                if path in known:
                    gone.append(path)
                continue
            except OSError as exc:
                log.warning("unreadable %s: %s", path, exc)
                result.skipped["unreadable"] = result.skipped.get("unreadable", 0) + 1
                # Recorded by path (like any skipped file); mtime 0 so the next refresh tries again.
                names_before |= resolve.entity_names(self.conn, [path])
                store.write_file(self.conn, _file_only(path, language_for_path(path) or "text", b"", 0),
                                 size=st.st_size, mtime_ns=0, status="unreadable", now=time.time())
                parsed_paths.append(path)
                result.parsed += 1
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
