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
    reading failed (OSError; retried on every refresh) or extraction raised;
``symlink_outside``
    a symlink whose target lies outside the work tree (or in ``.git/`` or
    ``.cogd/``), or a path that turned into one before it was read: never
    read, recorded with size and mtime 0 (see :mod:`cogd.index.boundary`).
``language_disabled``
    the file's language is disabled in this process: its grammar wheel did not
    load or one of its queries did not compile (:func:`cogd.index.languages.check`;
    the reason is in the daemon's status and ``cogd doctor``). When a
    language's state or queries change (``meta.language_digests``), its files
    are parsed again, so fixing the query brings their entities back.

Decoding: a UTF-8 BOM is stripped and a UTF-16 or UTF-32 file with a BOM is
transcoded to UTF-8 before parsing (newlines map one to one, so line numbers
are the file's). Anything else goes to tree-sitter as it is: invalid UTF-8
(Latin-1 and such) parses, with the odd byte replaced in extracted text.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import json
import logging
import os
import posixpath
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cogd.config import IndexConfig
from cogd.index import languages, resolve, store
from cogd.index.boundary import SYMLINK_OUTSIDE, OutsideTree, read_fd, read_tree_file
from cogd.index.extract import Entity, ParsedFile, content_hash, extract, line_count
from cogd.index.languages import LanguageUnavailable, grammar, language_for_path
from cogd.index.parsepool import ParsePool
from cogd.index.sources import SourceListing, classify_paths, git_head, scan_source_files
from cogd.index.trees import TREE_CACHE_FILES, TreeCache

log = logging.getLogger("cogd.index")

# A file modified this close to the scan may change again within the same
# mtime tick; store mtime 0 so the next scan re-hashes it (git's "racy clean").
RACY_WINDOW_NS = 2_000_000_000
BATCH_FILES = 200  # files per transaction: readers see progress, writes stay short
BULK_MIN_FILES = 200  # a first build of at least this many files defers its indexes (store.begin_bulk)
WRITE_BATCH_FILES = 40  # parsed files written with one statement per table (see store.write_files)
BINARY_SNIFF_BYTES = 8192
MINIFIED_BY_LONGEST_LINE = {"javascript", "typescript", "tsx"}
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

    Valid UTF-8 is returned unchanged (not copied); anything else is read as
    Latin-1. Never raises: undecodable UTF-16/32 code units become U+FFFD.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data[len(codecs.BOM_UTF8):]
    for bom, codec in _WIDE_BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace").encode("utf-8", errors="replace")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        # Not UTF-8: read it as Latin-1 (every byte is a character, so line
        # numbers stay put and identifiers like `café` stay whole).
        return data.decode("latin-1").encode("utf-8")
    return data


def looks_minified(text: bytes, max_line: int, max_mean: int) -> bool:
    """Whether ``text`` reads as generated/minified (see the module docstring).

    The lines are split out only when the text is longer than ``max_line`` (only then can one
    line be): for the languages without a longest-line rule (``max_line`` ``1 << 62``) they are
    counted, not made into as many bytes objects.
    """
    if len(text) <= max_line and len(text) < MINIFIED_MEAN_MIN_BYTES:
        return False
    if len(text) > max_line and max(map(len, text.split(b"\n"))) > max_line:
        return True
    # The lines of text.split(b"\n"), a last empty one (after a final newline) not counted.
    lines = text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
    return len(text) >= MINIFIED_MEAN_MIN_BYTES and len(text) / max(lines, 1) > max_mean


def read_source(path: Path | str, max_file_bytes: int, *, root: Path | None = None) -> bytes:
    """The bytes of a regular file; only a head (over the limit by one byte) when it is too large.

    With ``root``, ``path`` is a real repo-relative path (as
    :class:`~cogd.index.sources.SourceListing` maps names to) and is opened
    through :func:`cogd.index.boundary.read_tree_file` with no symlink
    allowed in it: never outside the work tree (raises OutsideTree, an
    OSError). Without, ``path`` is opened as given but a symlink is refused.
    Opens without blocking and refuses anything but a regular file, so a FIFO
    or device that appears at an indexed path cannot hang the indexer. Raises
    OSError (including for a non-regular file).
    """
    limit = max(max_file_bytes, MINIFIED_SNIFF_BYTES) + 1
    if root is not None:
        return read_tree_file(root, os.fspath(path), limit, follow_inside=False)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        return read_fd(fd, limit)
    finally:
        os.close(fd)


class ParseTimeout(Exception):
    """A tree-sitter parse ran past its deadline and was cancelled."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with Python's cyclic garbage collector switched off, then on again (if it was on).

    Why: a full index allocates millions of short-lived objects (query matches, rows, references)
    that reference counting frees, and none that form cycles; the collector's automatic passes
    still trigger on allocation counts and, as the writer's heap grows, re-traverse every row held
    so far (about a tenth of a serial full index's CPU on the standard library, none of it
    reclaiming anything). Nothing is collected late that matters: whatever cycles the body makes
    are found by the first automatic pass after it. Process-wide, so a thread running meanwhile
    loses its automatic passes for that long too; nested or concurrent uses leave the collector
    on when the first one to have found it on ends. Never raises.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


GUARDED_PARSE_BYTES = 64 * 1024  # smaller files parse in a few ms: no deadline machinery


def parse_with_deadline(parser, data: bytes, budget_s: float, reads_text: bool = True):
    """Parse ``data`` with ``parser``, cancelling after ``budget_s`` seconds.

    py-tree-sitter honours ``progress_callback`` only when the source comes
    from a read callback (it ignores it for a bytestring), so the bytes are
    served in slices and the callback cancels the parse once the deadline has
    passed; the parser is then reset. A tree parsed from a callback answers
    ``Node.text`` (and a query's text predicate) by calling it again, slowly,
    so with ``reads_text`` (the caller's queries may read text:
    :func:`cogd.index.languages.query_reads_text`) a finished parse is redone
    from the bytes with that tree as ``old_tree`` (every node is reused).
    Without, the callback's tree is returned as it is: the same nodes, and the
    redo cost a tenth of the parse of every large file; its caller must read
    text from ``data`` by byte offsets, never through ``Node.text``
    (:mod:`cogd.index.extract` and :mod:`cogd.index.references` do).
    Raises ParseTimeout when cancelled.
    """
    deadline = time.perf_counter() + budget_s

    def read(offset: int, _point) -> bytes:
        return data[offset : offset + READ_CHUNK_BYTES]

    def past_deadline(_offset: int, _has_error: bool) -> bool:
        return time.perf_counter() > deadline

    try:
        tree = parser.parse(read, progress_callback=past_deadline)
    except ValueError:  # "Parsing failed": how 0.26 reports a cancelled parse
        if time.perf_counter() <= deadline:
            raise
        tree = None
    if tree is None:
        parser.reset()
        raise ParseTimeout(f"parse cancelled after {budget_s * 1000:.0f} ms")
    return parser.parse(data, old_tree=tree) if reads_text else tree


def _extract(path: str, text: bytes, language: str, parse_timeout_ms: int,
             trees: TreeCache | None = None) -> ParsedFile:
    """``extract`` with the parse bounded by ``parse_timeout_ms`` (raises ParseTimeout).

    Only the parse: query time is bounded by running the whole of this in a
    child process the daemon can kill (:mod:`cogd.index.parsepool`). With
    ``trees``, a file parsed without a deadline is re-parsed from its previous
    tree when the cache has one (:class:`cogd.index.trees.TreeCache`).
    """
    if not parse_timeout_ms or len(text) < GUARDED_PARSE_BYTES:
        if trees is None:
            return extract(path, text, language)
        return extract(path, text, language, tree=trees.parse(path, grammar(language).parser, text))
    gram = grammar(language)
    tree = parse_with_deadline(gram.parser, text, parse_timeout_ms / 1000, gram.reads_text)
    return extract(path, text, language, tree=tree)


@dataclass(frozen=True)
class ParseLimits:
    """What parsing one file may cost: the ``[index]`` limits :func:`parse_file` applies.

    Frozen and picklable: one value travels with every job to the parser
    processes (:mod:`cogd.index.parsepool`). Byte counts are of the file as
    read; ``parse_timeout_ms`` 0 means no limit. See the module docstring for
    what each limit skips.
    """

    max_file_bytes: int = _DEFAULTS.max_file_bytes
    parse_timeout_ms: int = _DEFAULTS.parse_timeout_ms
    minified_line_bytes: int = _DEFAULTS.minified_line_bytes
    minified_mean_line_bytes: int = _DEFAULTS.minified_mean_line_bytes

    @classmethod
    def from_config(cls, config: IndexConfig) -> "ParseLimits":
        """The limits of an ``[index]`` config section (the one place they are read from it)."""
        return cls(config.max_file_bytes, config.parse_timeout_ms, config.minified_line_bytes,
                   config.minified_mean_line_bytes)


def parse_file(path: str, data: bytes, limits: ParseLimits,
               trees: TreeCache | None = None) -> tuple[ParsedFile, str]:
    """Entities of ``path`` (raw bytes ``data``) and its status: ``ok`` or a skip reason.

    Module-level and free of state so worker processes can run it. Never
    raises for bad content. ``trees``: previous parse trees to re-parse from
    (an in-process save, :class:`cogd.index.trees.TreeCache`); the result is
    the same without.
    """
    max_file_bytes, parse_timeout_ms = limits.max_file_bytes, limits.parse_timeout_ms
    minified_line_bytes, minified_mean_line_bytes = limits.minified_line_bytes, limits.minified_mean_line_bytes
    language = language_for_path(path) or "text"
    oversized = len(data) > max_file_bytes  # read_source gives a bit more than the limit, never all of it
    text = to_utf8(data[:MINIFIED_SNIFF_BYTES] if oversized else data)
    if b"\0" in text[:BINARY_SNIFF_BYTES]:
        return _file_only(path, language, data, 0), "binary"
    sample = text
    # One very long line marks minified JavaScript; other languages keep
    # their entities unless the *average* line is long (a Python file with
    # one long data line is still hand-written code).
    line_limit = minified_line_bytes if language in MINIFIED_BY_LONGEST_LINE else 1 << 62
    if looks_minified(sample, line_limit, minified_mean_line_bytes):
        return _file_only(path, language, data, line_count(text)), "minified"
    if oversized:
        return _file_only(path, language, data, line_count(text)), "too_large"
    try:
        parsed = _extract(path, text, language, parse_timeout_ms, trees)
    except LanguageUnavailable:  # reported once by languages.check, not per file
        return _file_only(path, language, data, line_count(text)), "language_disabled"
    except ParseTimeout:
        log.warning("parse of %s (%d bytes) exceeded %d ms: indexed by path only", path, len(data), parse_timeout_ms)
        return _file_only(path, language, data, line_count(text)), "timeout"
    except Exception:  # one bad file must never stop the index
        log.exception("parse failed: %s", path)
        return _file_only(path, language, data, line_count(text)), "unreadable"
    if text is not data:  # the file's hash is of its bytes on disk, as refresh() compares
        parsed.entities[0].hash = content_hash(data)
    return parsed, "ok"


def parse_job(job: tuple[str, bytes, ParseLimits]) -> tuple[ParsedFile, str]:
    """:func:`parse_file` on one (path, data, limits) tuple: what parser processes run."""
    return parse_file(*job)


def parse_rows_job(job: tuple[str, bytes, ParseLimits]) -> tuple[store.FileRows, str]:
    """:func:`parse_job` with the result as the rows the index stores (:func:`cogd.index.store.file_rows`).

    What the daemon's parser processes run: plain rows pickle faster than
    entity objects, and the FTS words are computed in the parser process,
    not by the single writer.
    """
    with collector_paused():  # one file's matches and rows: freed by reference counting
        parsed, status = parse_file(*job)
        return store.file_rows(parsed), status


# The trees of the saves this process parsed, when it is a parse pool's save lane
# (cogd.index.parsepool: every save of a file comes to that one process).
_LANE_TREES: TreeCache | None = None


def save_rows_job(job: tuple[str, bytes, ParseLimits]) -> tuple[store.FileRows, str]:
    """:func:`parse_rows_job` re-parsing from this process's earlier trees: the save lane's job.

    The trees (and the bytes they were parsed from) of the last
    ``TREE_CACHE_FILES`` files live in this process between jobs; the rows are
    those of a fresh parse (:mod:`cogd.index.trees`).
    """
    global _LANE_TREES
    if _LANE_TREES is None:
        _LANE_TREES = TreeCache()
    parsed, status = parse_file(*job, trees=_LANE_TREES)
    if status != "ok":  # indexed without a tree: an older one of this path is not kept either
        _LANE_TREES.forget(job[0])
    return store.file_rows(parsed), status


def forget_trees_job(paths: list[str]) -> int:
    """Drop the lane's trees (and bytes) of ``paths``; returns how many it held."""
    if _LANE_TREES is None:
        return 0
    held = sum(path in _LANE_TREES for path in paths)
    for path in paths:
        _LANE_TREES.forget(path)
    return held


def timeout_rows(job: tuple) -> tuple[store.FileRows, str]:
    """:func:`timeout_result` as rows (the pool's ``on_timeout`` with :func:`parse_rows_job`)."""
    parsed, status = timeout_result(job)
    return store.file_rows(parsed), status


def timeout_result(job: tuple) -> tuple[ParsedFile, str]:
    """What a file whose parse ran out of time is indexed as: its path only."""
    path, data, _limits = job
    return _file_only(path, language_for_path(path) or "text", data, line_count(data)), "timeout"


class Indexer:
    """Keeps ``index.db`` in step with the work tree of ``root``.

    Not thread-safe: the daemon calls it from its single index worker thread.
    ``config``: the project's ``[index]`` section (``Config.index``); None
    means :class:`cogd.config.IndexConfig`'s defaults. ``pool``: parser
    processes to parse in (the daemon's; their job may be :func:`parse_job` or,
    cheaper, :func:`parse_rows_job`); None parses in this process.
    """

    def __init__(self, root: Path, db_path: Path, config: IndexConfig | None = None, *,
                 pool: ParsePool | None = None):
        self.root = root
        self.db_path = db_path
        languages.configure(root)  # this repository's query overrides (.cogd/queries/), in this process
        self.conn = store.connect(db_path)
        # The daemon parses in child processes it can kill; direct callers
        # (tests, scripts, the CLI without a daemon) parse in-process.
        self.pool = pool
        self.config = config if config is not None else _DEFAULTS
        self.limits = ParseLimits.from_config(self.config)
        # Trees of the last files parsed here by a small refresh (a save): the next save of one
        # of them re-parses incrementally. Only without a pool: with one, saves go to its save
        # lane, which keeps them (cogd.index.parsepool).
        self.trees = TreeCache()
        # (PRAGMA data_version, {path: language}) of the files table, kept between saves, which
        # never change the file list: reading the whole list cost a save ~4 ms on the standard
        # library. data_version moves only when another connection commits, so a change made
        # by another writer is seen; this writer's own changes of the list clear it (_resolve).
        self._file_list: tuple[int, dict[str, str]] | None = None
        # During a first build (store.begin_bulk): the rows its resolution reads, kept as written.
        self._kept: store.ResolutionTables | None = None

    def close(self) -> None:
        """Checkpoint the WAL and close the writer connection (see :func:`cogd.index.store.close_writer`)."""
        store.close_writer(self.conn)

    def _write_outside(self, path: str, result: RefreshResult) -> None:
        """Record ``path`` by name only with the skip reason ``symlink_outside`` (replacing what was there).

        Size and mtime are 0: nothing of the target, not even its size, is kept.
        """
        store.write_file(self.conn, _file_only(path, language_for_path(path) or "text", b"", 0),
                         size=0, mtime_ns=0, status=SYMLINK_OUTSIDE, now=time.time(), keep=self._kept)
        result.skipped[SYMLINK_OUTSIDE] = result.skipped.get(SYMLINK_OUTSIDE, 0) + 1
        result.parsed += 1

    def _language_changes(self, paths: list[str]) -> tuple[set[str], dict[str, str]]:
        """Check the languages of ``paths`` (once per process, :func:`languages.check`).

        Returns the languages whose state changed since their files were
        parsed (a query now broken or fixed, an override edited, a new grammar
        version), whose files must be parsed again, and the digests to store
        after a whole-tree refresh. An index without stored digests (made
        before they existed) re-parses only the files of disabled languages.
        """
        states = {name: languages.check(name) for name in {language_for_path(p) for p in paths} - {None}}
        try:
            stored = json.loads(store.get_meta(self.conn, "language_digests") or "null")
        except ValueError:
            stored = None
        if not isinstance(stored, dict):
            stored = None
        changed: set[str] = set()
        for name, state in states.items():
            before = (stored or {}).get(name)
            if (before is None and state.problem) or (before is not None and before != state.digest):
                changed.add(name)
        return changed, {**(stored or {}), **{name: state.digest for name, state in states.items()}}

    def _resolve(
        self, known: dict, parsed_paths: list[str], gone: list[str], names_before: set[tuple[str, str, str]],
        everything: bool, beside: Callable[[], contextlib.AbstractContextManager] | None = None,
        tables: store.ResolutionTables | None = None,
    ) -> None:
        """Bring reference edges in step with the files just written.

        When the set of files changed (an import may now find, or lose, its
        target) everything is re-resolved; otherwise every reference of the
        re-parsed files and, elsewhere, only the references to a name whose
        definitions were added, removed, re-identified or changed kind
        (:func:`cogd.index.resolve.resolve_saved`).
        """
        if everything or gone or any(p not in known for p in parsed_paths):
            self._file_list = None
            resolve.resolve(self.conn, str(self.root), None, beside=beside, tables=tables)
        elif parsed_paths:
            names_after = resolve.entity_names(self.conn, parsed_paths)
            affected = {name for name, _id, _kind in names_before ^ names_after}
            resolve.resolve_saved(self.conn, str(self.root), set(parsed_paths), affected, self._files())

    def _files(self) -> dict[str, str]:
        """The index's ``{path: language}``, read again only when another connection has committed
        since it was read (or this writer changed the list: :meth:`_resolve` clears it)."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self._file_list is None or self._file_list[0] != version:
            self._file_list = (version, store.file_languages(self.conn))
        return self._file_list[1]

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
        try:
            return self._refresh(paths, progress, full, started)
        except BaseException:
            self._file_list = None  # a refresh cut short may have changed the list: read it again
            raise

    def _refresh(self, paths: Iterable[str] | None, progress: ProgressFn | None, full: bool,
                 started: float) -> RefreshResult:
        """:meth:`refresh`'s body (``started``: its perf_counter at the call)."""
        known = self._known(paths)
        listing, gone = self._listing(paths, known)
        if paths is not None:  # a link found indexed under its own name joins the rows read
            extra = [p for p in (*listing.files, *listing.outside) if p not in known]
            if extra:
                known.update(store.known_files(self.conn, extra))
        current = list(listing.files)
        relanguaged, digests = self._language_changes(current)
        run = _Run(known, listing, gone, full, relanguaged, progress)
        run.result.scanned = len(current) + len(listing.outside)
        # Links out of the tree newly found (or a file swapped for one), all of them on a full
        # refresh (counted like any re-parsed file): recorded by path only.
        outside_new = [p for p in listing.outside
                       if full or known.get(p) is None or known[p]["status"] != SYMLINK_OUTSIDE]
        run.result.unchanged += len(listing.outside) - len(outside_new)
        to_parse = self._stat_changed(run, current)

        # Batches commit re-parsed files (dropping their reference edges) before
        # references are resolved at the end: if this refresh is cut short, the
        # flag, committed with the first batch, makes the next one resolve all.
        resolve_all = store.get_meta(self.conn, "resolve_pending") == "1"
        if to_parse or outside_new:
            store.set_meta(self.conn, "resolve_pending", "1")
        # The first build of a whole tree: indexes built once at the end (store.begin_bulk).
        bulk = paths is None and not known and len(to_parse) >= BULK_MIN_FILES
        if bulk:
            store.begin_bulk(self.conn)
            self._kept = store.ResolutionTables()  # what the resolution would read back: kept as written
        # Many files: no collector passes over the growing rows while they are parsed and resolved.
        paused = collector_paused() if len(to_parse) >= BULK_MIN_FILES else contextlib.nullcontext()
        try:
            with paused:
                run.now_ns = time.time_ns()
                for path in outside_new:
                    self._record_outside(run, path)
                self._parse_changed(run, to_parse)

                self._forget_trees(gone)  # a deleted file's bytes leave memory with its rows
                for path in gone:
                    store.delete_file(self.conn, path)
                run.result.removed = len(gone)
                if bulk:  # every file written: committed, so the index build beside may write
                    self.conn.commit()
                self._resolve(known, run.parsed_paths, gone, run.names_before,
                              everything=(full and paths is None) or resolve_all,
                              beside=self._indexes_beside if bulk else None,
                              tables=self._kept if bulk and not gone else None)
        finally:
            self._kept = None
            if bulk:
                store.end_bulk(self.conn)
        store.set_meta(self.conn, "resolve_pending", "0")
        self._finish(run.result, paths is None, digests)
        run.result.duration_ms = (time.perf_counter() - started) * 1000
        return run.result

    @contextlib.contextmanager
    def _indexes_beside(self) -> Iterator[None]:
        """Build a bulk load's secondary indexes over the tables the reference resolution only
        reads (:data:`store.RESOLUTION_SAFE_INDEXES`) in a thread while the body runs, and wait
        for it at the end (the rest, over ``edges``, are built after the edges are written:
        :func:`store.end_bulk`).

        Why: resolving the references of a full build is Python on one core while the parse
        pool's cores sit idle; SQLite sorts an index without the GIL, so the two overlap (the
        serial tail of a full index shrinks by the index build). A build that fails is logged
        and left to :func:`store.end_bulk`, which makes every index still missing: the rows
        are the same either way.
        """
        failed: list[BaseException] = []

        def build() -> None:
            try:
                store.build_indexes(self.db_path, store.RESOLUTION_SAFE_INDEXES)
            except Exception as exc:  # noqa: BLE001 - reported below; end_bulk builds them instead
                failed.append(exc)

        thread = threading.Thread(target=build, name="cogd-index-build", daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join()
        if failed:
            log.warning("building the indexes beside the resolution failed (built after it): %s", failed[0])

    def _forget_trees(self, paths: list[str]) -> None:
        """Drop the trees and bytes of ``paths`` here and in the pool's save lane."""
        for path in paths:
            self.trees.forget(path)
        if self.pool is not None and paths:
            self.pool.forget(paths)

    def _known(self, paths: Iterable[str] | None) -> dict:
        """The stored rows a refresh compares against: every file's, or for ``paths`` (a save) only
        theirs, normalised as :meth:`_listing` normalises them."""
        if paths is None:
            return store.known_files(self.conn)
        return store.known_files(self.conn, [posixpath.normpath(p.replace(os.sep, "/")).lstrip("/") for p in paths])

    def _listing(self, paths: Iterable[str] | None, known: dict) -> tuple[SourceListing, list[str]]:
        """The files this refresh looks at, and the indexed ones among ``paths`` that are gone.

        ``paths`` None: the whole tree. Otherwise the given paths (normalised,
        never outside the root): saves of files already indexed need only a
        stat; anything else is checked against a listing of the tree, and a
        saved file that is the target of a link indexed under the link's name
        (``bin/tool.py -> ../scripts/tool``) refreshes that name too.
        """
        if paths is None:
            listing = scan_source_files(self.root)
            return listing, [p for p in known if p not in listing.files and p not in listing.outside]
        wanted = sorted({posixpath.normpath(p.replace(os.sep, "/")).lstrip("/") for p in paths})
        wanted = [p for p in wanted if p != ".." and not p.startswith("../")]  # never outside the root
        listing = None
        if all(p in known for p in wanted):
            # Saves of files already indexed: they passed the ignore rules when
            # listed, so a stat is enough (listing the tree costs ~10 ms per save).
            listing = classify_paths(self.root, wanted)
        if listing is None:
            whole = scan_source_files(self.root) if wanted else SourceListing()
            asked = set(wanted)
            listing = SourceListing({p: real for p, real in whole.files.items() if p in asked or real in asked},
                                    [p for p in wanted if p in whole.outside])
            wanted = sorted(asked | set(listing.files))
        return listing, [p for p in wanted if p not in listing.files and p not in listing.outside and p in known]

    def _stat_changed(self, run: "_Run", current: list[str]) -> list[tuple[str, os.stat_result]]:
        """The files of ``current`` whose stat differs from their row (or that must be parsed again).

        The rest count as unchanged; a file that vanished since the listing is
        added to ``run.gone`` when it was indexed.
        """
        known, files, relanguaged, full = run.known, run.listing.files, run.relanguaged, run.full
        to_parse: list[tuple[str, os.stat_result]] = []
        for path in current:
            try:  # the real path has no symlink in it: do not follow one that appeared since
                st = os.stat(os.path.join(self.root, files[path]), follow_symlinks=False)
            except OSError:  # vanished between listing and stat
                if path in known:
                    run.gone.append(path)
                continue
            row = known.get(path)
            again = full or (relanguaged and language_for_path(path) in relanguaged)
            if (not again and row is not None and row["mtime_ns"] == st.st_mtime_ns and row["size"] == st.st_size
                    and row["status"] != SYMLINK_OUTSIDE):
                run.result.unchanged += 1
                continue
            to_parse.append((path, st))
        return to_parse

    def _parse_changed(self, run: "_Run", to_parse: list[tuple[str, os.stat_result]]) -> None:
        """Read, parse and write ``to_parse`` as one pipeline; reports progress per file.

        Files are read lazily (:meth:`_read_jobs`), parsed in the pool when
        there is one (at most its window of files held at a time: bounded
        memory) or here, and written in batches of ``WRITE_BATCH_FILES``
        while the pool parses the next ones. Results come back in the order of
        ``to_parse`` on both paths, so both write the same rows in the same
        order. A file found unchanged or unreadable counts as done too.
        """
        total, progress = len(to_parse), run.progress
        pending: list[tuple] = []  # (job, outcome) parsed, not yet written
        reading = self._read_jobs(run, to_parse)
        if self.pool is not None:
            jobs: list[tuple] = []  # handed to the pool, in order, until their outcome arrives

            def submitted() -> Iterator[tuple[str, bytes, ParseLimits]]:
                for job in reading:
                    jobs.append(job)
                    yield job[3], job[5], self.limits
            # A save goes to the pool's save lane, which keeps the trees of earlier saves.
            pool = self.pool.saves if self.pool.saves is not None and total <= TREE_CACHE_FILES else self.pool
            outcomes = pool.imap(submitted(), max(self.limits.parse_timeout_ms / 1000, 1.0) * 2)
            pairs = ((jobs.pop(0), outcome) for outcome in outcomes)
        else:
            # A save (a few files) re-parses from the trees of earlier saves; a larger refresh
            # would only churn the cache, so it parses afresh.
            trees = self.trees if total <= TREE_CACHE_FILES else None
            pairs = ((job, parse_file(job[3], job[5], self.limits, trees)) for job in reading)
        for job, outcome in pairs:
            pending.append((job, outcome))
            if len(pending) >= WRITE_BATCH_FILES:
                self._write_parsed(run, pending, total)
                pending = []
        self._write_parsed(run, pending, total)
        if run.reported < total and progress is not None:  # the last files were unchanged or unreadable
            progress(total, total, to_parse[-1][0])

    def _read_jobs(self, run: "_Run", files: list[tuple[str, os.stat_result]]) -> Iterator[tuple]:
        """Read ``files`` one by one; yields ``(position, stat, mtime_ns to store, path, None, bytes)`` to parse.

        ``position``: the file's index in ``files`` (for progress). A file
        whose bytes hash as stored only gets its new stat (unchanged). One
        that cannot be read is recorded by path (``symlink_outside`` when it
        became a link since the listing, else ``unreadable``, tried again next
        refresh); one that vanished joins ``run.gone``.
        """
        known, relanguaged, full, result = run.known, run.relanguaged, run.full, run.result
        now_ns = run.now_ns
        for position, (path, st) in enumerate(files):
            try:
                data = read_source(run.listing.files[path], self.limits.max_file_bytes, root=self.root)
            except FileNotFoundError:  # vanished between stat and read
                if path in known:
                    run.gone.append(path)
                continue
            except OutsideTree:  # it, or a directory on its path, was swapped for a symlink since the listing
                log.warning("not read: %s became a symlink since it was listed (checked again next refresh)", path)
                self._record_outside(run, path)
                continue
            except OSError as exc:
                log.warning("unreadable %s: %s", path, exc)
                self._record_unreadable(run, path, st)
                continue
            mtime_ns = 0 if now_ns - st.st_mtime_ns < RACY_WINDOW_NS else st.st_mtime_ns
            row = known.get(path)
            again = full or (relanguaged and language_for_path(path) in relanguaged)
            if not again and row is not None and row["hash"] == content_hash(data) and row["status"] == "ok":
                store.update_file_stat(self.conn, path, st.st_size, mtime_ns)
                result.unchanged += 1
                continue
            yield (position, st, mtime_ns, path, None, data)

    def _write_parsed(self, run: "_Run", batch: list[tuple], total: int) -> None:
        """Write one batch of parsed files (:func:`store.write_files`), committing every ``BATCH_FILES``.

        The names the files defined before (for the reference resolution) are
        read first, in one query, for the files that were indexed.
        """
        if not batch:
            return
        result, progress = run.result, run.progress
        indexed = [job[3] for job, _outcome in batch if job[3] in run.known]
        if indexed:
            run.names_before |= resolve.entity_names(self.conn, indexed)
        now = time.time()
        store.write_files(self.conn, [(parsed if isinstance(parsed, store.FileRows) else store.file_rows(parsed),
                                       job[1].st_size, job[2], status) for job, (parsed, status) in batch],
                          now=now, replaced=indexed, keep=self._kept)
        for job, (_parsed, status) in batch:
            if status != "ok":
                result.skipped[status] = result.skipped.get(status, 0) + 1
            run.parsed_paths.append(job[3])
            result.parsed += 1
            run.written += 1
            if run.written % BATCH_FILES == 0:
                self.conn.commit()
            run.reported = job[0] + 1
            if progress is not None:
                progress(run.reported, total, job[3])

    def _record_outside(self, run: "_Run", path: str) -> None:
        """Record ``path`` by name only as ``symlink_outside`` (see :meth:`_write_outside`)."""
        self._forget_trees([path])  # now a link out of the tree: its old bytes are not kept
        run.names_before |= resolve.entity_names(self.conn, [path])
        self._write_outside(path, run.result)
        run.parsed_paths.append(path)

    def _record_unreadable(self, run: "_Run", path: str, st: os.stat_result) -> None:
        """Record ``path`` by name only as ``unreadable``; mtime 0, so the next refresh tries again."""
        run.result.skipped["unreadable"] = run.result.skipped.get("unreadable", 0) + 1
        run.names_before |= resolve.entity_names(self.conn, [path])
        store.write_file(self.conn, _file_only(path, language_for_path(path) or "text", b"", 0),
                         size=st.st_size, mtime_ns=0, status="unreadable", now=time.time(), keep=self._kept)
        run.parsed_paths.append(path)
        run.result.parsed += 1

    def _finish(self, result: RefreshResult, whole_tree: bool, digests: dict[str, str]) -> None:
        """Record the commit, the language digests and the time of this refresh, and commit.

        A save does not move HEAD: only whole-tree refreshes (every pack's
        stat scan is one) record the commit, and only they store the language
        digests (a save re-parses only its files: the rest of a changed
        language waits for a full scan).
        """
        if whole_tree or not store.get_meta(self.conn, "commit"):
            result.commit = git_head(self.root)
            store.set_meta(self.conn, "commit", result.commit or "")
        else:
            result.commit = store.get_meta(self.conn, "commit") or None
        if whole_tree:
            store.set_meta(self.conn, "language_digests", json.dumps(digests, sort_keys=True))
        store.set_meta(self.conn, "indexed_at", f"{time.time():.3f}")
        self.conn.commit()


class _Run:
    """The state one :meth:`Indexer.refresh` carries between its steps."""

    __slots__ = ("known", "listing", "gone", "full", "relanguaged", "progress", "result", "parsed_paths",
                 "names_before", "now_ns", "written", "reported")

    def __init__(self, known: dict, listing: SourceListing, gone: list[str], full: bool, relanguaged: set[str],
                 progress: ProgressFn | None):
        self.known, self.listing, self.gone = known, listing, gone  # gone: grows as files vanish mid-refresh
        self.full, self.relanguaged, self.progress = full, relanguaged, progress
        self.result = RefreshResult()
        self.parsed_paths: list[str] = []  # every path written, for the reference resolution
        self.names_before: set[tuple[str, str, str]] = set()  # (name, id, kind) defined in re-written files, before
        self.now_ns = 0  # when reading began, for the racy-clean window (see RACY_WINDOW_NS)
        self.written = 0  # parsed files written so far (a commit every BATCH_FILES)
        self.reported = 0  # files of the refresh done, as last reported to progress
