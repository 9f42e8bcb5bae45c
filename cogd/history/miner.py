"""History mining: the commits reachable from HEAD, each mapped onto the definitions it changed.

What is mined (docs/architecture.md, "History as memory"):

* **Which commits**: the newest ``[history] max_commits`` commits reachable from HEAD
  (``git rev-list HEAD``, so the commits a pull request merged count, not only the
  first-parent line: on a project that merges pull requests most change requests are on
  second parents). Only commits reachable from HEAD are *live*; after a checkout of an older
  commit the ones after it are hidden at once (:meth:`HistoryStore.set_live`) and shown again
  when HEAD comes back, without re-mining. Queries use history only while the HEAD read from
  the tree's ``.git`` files equals the one last synchronised (:meth:`HistoryMiner.usable`).
* **Skip rules** (checked in this order, each counted by reason): ``merge`` (more than one
  parent: its change is the sum of the commits it merges, mined themselves); ``bot`` (author
  name or e-mail of a bot: ``[bot]``, dependabot, renovate, pre-commit-ci, github-actions …);
  ``version`` (the subject is a version bump or a release: "Bump version to 8.1", "Release
  8.1.3", "8.1.3"); ``no_code`` (no file in a language cogd parses changed); ``mass_files``
  (more than ``max_files`` source files) and ``mass_definitions`` (more than
  ``max_definitions`` definitions: reformatting, renames, vendoring); ``empty`` (nothing mapped).
* **Hunks onto definitions**: ``git log -p --unified=0 -M`` gives each changed range of the
  parent's file. The parent's version (``git cat-file --batch``, ``PARENT:OLD_PATH``) is parsed
  with cogd's own extractor (:func:`cogd.index.extract.definitions`; parsed once per blob, an
  LRU cache), so ids are the ones the index gave that code at the parent. Each changed parent
  line counts for the innermost definition spanning it (a method before its class; lines
  outside every definition count for the file entity); an insertion after line ``a`` counts
  for the definition spanning both ``a`` and ``a + 1`` (inside it), else for the file; added
  lines beyond the replaced ones count with the last replaced line. A renamed file is parsed
  under its old path (``-M``), so its ids are the old ones; a deleted file touches all its
  definitions (usually a mass change); an added file touches its new file entity only (it had
  no definitions at the parent). Ids that no longer exist are mapped to the current index at
  query time (:func:`cogd.history.store.current_ids`).
* **Pull requests** (``[history] pull_requests``): a merge's own text (its message without the
  "Merge pull request #N from …" line) is searchable for each commit it merged, and those
  commits are one change request while the merge is live (:meth:`HistoryStore.add_request`).
* **Messages** are stored with secrets masked (:func:`cogd.secrets.mask`).
"""

from __future__ import annotations

import logging
import re
import resource
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from secrets import token_hex

from cogd import secrets
from cogd.config import HistoryConfig
from cogd.history import git
from cogd.history.diff import MAX_MESSAGE_CHARS, Commit, log_format, parse_log
from cogd.history.store import HistoryStore, LiveView, file_changes, live_view
from cogd.index.languages import language_for_path

log = logging.getLogger(__name__)

BATCH = 100  # commits per `git log --no-walk` process
CACHE_BLOBS = 64  # parsed parent files kept (LRU)
MAX_LINES_PER_HUNK = 20_000  # a longer range is counted, not walked line by line
_BOT = re.compile(r"\[bot\]|^(dependabot|renovate|pre-commit-ci|github-actions|greenkeeper|snyk-bot|"
                  r"allcontributors|imgbot|mergify|codecov)\b", re.I)
_VERSION = re.compile(
    r"^\s*(?:(?:bump|release|releasing|prepare|preparing|update|set|start)\b[^\n]{0,40}?\bversion\b"
    r"|(?:bump|release|releasing|version|tag(?:ged)?|v)\s*(?:to\s*)?v?\d+\.\d+(?:\.\d+)*\w*\s*$"
    r"|(?:bump|release|releasing|version)\s+(?:to\s+)?v?\d+\.\d+(?:\.\d+)*\b"
    r"|v?\d+\.\d+(?:\.\d+)*\w*\s*$)", re.I)
_MERGE_LINE = re.compile(r"^Merge (pull request|branch|remote-tracking branch|tag|commit|'|\S+ into)", re.I)
SKIP_REASONS = ("merge", "bot", "version", "no_code", "mass_files", "mass_definitions", "empty")


def version_subject(subject: str) -> bool:
    """True when a commit subject (or a request's first line) is a version bump or a release by
    the ``version`` skip rule: "Bump version to 8.1", "start version 8.0", "Release 8.1.3", "8.1.3"."""
    return bool(_VERSION.match(subject))


