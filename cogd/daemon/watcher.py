"""The file watcher: edits reach the index without any hook.

One inotify instance (watchdog's :class:`~watchdog.observers.inotify_c.InotifyFD`:
one file descriptor, one reader thread) holds one non-recursive watch per
directory that can hold indexed files. Which directories those are follows
:mod:`cogd.index.sources`: in a git work tree, whatever ``git check-ignore``
does not exclude (asked once per directory level, so an ignored directory is
never entered) less what a ``.cogdignore`` excludes and nested repositories;
outside git, the same pruned walk as the non-git file listing (nested
``.gitignore`` and ``.cogdignore`` files, the built-in defaults). ``.git/``,
``.cogd/`` and symbolic links are never entered, so a symlink cycle cannot
recurse, and a directory reachable twice (a bind mount) is watched once.

Why not ``Observer.schedule`` once per directory: every schedule starts an
emitter thread of its own (2,000 directories made 2,003 threads and 61 MB), and
a non-recursive watch group drops a kernel queue overflow with only a log line.
``InotifyFD`` is the reader those emitters share; fed directly, it costs one
thread and reports overflows to :meth:`Watcher.on_queue_overflow`. The watch
mask is the kernel-side equivalent of watchdog's ``event_filter``: creates,
deletes, moves, writes and closes-after-write, never opens or reads (a walk of
the tree would otherwise flood the queue with its own events).

Events become batches: a batch is flushed ``debounce_ms`` after its last event
or ``max_delay_ms`` after its first, whichever comes first, as one
``IndexWorker.request``: the changed paths, or the whole tree when the batch
holds more than :data:`WHOLE_TREE_PATHS` paths (a ``git checkout``), when
directories came or went, when an ignore file changed, after a kernel queue
overflow and after any error. Only names in a language cogd indexes count, so
an editor's atomic save (write ``x.py.tmp``, ``.x.py.swp`` or ``x.py~``, then
rename it over ``x.py``) is seen as a change of ``x.py``, the temporary names
being ignored. New directories get watches as they appear (then the whole tree
is refreshed, so files written before the watch existed are not missed);
directories moved out or deleted lose theirs.

When inotify cannot cover the tree — more directories than
``fs.inotify.max_user_watches`` minus a margin for other programs, the kernel
refusing a watch or an inotify instance, no inotify at all, or
``[watch] force_polling`` — the watcher says why (log and ``status``) and polls
instead: a whole-tree stat refresh every ``poll_interval_s`` seconds, cheap
because :meth:`cogd.index.indexer.Indexer.refresh` parses only files whose size
or mtime changed. It never stops the daemon from starting.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

from cogd import gitsafe
from cogd.config import WatchConfig
from cogd.index.languages import language_for_path
from cogd.index.sources import COGD_IGNORE, DEFAULT_WALK_IGNORES, GUESSED_WALK_IGNORES, IgnoreRules, compile_ignores
from cogd.paths import COGD_DIR

log = logging.getLogger(__name__)

WHOLE_TREE_PATHS = 200  # a batch naming more paths than this refreshes the whole tree instead
MAX_WATCHES_FILE = "/proc/sys/fs/inotify/max_user_watches"
MAX_WATCHES_ENV = "COGD_WATCH_MAX_WATCHES"  # overrides the kernel's limit (tests use a tiny one to force polling)
WATCH_MARGIN_SHARE = 10  # leave 1/10 of the user's watch limit to other programs ...
WATCH_MARGIN_MIN = 1024  # ... and at least this many watches
SYSCTL_FIX = "sudo sysctl fs.inotify.max_user_watches=524288"
HEALTH_CHECK_S = 1.0  # how often an idle watcher checks its reader thread and retries a failed scan
MIN_POLL_INTERVAL_S = 0.1
RULE_FILES = (".gitignore", COGD_IGNORE)
NEVER_DIRS = frozenset({".git", COGD_DIR})
GIT_TIMEOUT_S = 60.0

Ident = tuple[int, int]  # (st_dev, st_ino) of a directory


class WatchLimitError(Exception):
    """Inotify cannot (or is not to) cover the tree; the message says why and how to fix it."""

    def __init__(self, message: str, *, chosen: bool = False):
        super().__init__(message)
        self.chosen = chosen  # the configuration asked for polling: nothing to warn about


@functools.lru_cache(maxsize=1 << 14)
def _indexed_name(name: str) -> bool:
    """Whether a file called ``name`` is in a language cogd indexes (suffix only)."""
    return language_for_path(name) is not None


def max_user_watches() -> int | None:
    """The per-user inotify watch limit (``COGD_WATCH_MAX_WATCHES`` first), or None when unknown."""
    value = os.environ.get(MAX_WATCHES_ENV)
    if value is None:
        try:
            with open(MAX_WATCHES_FILE, encoding="ascii") as f:
                value = f.read()
        except OSError:
            return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def watch_budget(limit: int) -> int:
    """How many watches this daemon may use under a per-user ``limit``."""
    return limit - max(WATCH_MARGIN_MIN, limit // WATCH_MARGIN_SHARE)


def _in_git_work_tree(root: str) -> bool:
    try:
        out = subprocess.run(gitsafe.argv(root, "rev-parse", "--is-inside-work-tree"), env=gitsafe.safe_env(),
                             capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "true"


class DirectoryScanner:
    """Finds the directories worth watching, with the ignore rules of :mod:`cogd.index.sources`.

    Keeps the ``.cogdignore`` (and, outside git, ``.gitignore``) rules it has
    read, so directories that appear later are judged without a new walk of
    the whole tree. Paths are root-relative POSIX strings, ``""`` the root.
    """

    def __init__(self, root: Path):
        self.root = str(root)
        self.git = _in_git_work_tree(self.root)
        if self.git:  # git answers for .gitignore (nested, info/exclude, global) itself
            self.rule_names: tuple[str, ...] = (COGD_IGNORE,)
            self.rules = IgnoreRules()
        else:
            guessed = () if os.path.isfile(os.path.join(self.root, ".gitignore")) else GUESSED_WALK_IGNORES
            self.rule_names = RULE_FILES
            self.rules = IgnoreRules(compile_ignores([*DEFAULT_WALK_IGNORES, *guessed]))

    def scan_all(self) -> dict[str, Ident]:
        """Every directory to watch, the root included."""
        st = os.stat(self.root)
        return {"": (st.st_dev, st.st_ino), **self.expand(self._children(""), {(st.st_dev, st.st_ino)})}

    def expand(self, level: list[str], seen: set[Ident] | None = None) -> dict[str, Ident]:
        """The directories in ``level`` (whose parents are watched) and below that are to be watched."""
        seen = set() if seen is None else seen
        found: dict[str, Ident] = {}
        while level:
            kept = self._judge(level, seen)
            found.update(kept)
            level = [child for rel in kept for child in self._children(rel)]
        return found

    def forget(self, rel_dir: str) -> None:
        """Drop the rules read in ``rel_dir`` and below (the directory went away)."""
        prefix = rel_dir + "/"
        for key in [k for k in self.rules.specs if k == rel_dir or k.startswith(prefix)]:
            del self.rules.specs[key]

    def _children(self, rel_dir: str) -> list[str]:
        """Subdirectories of ``rel_dir`` (not symlinks, not .git/.cogd); reads its rule files first."""
        full = os.path.join(self.root, rel_dir) if rel_dir else self.root
        try:
            with os.scandir(full) as it:
                entries = list(it)
        except OSError:  # vanished or unreadable: nothing to watch below it
            return []
        if any(e.name in self.rule_names for e in entries):
            self.rules.add_dir(Path(self.root), rel_dir, self.rule_names)
        children = []
        for entry in entries:
            try:
                if entry.name not in NEVER_DIRS and entry.is_dir(follow_symlinks=False):
                    children.append(f"{rel_dir}/{entry.name}" if rel_dir else entry.name)
            except OSError:
                continue
        return children

    def _judge(self, level: list[str], seen: set[Ident]) -> dict[str, Ident]:
        """Those of ``level`` that are real directories no rule ignores, with their identities.

        Never ``.git``/``.cogd``, a symlink (so a symlink cycle cannot recurse),
        or a name that is not UTF-8 (files below it are not indexed either).
        """
        kept: dict[str, Ident] = {}
        for rel in level:
            if rel.rpartition("/")[2] in NEVER_DIRS or self.rules.matches(rel, True):
                continue
            full = os.path.join(self.root, rel)
            try:
                rel.encode("utf-8")
                st = os.lstat(full)
            except (OSError, UnicodeEncodeError):  # gone, or a name no indexed path can have
                continue
            if not stat.S_ISDIR(st.st_mode):  # a symlink (never followed) or no longer a directory
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in seen:  # the same directory reached twice (a bind mount): one watch
                continue
            if self.git and os.path.lexists(os.path.join(full, ".git")):
                continue  # a nested repository or submodule: git lists none of its files
            seen.add(ident)
            kept[rel] = ident
        if self.git and kept:
            for rel in self._git_ignored(list(kept)):
                kept.pop(rel, None)
        return kept

    def _git_ignored(self, rels: list[str]) -> set[str]:
        """Which of ``rels`` git ignores (a directory holding tracked files is not ignored)."""
        proc = subprocess.run(
            gitsafe.argv(self.root, "check-ignore", "--stdin", "-z"), env=gitsafe.safe_env(),
            input=b"".join(os.fsencode(r) + b"\0" for r in rels),
            capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
        )
        if proc.returncode not in (0, 1):  # 1: none ignored
            raise OSError(f"git check-ignore failed ({proc.returncode}): "
                          f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
        return {os.fsdecode(name) for name in proc.stdout.split(b"\0") if name}


class Watcher:
    """Watches a work tree and feeds the index worker; see the module docstring.

    ``worker`` needs ``request(paths | None) -> ticket`` and ``queue_depth``
    (an :class:`cogd.daemon.worker.IndexWorker`). Call :meth:`start` once and
    :meth:`stop` at shutdown; :meth:`status` is safe from any thread.
    """

    def __init__(self, root: Path, worker, config: WatchConfig):
        self.root = Path(root)
        self.worker = worker
        self.config = config
        self._debounce_s = max(config.debounce_ms, 0) / 1000
        self._max_delay_s = max(config.max_delay_ms, config.debounce_ms, 0) / 1000
        self._poll_s = max(config.poll_interval_s, MIN_POLL_INTERVAL_S)
        self._cond = threading.Condition()  # the pending batch, the mode and stopping
        self._lock = threading.Lock()  # the watch maps (held across each add, so no event finds its wd unknown)
        self._stopping = False
        self._fd = None  # watchdog InotifyFD while in inotify mode
        self._scanner: DirectoryScanner | None = None
        self._by_wd: dict[int, str] = {}
        self._by_path: dict[str, tuple[int, Ident]] = {}
        self._limit: int | None = None
        self._retry_scan = False  # a rescan failed: try again at the next health check
        self._reset_batch()
        # status (seconds are monotonic unless named *_at, which are Unix times)
        self.mode = "starting"  # starting | inotify | polling | off
        self.reason: str | None = None  # why polling (or off)
        self.events = 0  # inotify events received
        self.batches = 0
        self.rescans = 0  # whole-tree refreshes this watcher requested
        self.overflows = 0
        self.polls = 0
        self.last_batch: dict | None = None
        self.last_error: str | None = None
        self.started_ms: float | None = None  # time to walk the tree and place the watches
        self._thread = threading.Thread(target=self._run, name="cogd-watch", daemon=True)

    # ---- public ---------------------------------------------------------------
    def start(self) -> "Watcher":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching (removes every watch); waits up to ``timeout`` seconds."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._close_fd()
        self.mode = "off"
        self.reason = "stopped"

    @property
    def watched_dirs(self) -> int:
        with self._lock:
            return len(self._by_path)

    def status(self) -> dict:
        """The watcher's state for ``cogd status`` (times in ms, ``at`` in Unix seconds)."""
        return {
            "mode": self.mode, "reason": self.reason, "watched_dirs": self.watched_dirs,
            "max_user_watches": self._limit, "events": self.events, "batches": self.batches,
            "last_batch": self.last_batch, "rescans": self.rescans, "overflows": self.overflows,
            "polls": self.polls, "poll_interval_s": self._poll_s if self.mode == "polling" else None,
            "debounce_ms": self.config.debounce_ms, "max_delay_ms": self.config.max_delay_ms,
            "started_ms": self.started_ms, "last_error": self.last_error,
        }

    # ---- InotifyFD callbacks (its reader thread; must never raise) -------------
    def on_event(self, event) -> None:
        """One inotify event on a watched directory."""
        self.events += 1
        try:
            self._on_event(event)
        except Exception as exc:  # a lost event must cost a rescan, never the reader thread
            log.exception("watcher event handling failed")
            self._note(full_scan=True, reason=f"error: {exc.__class__.__name__}: {exc}", error=True)

    def on_watch_deleted(self, wd: int) -> None:
        """The kernel dropped a watch (its directory was deleted or unmounted)."""
        with self._lock:
            rel = self._by_wd.pop(wd, None)
            if rel is not None and self._by_path.get(rel, (None,))[0] == wd:
                del self._by_path[rel]
            else:
                rel = None
        if rel is not None:
            self._note(removed=rel, reason="directory removed")

    def on_queue_overflow(self) -> None:
        """The kernel queue overflowed: events were lost, so rescan everything."""
        self.overflows += 1
        log.warning("inotify queue overflowed: rescanning the whole tree")
        self._note(full_scan=True, reason="inotify queue overflow")

    def _on_event(self, event) -> None:
        with self._lock:
            rel_dir = self._by_wd.get(event.wd)
            if rel_dir is None or not event.name:
                return
            name = os.fsdecode(event.name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            watched = rel in self._by_path
        if event.is_directory:
            if rel == ".git":  # `git init` or a removed repository: the ignore rules change wholesale
                self._note(full_scan=True, reason=".git added or removed")
            elif event.is_create or event.is_moved_to:
                self._note(added=rel, reason="directory added")
            elif watched:  # deleted or moved away; an unwatched (ignored) one changes nothing
                self._note(removed=rel, reason="directory removed")
        elif name in RULE_FILES:
            self._note(full_scan=True, reason=f"{rel} changed")
        elif _indexed_name(name):
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                return
            self._note(path=rel)

    # ---- the batch ------------------------------------------------------------
    def _reset_batch(self) -> None:
        self._paths: set[str] = set()
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._full_scan = False
        self._reasons: list[str] = []
        self._first = 0.0
        self._last = 0.0

    def _pending(self) -> bool:
        return bool(self._paths or self._added or self._removed or self._full_scan)

    def _note(self, *, path: str | None = None, added: str | None = None, removed: str | None = None,
              full_scan: bool = False, reason: str | None = None, error: bool = False) -> None:
        now = time.monotonic()
        with self._cond:
            opens = not self._pending()
            if opens:
                self._first = now
            self._last = now
            if path is not None:
                self._paths.add(path)
            if added is not None:
                self._added.add(added)
            if removed is not None:
                self._removed.add(removed)
            if full_scan:
                self._full_scan = True
            if reason and reason not in self._reasons and len(self._reasons) < 5:
                self._reasons.append(reason)
            if error:
                self.last_error = reason
            if opens:  # later events only move the quiet window, which the flusher re-reads when it wakes
                self._cond.notify_all()

    def _take_batch(self) -> dict:
        batch = {"paths": self._paths, "added": self._added, "removed": self._removed,
                 "full_scan": self._full_scan, "reasons": self._reasons, "first": self._first}
        self._reset_batch()
        return batch

    # ---- the thread -----------------------------------------------------------
    def _run(self) -> None:
        started = time.monotonic()
        try:
            self._start_inotify()
            self.started_ms = round((time.monotonic() - started) * 1000, 1)
            log.info("watching %d directories with inotify (set up in %.0f ms)", self.watched_dirs, self.started_ms)
            # Catch-up: edits between the daemon's first listing and the watches are not lost.
            self.worker.request(None)
        except WatchLimitError as exc:
            self._to_polling(str(exc), warn=not exc.chosen)
        except Exception as exc:
            log.exception("file watcher could not start")
            self._to_polling(f"inotify could not start: {exc.__class__.__name__}: {exc}", warn=True, error=True)
        try:
            while not self._stopping:
                if self.mode == "inotify":
                    self._serve_inotify()
                else:
                    self._serve_polling()
        except Exception as exc:  # the last line of defence: keep the index fresh by polling
            log.exception("file watcher failed")
            self.last_error = f"{exc.__class__.__name__}: {exc}"
            self._close_fd()
            self.mode, self.reason = "polling", f"watcher failed: {self.last_error}"
            self._serve_polling()

    def _start_inotify(self) -> None:
        """Walk the tree and watch it, or raise WatchLimitError (or anything else) to poll."""
        if self.config.force_polling:
            raise WatchLimitError("polling because [watch] force_polling = true", chosen=True)
        try:
            from watchdog.observers.inotify_c import InotifyFD  # Linux only; raises elsewhere
        except Exception as exc:
            raise WatchLimitError(f"polling: inotify is not available here ({exc.__class__.__name__}: {exc})") from exc
        self._scanner = DirectoryScanner(self.root)
        wanted = self._scanner.scan_all()
        self._limit = max_user_watches()
        self._check_budget(len(wanted))
        try:
            fd = InotifyFD()
        except OSError as exc:
            if exc.errno == errno.EMFILE:
                raise WatchLimitError(
                    "polling: no inotify instance left (fs.inotify.max_user_instances reached; raise it with "
                    "`sudo sysctl fs.inotify.max_user_instances=1024`, then restart the daemon)") from exc
            raise
        fd.start()
        self._fd = fd
        self._apply({}, wanted)
        self.mode, self.reason = "inotify", None

    def _check_budget(self, needed: int) -> None:
        if self._limit is None:
            return
        budget = watch_budget(self._limit)
        if needed > budget:
            raise WatchLimitError(self._limit_message(needed))

    def _limit_message(self, needed: int) -> str:
        limit = self._limit
        if limit is None:
            head = f"inotify refused a watch (ENOSPC) with {needed} directories to watch"
        else:
            head = (f"this tree needs {needed} directory watches but fs.inotify.max_user_watches is {limit} "
                    f"(cogd leaves {limit - watch_budget(limit)} of them to other programs)")
        return (f"{head}; polling every {self._poll_s:g} s instead. To watch, raise the limit: "
                f"`{SYSCTL_FIX}` (and add it to /etc/sysctl.d/ to keep it), then restart the daemon "
                f"(cogd stop; cogd start).")

    def _apply(self, remove_under: dict[str, None], add: dict[str, Ident]) -> bool:
        """Unwatch ``remove_under`` (and below), then watch ``add``; whether anything changed.

        Removal comes first: a directory moved within the tree keeps its
        inode, and inotify would otherwise hand its new path the old watch.
        """
        from watchdog.observers.inotify_c import InotifyConstants as C

        mask = (C.IN_CREATE | C.IN_DELETE | C.IN_MODIFY | C.IN_CLOSE_WRITE | C.IN_MOVED_FROM | C.IN_MOVED_TO
                | C.IN_ONLYDIR | C.IN_DONT_FOLLOW | C.IN_EXCL_UNLINK)
        fd = self._fd
        changed = False
        if remove_under:
            with self._lock:
                gone = [(rel, wd) for rel, (wd, _i) in self._by_path.items() if self._covered(rel, remove_under, True)]
                for rel, wd in gone:
                    del self._by_path[rel]
                    self._by_wd.pop(wd, None)
            if gone:
                changed = True
                fd.remove_callbacks([(wd, self._callback_id) for _rel, wd in gone])
        if add:
            self._check_budget(self.watched_dirs + len(add))
        for rel in sorted(add):  # parents before children
            if self._stopping:
                break
            full = os.path.join(str(self.root), rel) if rel else str(self.root)
            with self._lock:
                try:
                    wd = fd.add_callback(os.fsencode(full), mask, self, self._callback_id)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        raise WatchLimitError(self._limit_message(len(self._by_path) + 1)) from exc
                    if rel == "":
                        raise
                    continue  # vanished or unreadable since the scan: its parent's events cover it
                old = self._by_wd.get(wd)
                if old is not None and old != rel:
                    self._by_path.pop(old, None)
                self._by_wd[wd] = rel
                self._by_path[rel] = (wd, add[rel])
                changed = True
        return changed

    @property
    def _callback_id(self) -> int:
        return id(self)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        with self._lock:
            self._by_wd.clear()
            self._by_path.clear()
        if fd is not None:
            try:
                fd.stop()
                fd.join(5.0)
            except Exception:
                log.exception("closing inotify failed")

    def _to_polling(self, reason: str, *, warn: bool = False, error: bool = False) -> None:
        self._close_fd()
        with self._cond:
            self.mode, self.reason = "polling", reason
            self._reset_batch()
        if error:
            self.last_error = reason
        (log.warning if warn else log.info)("file watcher: %s", reason)
        self.worker.request(None)
        self.rescans += 1

    def _serve_polling(self) -> None:
        """A whole-tree stat refresh every poll interval while the worker is idle."""
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, timeout=self._poll_s):
                    return
            if self.worker.queue_depth == 0:
                self.worker.request(None)
                self.polls += 1

    def _serve_inotify(self) -> None:
        """Collect events into batches and flush them, until stopping or falling back to polling."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._pending(), timeout=HEALTH_CHECK_S)
                if self._stopping:
                    return
                if not self._pending():
                    batch = None
                else:
                    while not self._stopping:  # quiet window, bounded from the batch's first event
                        due = min(self._last + self._debounce_s, self._first + self._max_delay_s)
                        left = due - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    if self._stopping:
                        return
                    batch = self._take_batch()
            if batch is None:
                fd = self._fd
                if fd is None or not fd.is_alive():
                    self._to_polling("polling: the inotify reader thread stopped", warn=True, error=True)
                    return
                if self._retry_scan:
                    self._note(full_scan=True, reason="retrying a failed rescan")
                continue
            try:
                self._flush(batch)
            except WatchLimitError as exc:
                self._to_polling(str(exc), warn=True)
                return

    def _flush(self, batch: dict) -> None:
        reasons = list(batch["reasons"])
        whole = False
        try:
            if batch["full_scan"]:
                self._retry_scan = False
                self._scanner = DirectoryScanner(self.root)  # git or not, and the walk's defaults, afresh
                wanted = self._scanner.scan_all()
                with self._lock:
                    stale = {rel: None for rel, (_wd, ident) in self._by_path.items() if wanted.get(rel) != ident}
                self._apply(stale, {})  # (also unwatches what lies below a stale directory)
                with self._lock:
                    current = {rel: ident for rel, (_wd, ident) in self._by_path.items()}
                self._apply({}, {rel: i for rel, i in wanted.items() if current.get(rel) != i})
                whole = True
            elif batch["added"] or batch["removed"]:
                whole = self._update_dirs(batch["added"], batch["removed"])
        except WatchLimitError:
            raise
        except Exception as exc:
            log.exception("watcher rescan failed")
            self.last_error = f"rescan: {exc.__class__.__name__}: {exc}"
            reasons.append("error")
            self._retry_scan = True
            whole = True
        paths = batch["paths"]
        if len(paths) > WHOLE_TREE_PATHS:
            whole = True
            reasons.append(f"{len(paths)} paths")
        if whole:
            ticket = self.worker.request(None)
            self.rescans += 1
        elif paths:
            ticket = self.worker.request(sorted(paths))
        else:
            ticket = None
        self.batches += 1
        self.last_batch = {
            "at": round(time.time(), 3), "paths": len(paths), "whole_tree": whole,
            "reason": ", ".join(reasons) or "files changed", "ticket": ticket,
            "waited_ms": round((time.monotonic() - batch["first"]) * 1000, 1),
        }
        if whole:
            log.info("watcher batch: %s", self.last_batch)

    def _update_dirs(self, added: set[str], removed: set[str]) -> bool:
        """Unwatch directories that went away, watch those that came (and below); whether any did."""
        removed = set(removed)
        candidates = []
        for rel in sorted(added):
            with self._lock:
                entry = self._by_path.get(rel)
            # A directory moved away and back within the batch is unwatched below, so scanned afresh.
            if entry is not None and not self._covered(rel, removed, True):
                try:
                    st = os.lstat(os.path.join(str(self.root), rel))
                    if (st.st_dev, st.st_ino) == entry[1]:
                        continue  # already watched (found when its parent was scanned)
                except OSError:
                    pass
                removed.add(rel)  # replaced by another directory of the same name
            candidates.append(rel)
        chosen = set(candidates)
        fresh_level = [rel for rel in candidates if not self._covered(rel, chosen)]  # an ancestor's scan covers it
        for rel in removed:
            self._scanner.forget(rel)
        self._apply(dict.fromkeys(removed), {})
        with self._lock:
            known = {ident for _wd, ident in self._by_path.values()}
        fresh = self._scanner.expand(fresh_level, known)
        self._apply({}, fresh)
        return bool(removed or fresh)

    @staticmethod
    def _covered(rel: str, others, itself: bool = False) -> bool:
        """Whether an ancestor of ``rel`` (or, with ``itself``, ``rel``) is in ``others``."""
        if itself and rel in others:
            return True
        parent = rel.rpartition("/")[0]
        while parent:
            if parent in others:
                return True
            parent = parent.rpartition("/")[0]
        return False


def off_status(reason: str) -> dict:
    """The ``watch`` status of a daemon without a watcher."""
    return {"mode": "off", "reason": reason, "watched_dirs": 0, "max_user_watches": None, "events": 0,
            "batches": 0, "last_batch": None, "rescans": 0, "overflows": 0, "polls": 0, "poll_interval_s": None,
            "last_error": None}
