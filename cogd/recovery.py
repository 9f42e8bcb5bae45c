"""Damaged stores: a broken projection is moved aside and rebuilt; a lost ledger is reported.

Two kinds of store live under ``.cogd/`` (docs/architecture.md, "When a store breaks"):

* **Projections** — ``index/index.db``, ``index/memory.db``, ``index/vectors/``
  (LanceDB) and ``index/embed_cache.db``. They can be rebuilt from the work
  tree and the memory files, so one that fails to open or fails
  ``PRAGMA quick_check`` is renamed ``<name>.corrupt-<UTC time>`` (with its
  ``-wal``/``-shm`` files), only the newest such copy is kept, and a fresh
  store is opened in its place; the daemon's workers fill it in the background.
  Each move is logged once and kept in ``.cogd/recovery.json`` for
  ``cogd status`` and ``cogd doctor``.
* **The ledger** — ``state.db`` (deliveries, outcomes, memory events and
  tombstones) cannot be rebuilt. It is never replaced silently:
  :func:`check_ledger` compares it with ``.cogd/ledger.json``, a marker
  of what it last held (row counts and size, written at daemon start, stop
  and once a minute), and classifies it as ``ok``, ``new`` (nothing was ever
  here), ``fresh`` (memory files came from git but no ledger ever existed on
  this machine: not a loss) or ``lost`` (missing or empty while the marker
  says it had rows, or unreadable). A lost ledger
  that is still a file is moved aside, never deleted; a ledger that cannot
  be opened for another reason (permissions, a directory, I/O errors) is
  refused with :class:`StoreRefused` — moving it would not fix it. The loss
  is written to ``.cogd/ledger-loss.json``; ``cogd doctor`` fails until
  someone restores a backup or deletes that file to accept the loss.

Tombstones survive a lost ledger: rejected and pruned records keep their
normalised-content hash in their file's ``tombstone`` key, and
:func:`cogd.memory.sync.restore_tombstones` puts them back.

This module sits below every store it guards (the index, the embedding cache,
memory): it imports none of them. What it needs to know of memory (how many
record files exist) its callers pass in.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from cogd import safepath
from cogd.errors import CogdError

log = logging.getLogger("cogd.recovery")

RECOVERY_FILE = "recovery.json"  # projection moves, newest last (in .cogd/)
LEDGER_MARK_FILE = "ledger.json"  # what state.db last held (in .cogd/)
LEDGER_LOSS_FILE = "ledger-loss.json"  # an unacknowledged ledger loss (in .cogd/)
KEEP_EVENTS = 20
SIDECARS = ("-wal", "-shm", "-journal")  # SQLite's companions of a database file
MARK_INTERVAL_S = 60.0  # how often a running daemon refreshes the ledger marker

T = TypeVar("T")


class StoreRefused(CogdError, RuntimeError):
    """A store that cannot be opened and must not be moved aside (it is not damaged data);
    kind ``store_refused``.

    ``store``: file name (``state.db``); ``reason``: what went wrong; ``fix``: what to do.
    """

    def __init__(self, store: str, reason: str, fix: str):
        super().__init__("store_refused", f"{store}: {reason}", fix, store=store)
        self.args = (f"{store}: {reason}; fix: {fix}",)
        self.summary = self.message  # without the fix (shown on its own)
        self.store = store
        self.reason = reason

    def line(self) -> str:
        """For a terminal: the store and the reason, then the fix on a line of its own."""
        return f"{self.message}\n  fix: {self.fix}"


# ---- SQLite health ---------------------------------------------------------------------

def is_corruption(exc: BaseException) -> bool:
    """True when ``exc`` says the file is damaged or not a database (SQLITE_CORRUPT*, SQLITE_NOTADB).

    Other errors (cannot open, permission, I/O, busy) are not corruption: a
    rename would not cure them and could hide a live file.
    """
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def readonly_uri(path: "Path | str") -> str:
    """The SQLite URI that reads ``path`` without changing anything on disk.

    ``mode=ro`` alone still creates ``-wal`` and ``-shm`` files next to a WAL
    database (and keeps them). When neither ``-wal`` nor ``-journal`` exists,
    no write is in progress and nothing is waiting to be checkpointed, so the
    file is opened ``immutable=1`` (no locks, no side files). A writer that
    starts while it is open could make that reader see torn pages: a doctor
    run then reports damage that the next run does not (never a change).
    """
    quiet = not any(os.path.lexists(f"{path}{suffix}") for suffix in ("-wal", "-journal"))
    return f"file:{path}?mode=ro" + ("&immutable=1" if quiet else "")


def sqlite_problem(path: Path) -> str | None:
    """Why the SQLite file ``path`` is damaged (``PRAGMA quick_check`` or the open error), or None.

    Opens read-only; raises the sqlite3.Error itself when the failure is not
    corruption (see :func:`is_corruption`), and :class:`cogd.safepath.UnsafePath`
    for a link or another user's file. A missing file is not damaged (None).
    ``quick_check`` reads every page but skips the index cross-checks of
    ``integrity_check``: 0.13–0.23 s for a 20 MB index (6,464 entities) on two
    busy cores (load 38), so a daemon start pays it once per store.
    """
    if not safepath.prepare_db(path, create=False):  # SQLite follows links: lstat its files first
        return None
    if os.lstat(path).st_size == 0:  # an empty database, not a damaged one (and SQLite would delete its -wal)
        return None
    try:
        conn = sqlite3.connect(readonly_uri(path), uri=True, timeout=10.0)
        try:
            conn.execute("PRAGMA busy_timeout=10000")
            rows = [r[0] for r in conn.execute("PRAGMA quick_check")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            return str(exc)
        raise
    if rows == ["ok"]:
        return None
    return "quick_check: " + summarise_check(rows)


def summarise_check(rows: list) -> str:
    """One line from the rows of ``PRAGMA quick_check`` / ``integrity_check``: the first problem and
    "(and N more problems)". A truncated file yields one line per damaged page (hundreds), and
    SQLite packs several into one row, so rows are split into lines first."""
    lines = [line.strip() for row in rows for line in str(row).splitlines()
             if line.strip() and not line.startswith("*** in database")]
    if not lines:
        return "unknown problem"
    more = len(lines) - 1
    return lines[0] + (f" (and {more} more problem{'s' * (more != 1)})" if more else "")


# ---- moving aside ------------------------------------------------------------------------

def _stamp(now: float) -> str:
    """``20261201T112233.123Z``: UTC, sortable, unique enough for two moves in one second."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def move_aside(path: Path, now: float | None = None) -> Path | None:
    """Rename ``path`` (a file or a directory) to ``<name>.corrupt-<time>``, SQLite companions with it.

    Companions become ``<name>.corrupt-<time>-wal`` etc., so the copy still
    opens with its journal. Earlier ``<name>.corrupt-*`` copies are removed:
    only the newest is kept (evidence for a bug report, not an archive).
    Returns the new path, or None when ``path`` did not exist. Raises OSError
    when the rename fails.
    """
    now = time.time() if now is None else now
    if not os.path.lexists(path):
        return None
    base = f"{path.name}.corrupt-{_stamp(now)}"
    target = path.with_name(base)
    os.replace(path, target)
    for suffix in SIDECARS:
        side = path.with_name(path.name + suffix)
        if os.path.lexists(side):
            os.replace(side, path.with_name(base + suffix))
    prefix = f"{path.name}.corrupt-"
    for sibling in path.parent.iterdir():
        if sibling.name.startswith(prefix) and not sibling.name.startswith(base):
            _remove(sibling)
    return target