def skip_reason_before_diff(commit: Commit) -> str | None:
    """``merge``, ``bot`` or ``version`` when the commit is not a change request by those rules."""
    if len(commit.parents) > 1:
        return "merge"
    if _BOT.search(commit.author) or _BOT.search(commit.email):
        return "bot"
    if version_subject(commit.subject):
        return "version"
    return None


class Spans:
    """Line → innermost definition of one parsed file (``index`` 1-based; 0 = no definition)."""

    def __init__(self, entities: list, lines: int):
        self.ids = [""] + [e.id for e in entities]
        self.owner = [0] * (lines + 2)
        for n, e in enumerate(entities, 1):  # outer first (extract's order): inner ones overwrite
            for line in range(max(e.start_line, 1), min(e.end_line, lines) + 1):
                self.owner[line] = n

    def at(self, line: int) -> int:
        return self.owner[line] if 0 < line < len(self.owner) else 0


class Mapper:
    """Maps a commit's hunks onto the definitions of its parent's files (see the module doc)."""

    def __init__(self, root: Path, config: HistoryConfig):
        self.config = config
        self.blobs = git.BlobReader(root)
        self._cache: OrderedDict[str, Spans | None] = OrderedDict()
        self.parsed = 0

    def close(self) -> None:
        self.blobs.close()

    def _spans(self, parent: str, path: str, language: str) -> Spans | None:
        from cogd.index.extract import definitions

        found = self.blobs.read(f"{parent}:{path}", self.config.max_blob_bytes)
        if found is None:
            return None
        sha, data = found
        if sha in self._cache:
            self._cache.move_to_end(sha)
            return self._cache[sha]
        try:
            spans = Spans(definitions(path, data, language), data.count(b"\n") + 1)
            self.parsed += 1
        except Exception:  # an unknown or broken grammar: the file entity stands for the change
            log.debug("could not parse %s at %s", path, parent, exc_info=True)
            spans = None
        self._cache[sha] = spans
        if len(self._cache) > CACHE_BLOBS:
            self._cache.popitem(last=False)
        return spans

    def touched(self, commit: Commit) -> tuple[dict[str, tuple[str, int]], str | None]:
        """``({entity_id: (path, changed lines)}, skip reason or None)`` for one commit."""
        code = [f for f in commit.files if not f.binary and language_for_path(f.old_path or f.new_path or "")]
        if not code:
            return {}, "no_code"
        if len(code) > self.config.max_files or commit.truncated:
            return {}, "mass_files"
        parent = commit.parents[0] if commit.parents else None
        out: dict[str, tuple[str, int]] = {}

        def add(entity_id: str, path: str, lines: int) -> None:
            known = out.get(entity_id)
            out[entity_id] = (path, (known[1] if known else 0) + max(lines, 1))

        for change in code:
            if change.old_path is None or parent is None:  # added: no definitions at the parent
                add(change.new_path or change.old_path or "", change.new_path or change.old_path or "",
                    sum(h[3] for h in change.hunks))
                continue
            path = change.old_path
            spans = self._spans(parent, path, language_for_path(path) or "")
            for a, b, _c, d in change.hunks:
                self._hunk(spans, path, a, b, d, add)
        definitions = sum(1 for e in out if "::" in e)
        if definitions > self.config.max_definitions:
            return {}, "mass_definitions"
        if not out:
            return {}, "empty"
        return out, None

    @staticmethod
    def _hunk(spans: Spans | None, path: str, a: int, b: int, d: int, add: Callable[[str, str, int], None]) -> None:
        if spans is None:
            add(path, path, max(b, d))
            return
        if b == 0:  # an insertion after line a: inside a definition only when a and a+1 are both in it
            owner, after = spans.at(a), spans.at(a + 1)
            inside = owner and (after == owner or (after and spans.ids[after].startswith(spans.ids[owner] + ".")))
            add(spans.ids[owner] if inside else path, path, d)
            return
        counts: dict[int, int] = {}
        last = 0
        for line in range(a, a + min(b, MAX_LINES_PER_HUNK)):
            last = spans.at(line)
            counts[last] = counts.get(last, 0) + 1
        if d > b:
            counts[last] = counts.get(last, 0) + (d - b)
        for owner, n in counts.items():
            add(spans.ids[owner] if owner else path, path, n)


class HistoryMiner:
    """The daemon's history thread: synchronise with HEAD, mine what is new, rebuild co-change.

    ``ready()``: True once the first index exists (mining waits for it: the index comes
    first for every pack). ``on_start``: run first on the thread (the daemon lowers its
    priority there). ``index_reader()``: the calling thread's read-only connection to the code
    index, or None; with it each pass ends by counting the file prior's changes per current path
    into its :class:`LiveView` (``file_changes``), so no request counts them. :meth:`sync` does
    one pass and may be called directly (tests, the evaluation). Never raises from the thread: a
    failure is logged and kept in ``error``.
    """

    def __init__(self, root: Path, store: HistoryStore, config: HistoryConfig,
                 ready: Callable[[], bool] = lambda: True, on_start: Callable[[], object] | None = None,
                 index_reader: Callable[[], sqlite3.Connection] | None = None):
        self.root = root
        # The calling thread's read-only connection to the code index (the daemon's per-thread
        # readers), so a pass ends with the file prior's counts on current paths in its view.
        self._index_reader = index_reader
        self.store = store
        self.config = config
        self._ready = ready
        self._on_start = on_start
        self._heads = git.HeadCache(root)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one pass at a time
        # A pass writes head = "" before it changes the live flags and the new head after, so a
        # stored head that is the tree's HEAD now says the live flags are right for it (a CLI
        # command without a daemon reads history then; a daemon also re-synchronises at start).
        self.synced_head: str | None = store.meta("head") or None
        self._synced_once = self.synced_head is not None and self.synced_head == git.head_from_files(root)
        self.state = "waiting"
        self.error: str | None = None
        self.last_pass: dict = {}
        self._merges: list[tuple[str, list[str], str]] = []  # merges mined in this pass, for _requests
        # The live set in memory for the readers (cogd.history.store.LiveView), built at the end
        # of each pass; a reader uses it only while state_key() is still the key it was built for.
        self.view: LiveView | None = None

    # ---- reading side ------------------------------------------------------
    def usable(self) -> bool:
        """Whether history may be used now: a pass has synchronised with the HEAD the tree's
        ``.git`` files name (no commit after HEAD can be live). Costs a file read or two."""
        synced = self.synced_head
        if not synced or not self._synced_once:
            return False
        current = self._heads.get()
        if current is not None and current != synced:
            self._wake.set()
            return False
        return True

    def state_key(self) -> tuple:
        """The projection's state as readers see it: (synchronised HEAD, file generation, writer
        commits). Any change of the live set, of what is mined or of the file changes it."""
        return (self.synced_head, self.store.generation, self.store.writes)

    # ---- the thread ----------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cogd-history", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while not self._stop.is_set() and not self._ready():
            self._wake.wait(0.2)
            self._wake.clear()
        while not self._stop.is_set():
            try:
                current = git.head_from_files(self.root)
                if (current is None or current != self.synced_head or not self._synced_once
                        or self.last_pass.get("more") or not self.last_pass or not self.store.path.exists()):
                    self.sync()
                self.error = None
            except Exception as exc:  # the thread must outlive a bad repository
                log.exception("history mining failed")
                self.error = f"{exc.__class__.__name__}: {exc}"
                self.state = "failed"
            self._wake.wait(self.config.poll_s)
            self._wake.clear()

    def sync(self) -> dict:
        """One pass: HEAD, the reachable set (live flags), then mine the new commits newest
        first within ``time_budget_s``, then co-change. Returns the pass's figures."""
        with self._lock:
            return self._sync()

    def _sync(self) -> dict:
        started = time.perf_counter()
        self.state = "syncing"
        if not self.store.path.exists():  # deleted under the daemon: a projection, so start again
            log.warning("history projection %s was deleted: mining again", self.store.path)
            self.synced_head = None
            self.store.reopen()
        head = git.rev_parse_head(self.root)
        if head is None:  # no git, or no commit yet: nothing may be used
            self.store.set_meta(head="")
            self.store.set_live(set())
            self.synced_head, self._synced_once, self.state = None, True, "no_git"
            self.last_pass = {"head": None}
            return self.last_pass
        if git.is_partial_clone(self.root):  # its missing objects would be fetched: refused, so nothing to mine
            self.store.set_meta(head="")
            self.store.set_live(set())
            self.synced_head, self._synced_once, self.state = None, True, "partial_clone"
            self.last_pass = {"head": head, "refused": "a partial clone: its history is not all on this machine"}
            return self.last_pass
        listed = git.run(self.root, "rev-list", f"--max-count={self.config.max_commits}", head, "--",
                         timeout=120).decode("ascii", "replace").split()
        self.synced_head = None  # nothing is usable while the live flags change
        self.store.set_meta(head="")
        changed = self.store.set_live(set(listed))
        self.store.set_meta(head=head)
        self.synced_head, self._synced_once = head, True
        known = self.store.known()
        todo = [h for h in listed if h not in known]
        self.state = "mining" if todo else "idle"
        mined, more = self._mine(todo, started)
        if self.config.pull_requests:
            self._requests()
        if mined:
            self.store.optimize()
        if changed or mined:
            self.store.rebuild_pairs(self.config.co_change_max_definitions, self.config.co_change_min_support)
        spent = time.perf_counter() - started
        total = float(self.store.meta("seconds", "0") or 0) + spent
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.store.set_meta(seconds=round(total, 3), peak_rss_mb=round(peak, 1))
        # read back through this thread's reader: the writer's commits are visible to it
        view = live_view(self.store.reader(), self.state_key(), self.config.co_change_max_definitions)
        # Not while stopping: the daemon closes its index readers once the miner is stopped (or
        # its join timed out), and a reader opened after that would stay open.
        if self._index_reader is not None and not self._stop.is_set():
            try:  # the file prior's counts, here rather than on the first prompt after the pass
                view.file_changes = file_changes(self._index_reader(), view.touched_rows())
            except sqlite3.Error:  # the index is being replaced: a prompt counts them instead
                log.warning("history: file counts not taken at the end of the pass", exc_info=True)
        self.view = view
        self.state = "idle"
        self.last_pass = {"head": head, "listed": len(listed), "mined": mined, "hidden_or_shown": changed,
                          "more": more, "seconds": round(spent, 3)}
        return self.last_pass

    def _mine(self, todo: list[str], started: float) -> tuple[int, bool]:
        """Mine ``todo`` (newest first) in batches; returns (commits stored, budget ran out)."""
        if not todo:
            return 0, False
        mapper = Mapper(self.root, self.config)
        stored = 0
        try:
            for i in range(0, len(todo), BATCH):
                if self._stop.is_set() or time.perf_counter() - started > self.config.time_budget_s:
                    return stored, True
                batch = todo[i:i + BATCH]
                nonce = token_hex(8)  # see cogd.history.diff: a message cannot forge a header
                lines = git.stream(self.root, "log", "--no-walk=unsorted", f"--format={log_format(nonce)}", "-p",
                                   "--unified=0", "-M", *git.DIFF_SAFETY, "--diff-merges=off", *batch, "--",
                                   timeout=max(self.config.time_budget_s, 60))
                for commit in parse_log(lines, nonce, set(batch)):
                    self._store_one(commit, mapper)
                    stored += 1
                self.store.commit()
        finally:
            mapper.close()
            self.store.commit()
        return stored, False

    def _requests(self) -> int:
        """Give the merges mined in this pass their pull requests: each merge's text (its message
        without the "Merge pull request #N from …" line; a merge with nothing more, like "Merge
        branch 'stable'", is no request) joins the commits it merged (``rev-list --no-merges
        SECOND.. ^FIRST``, at most 200). Returns how many requests were stored."""
        stored = 0
        merges, self._merges = self._merges, []
        for hash_, parents, message in merges:
            text = message.strip()
            if _MERGE_LINE.match(text):
                text = text.split("\n", 1)[1].strip() if "\n" in text else ""
            if not text:
                continue
            members = git.run(self.root, "rev-list", "--no-merges", "--max-count=200", *parents[1:],
                              f"^{parents[0]}", "--", timeout=60).decode("ascii", "replace").split()
            if self.store.add_request(hash_, text, members):
                stored += 1
        self.store.commit()
        return stored

    def _store_one(self, commit: Commit, mapper: Mapper) -> None:
        reason = skip_reason_before_diff(commit)
        touched: dict[str, tuple[str, int]] = {}
        if reason is None:
            touched, reason = mapper.touched(commit)
        message = secrets.mask(commit.message.strip())[:MAX_MESSAGE_CHARS]  # masked, then cut
        subject = message.split("\n", 1)[0][:200]
        self.store.add_commit(commit.hash, commit.time, subject, message, reason, touched, time.time())
        if reason == "merge" and self.config.pull_requests:
            self._merges.append((commit.hash, commit.parents, message))

    def status(self) -> dict:
        """The store's figures (:func:`cogd.history.store.status`) with the thread's state."""
        from cogd.history.store import status

        return {**status(self.store.reader()), "state": self.state, "error": self.error,
                "synced_head": self.synced_head, "usable": self.usable(), "last_pass": self.last_pass,
                "max_commits": self.config.max_commits,
                # files with a count of changes in the pass's view (the file prior, read by no
                # request); None when the view holds none (no index to read at the pass's end)
                "file_prior_files": (len(self.view.file_changes) if self.view is not None
                                     and self.view.file_changes is not None else None),
                # whether this process mines at all: a CLI command run without a daemon does not
                "running": self._thread is not None and self._thread.is_alive()}