def cogd_dir_of(path: Path) -> Path | None:
    """The ``.cogd`` folder that holds ``path``, or None (a store used outside a repository)."""
    for parent in path.parents:
        if parent.name == ".cogd":
            return parent
    return None


def _write_json(path: Path, data: object) -> None:
    """Write ``data`` to ``path`` atomically, private (0600), never through a planted link."""
    safepath.write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path`` (never through a link), or None when missing, unsafe or not an object."""
    try:
        raw = safepath.read_bytes(path, 1 << 20)
        data = json.loads(raw.decode("utf-8", errors="replace")) if raw is not None else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recovery_events(cogd_dir: Path) -> list[dict]:
    """The recorded projection moves, oldest first: ``{store, path, moved_to, at, reason, rebuild}``."""
    data = _read_json(cogd_dir / RECOVERY_FILE) or {}
    events = data.get("events")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def latest_recoveries(cogd_dir: Path) -> list[dict]:
    """The newest move of each store whose moved-aside copy still exists, oldest first.

    What status and doctor show: each store once, until someone deletes the
    copy (that acknowledges it).
    """
    latest: dict[str, dict] = {}
    for event in recovery_events(cogd_dir):
        latest[str(event.get("store"))] = event
    return sorted((e for e in latest.values() if _copy_kept(cogd_dir, e)), key=lambda e: e.get("at") or 0)


def _copy_kept(cogd_dir: Path, event: dict) -> bool:
    """True when ``event``'s moved-aside copy is still there. The file is repository data (a
    crafted one must not make cogd look outside ``.cogd/``): only a plain name in ``.cogd/`` or
    ``.cogd/index/`` counts."""
    moved, where = event.get("moved_to"), event.get("path")
    if not isinstance(moved, str) or not isinstance(where, str) or "/" in moved or moved in ("", ".", ".."):
        return False
    folder = Path(where).parent
    if folder not in (cogd_dir, cogd_dir / "index"):
        return False
    return os.path.lexists(folder / moved)


def _note(cogd_dir: Path | None, event: dict) -> None:
    if cogd_dir is None or not cogd_dir.is_dir():
        return
    try:
        events = recovery_events(cogd_dir)[-(KEEP_EVENTS - 1):] + [event]
        _write_json(cogd_dir / RECOVERY_FILE, {"events": events})
    except OSError:
        log.exception("could not record the recovery of %s", event.get("store"))


def quarantine(path: Path, reason: str, rebuild: str, *, store: str | None = None) -> Path | None:
    """Move the damaged projection ``path`` aside, log it once and record it for status.

    ``reason``: what was wrong (the SQLite message); ``rebuild``: how it comes
    back (shown to the user). Returns where it went (None if it had vanished).
    """
    now = time.time()
    reason = " ".join(reason.split())  # quick_check reports over several lines: one line in status
    moved = move_aside(path, now)
    name = store or path.name
    log.warning("%s is damaged (%s): moved aside to %s; %s", path, reason, moved.name if moved else "-", rebuild)
    _note(cogd_dir_of(path), {"store": name, "path": str(path), "moved_to": moved.name if moved else None,
                              "at": now, "reason": reason[:500], "rebuild": rebuild})
    return moved


def open_projection(path: Path, opener: Callable[[], T], rebuild: str, *, check: bool = True,
                    store: str | None = None) -> T:
    """``opener()`` for the SQLite projection at ``path``, moving a damaged file aside first.

    ``check``: run ``PRAGMA quick_check`` before opening. An ``opener`` that
    fails with corruption is retried once on a fresh file. Errors that are not
    corruption (see :func:`is_corruption`) propagate.
    """
    if check:
        problem = sqlite_problem(path)
        if problem:
            quarantine(path, problem, rebuild, store=store)
    try:
        return opener()
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
        quarantine(path, str(exc), rebuild, store=store)
        return opener()


# ---- the ledger --------------------------------------------------------------------------

@dataclass
class LedgerReport:
    """What :func:`check_ledger` found. ``state``: ok | new | fresh | lost.

    ``problem``: for ``lost``, what was wrong (``was empty (0 bytes)``,
    ``was missing``, ``was unreadable: …``, ``was replaced by an empty
    database``); ``moved_to``: the file name it was moved to (None when
    nothing was there); ``before``: the marker's counts; ``memory_records``:
    record files found; ``restored_tombstones``: filled by :func:`restore_tombstones`.
    """

    state: str
    problem: str = ""
    moved_to: str | None = None
    before: dict = field(default_factory=dict)
    memory_records: int = 0
    restored_tombstones: int = 0
    at: float = 0.0

    def statement(self) -> str:
        """One honest sentence for status, doctor and the log."""
        if self.state == "fresh":
            return (f"ledger started fresh with {self.memory_records} memory records from git "
                    f"(no state.db existed on this machine); restored {self.restored_tombstones} tombstones "
                    "from memory files")
        if self.state != "lost":
            return "ledger ok" if self.state == "ok" else "new ledger"
        where = f", moved to {self.moved_to}" if self.moved_to else ""
        had = ""
        if self.before.get("events") or self.before.get("deliveries"):
            had = (f" (it held {self.before.get('events', 0)} events and {self.before.get('deliveries', 0)} "
                   f"deliveries at {_when(self.before.get('at'))})")
        return (f"ledger state.db {self.problem}{where}{had}; restored {self.restored_tombstones} tombstones "
                f"from memory files; delivery history and event log before {_when(self.at)} are lost")


def _when(ts: object) -> str:
    if not isinstance(ts, (int, float)) or not ts:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def ledger_counts(path: Path) -> dict:
    """``{bytes, events, deliveries, tombstones}`` of ``state.db`` (highest ids, so cheap), read-only.

    Missing tables count 0. Raises sqlite3.Error when the file cannot be read.

    The one read of another package's tables outside their owners (usage/ledger.py,
    memory/events.py), on purpose: this module sits below both, and the marker must be read
    from a ``state.db`` that neither owner may open yet (opening creates what is missing).
    """
    safepath.prepare_db(path, create=False)
    counts = {"bytes": os.lstat(path).st_size, "events": 0, "deliveries": 0, "tombstones": 0}
    conn = sqlite3.connect(readonly_uri(path), uri=True, timeout=10.0)
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for key, sql in (("events", "SELECT coalesce(max(id), 0) FROM events"),
                         ("deliveries", "SELECT coalesce(max(id), 0) FROM deliveries"),
                         ("tombstones", "SELECT count(*) FROM tombstones")):
            if key in names:
                counts[key] = int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()
    return counts


def read_mark(cogd_dir: Path) -> dict | None:
    """The ledger marker ``{bytes, events, deliveries, tombstones, at, …}``, or None."""
    return _read_json(cogd_dir / LEDGER_MARK_FILE)


def _had_rows(mark: dict | None) -> bool:
    return bool(mark) and any(isinstance(mark.get(k), int) and mark[k] > 0
                              for k in ("events", "deliveries", "tombstones"))


def write_mark(cogd_dir: Path, state_db: Path, *, force: bool = False, **extra) -> dict | None:
    """Record what ``state_db`` holds now in ``.cogd/ledger.json`` (keeps ``started_fresh`` facts).

    Unless ``force`` (at start, once :func:`check_ledger` has accepted the
    ledger), a ledger whose highest event and delivery ids are both below the
    marker's is not recorded: it shrank under a running daemon, and the old
    marker is what lets the next start notice. Returns the marker, or None when
    nothing was written (logged).
    """
    try:
        counts = ledger_counts(state_db)
    except (OSError, sqlite3.Error):
        log.exception("could not read %s for its marker", state_db)
        return None
    old = read_mark(cogd_dir) or {}
    grown = [k for k in ("events", "deliveries") if isinstance(old.get(k), int) and old[k] > 0]
    if not force and grown and all(counts[k] < old[k] for k in grown):
        # Ids only grow (a wipe on request goes through forget_ledger): a ledger that shrank
        # under us was damaged or replaced. Keep the old marker so the next start can tell.
        log.warning("%s holds fewer rows than its marker (%s); marker kept", state_db,
                    {k: old.get(k) for k in ("events", "deliveries")})
        return None
    mark = {**{k: v for k, v in old.items() if k.startswith("started_fresh")}, **counts, **extra, "at": time.time()}
    try:
        _write_json(cogd_dir / LEDGER_MARK_FILE, mark)
    except OSError:
        log.exception("could not write the ledger marker")
        return None
    return mark


def classify_ledger(cogd_dir: Path, memory_records: int) -> LedgerReport:
    """What ``state.db`` is now, without changing anything (doctor uses this; see :func:`check_ledger`).

    ``memory_records``: how many record files ``.cogd/memory/`` holds
    (:func:`cogd.memory.sync.count_record_files`). Missing or empty: ``lost`` when the marker says it had rows, ``fresh`` when
    memory files exist and no marker does (a clone), else ``new``. Unreadable
    (not a database, fails ``quick_check``): ``lost`` — it held something.
    Raises :class:`StoreRefused` when it cannot be opened for a reason other
    than damage (a link, a directory, another user's file, permissions, I/O).
    """
    state_db = cogd_dir / "state.db"
    mark = read_mark(cogd_dir)
    before = {k: mark.get(k) for k in ("events", "deliveries", "tombstones", "bytes", "at")} if mark else {}
    report = LedgerReport("ok", before=before, memory_records=memory_records, at=time.time())
    try:
        exists = safepath.check_identity(state_db)  # a mode too open is the permissions check's (start tightens it)
    except safepath.UnsafePath as exc:  # a link, a directory, another user's file: not ours to move
        raise StoreRefused("state.db", f"{state_db} {exc.problem}",
                           f"{exc.fix} (cogd never moves or deletes a ledger it cannot read), then `cogd start`") from exc
    empty = exists and os.lstat(state_db).st_size == 0
    if not exists or empty:
        # Missing and empty are one case (opening a ledger used to create an empty file first):
        # only the marker can say that rows were lost. Without one, memory files came from git.
        if _had_rows(mark):
            report.state, report.problem = "lost", "was empty (0 bytes)" if empty else "was missing"
        elif memory_records and mark is None:
            report.state = "fresh"
        else:
            report.state = "new"
        return report
    try:
        problem = sqlite_problem(state_db)
        counts = ledger_counts(state_db) if problem is None else None
    except safepath.UnsafePath as exc:  # its -wal or -shm is a link or not ours
        raise StoreRefused("state.db", f"{exc.path} {exc.problem}", exc.fix) from exc
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            problem, counts = str(exc), None
        else:
            raise StoreRefused("state.db", f"{state_db} cannot be opened ({exc})",
                               "check its permissions and the disk, then `cogd start`") from exc
    if problem is not None:
        report.state, report.problem = "lost", f"was unreadable ({problem})"
    elif counts is not None and _had_rows(mark) and not any(counts[k] for k in ("events", "deliveries", "tombstones")):
        report.state, report.problem = "lost", "was replaced by an empty database"
    return report


def check_ledger(cogd_dir: Path, memory_records: int) -> LedgerReport:
    """Classify ``state.db`` (:func:`classify_ledger`) and, when it is lost, move what is there aside.

    ``memory_records``: as for :func:`classify_ledger`.
    Call before anything opens the ledger. Never deletes: a damaged or empty
    file becomes ``state.db.corrupt-<time>``. Raises :class:`StoreRefused`
    (nothing moved) when the file cannot be opened for a reason other than
    damage, and OSError when the move fails.
    """
    report = classify_ledger(cogd_dir, memory_records)
    if report.state == "lost":
        state_db = cogd_dir / "state.db"
        if os.path.lexists(state_db):
            moved = move_aside(state_db, report.at)
            report.moved_to = moved.name if moved else None
    return report


PENDING_LOSS_FIX = ("if you have a backup of .cogd/state.db, put it back now; otherwise `cogd start`: it moves "
                    "the file aside (never deletes it), restores tombstones from the memory files and says what "
                    "is lost")


def pending_loss(report: LedgerReport) -> str:
    """The sentence for a ``lost`` ledger that no start has handled yet (doctor, and status without a daemon)."""
    had = (f" (the marker says it held {report.before.get('events', 0)} events and "
           f"{report.before.get('deliveries', 0)} deliveries)") if report.before else ""
    return f"ledger state.db {report.problem}{had}; {report.memory_records} memory files"


def record_loss(cogd_dir: Path, report: LedgerReport) -> None:
    """Write ``.cogd/ledger-loss.json`` and log the loss once (doctor fails while the file exists)."""
    statement = report.statement()
    log.error("%s", statement)
    try:
        _write_json(cogd_dir / LEDGER_LOSS_FILE, {**asdict(report), "statement": statement})
    except OSError:
        log.exception("could not record the ledger loss")


def ledger_loss(cogd_dir: Path) -> dict | None:
    """The unacknowledged ledger loss (``statement``, ``moved_to``, ``at`` …), or None."""
    return _read_json(cogd_dir / LEDGER_LOSS_FILE)


def loss_fix(loss: dict) -> str:
    """What to do about a recorded loss."""
    moved = f" (the damaged file is .cogd/{loss['moved_to']})" if loss.get("moved_to") else ""
    return (f"if you have a backup of .cogd/state.db, stop the daemon and copy it back{moved}; "
            f"then, or to accept the loss, delete .cogd/{LEDGER_LOSS_FILE}")


def forget_ledger(cogd_dir: Path) -> None:
    """``cogd reset --all`` wiped the ledger on purpose: mark it empty (not lost, not a fresh clone)
    and drop any recorded loss."""
    now = time.time()
    _write_json(cogd_dir / LEDGER_MARK_FILE, {"events": 0, "deliveries": 0, "tombstones": 0, "bytes": 0,
                                              "at": now, "wiped_at": now})
    try:
        (cogd_dir / LEDGER_LOSS_FILE).unlink()
    except FileNotFoundError:
        pass
