"""The memory operations, shared by the CLI (through the daemon or in-process) and the daemon's methods.

:class:`MemoryStore` owns one repository's memory: the record files under
``.cogd/memory/``, the projection ``.cogd/index/memory.db`` and the ledger
tables ``events`` and ``tombstones`` in ``.cogd/state.db``. Every mutation —
:meth:`~MemoryStore.record`, :meth:`~MemoryStore.transition`,
:meth:`~MemoryStore.supersede`, :meth:`~MemoryStore.verify`,
:meth:`~MemoryStore.edit`, imports, the anchor check and hand edits found by
:meth:`~MemoryStore.sync` — asks :func:`cogd.memory.lattice.transition` first,
then goes through :meth:`~MemoryStore.commit`: an intent in the ledger, the files
(atomically), the events, the projection — so a crash at any step is completed
by the next sync (:meth:`~MemoryStore.recover`), never mistaken for a hand edit.

For packs (read-only, thread-safe, never raise on an empty store):

- ``MemoryStore.search(query: str, limit: int, statuses=("active", "stale")) -> list[MemoryHit]``
  — BM25 over title and body (FTS5) fused with cosine similarity of the
  memory embeddings when an encoder is available (reciprocal rank fusion, k = 60);
  best first. Each :class:`~cogd.memory.projection.MemoryHit` has ``id``, ``type``,
  ``title``, ``body``, ``status``, ``updated_at`` (unix s), ``anchors``
  (``[{"entity", "hash"}]``), ``score`` (higher is better).
- ``MemoryStore.listing(type=None, status=None, limit=None) -> list[MemoryHit]``
  — newest ``updated_at`` first; ``status`` one status or a tuple of them.
- ``MemoryStore.config.show_stale`` — whether packs show stale memories (with their
  age and a "may be outdated" mark) or leave them out.

Errors: every refused operation raises :class:`~cogd.memory.errors.MemoryRefused`
with a stable ``kind`` (``illegal_transition``, ``tombstoned``,
``secret_detected``, ``duplicate``, ``not_found``, ``bad_request``) and JSON-safe ``data``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from cogd import faults, safepath
from cogd.fusion import reciprocal_rank_fusion
from cogd.index.boundary import exists_in_tree
from cogd.memory import lattice
from cogd.memory.anchors import CodeIndex, entity_path
from cogd.memory.dedup import Existing, find_duplicate, nearest
from cogd.memory.errors import MemoryRefused, bad_request, not_found
from cogd.memory.events import MemoryLedger, event_op, owner_alive, pre_image, process_token, tombstone_op
from cogd.memory.gitstate import UncommittedMemory
from cogd.memory.normalise import content_hash
from cogd.memory.projection import MemoryHit, Projection, row_anchors, row_to_hit
from cogd.memory.record import (
    FOLDERS, MAX_FILE_BYTES, SOURCES, TITLE_MAX, TYPES, Anchor, Record, RecordError, atomic_write, free_text, is_ulid,
    mask_record, new_id, parse, read_text, serialise,
)
from cogd.memory.sync import scan as scan_files
from cogd.secrets import redact
from cogd.secrets import scan as scan_secrets
from cogd.secrets import strip_private

log = logging.getLogger("cogd.memory")

# Characters of one memory's body once private spans are stripped, on every write path (record,
# edit, import, a hand-edited file). Not the daemon's limits on request strings (cogd.daemon.params,
# cogd.daemon.memory_methods): those bound what a request may carry, this bounds what a record holds.
BODY_MAX = 100_000

# embed(text) -> (model id, unit float32 vector) or None while no encoder is available
Embed = Callable[[str], "tuple[str, np.ndarray] | None"]


def _default_config():
    from cogd.config import MemoryConfig

    return MemoryConfig()


def derive_title(text: str) -> str:
    """The first non-empty line of ``text`` without markdown heading marks, at most 80 characters."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= 80 else line[:79].rstrip() + "…"
    return ""


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _without_private(record: Record) -> Record:
    """A copy of ``record`` with ``<private>…</private>`` spans out of the fields the projection keeps."""
    import dataclasses

    return dataclasses.replace(
        record, title=" ".join(strip_private(record.title).split()),
        tags=[t for t in (strip_private(t).strip() for t in record.tags) if t],
        session_id=strip_private(record.session_id), creation_reason=strip_private(record.creation_reason))


_RECORD_PATH = re.compile(r"^(?:%s)/[0-9A-HJKMNP-TV-Z]{26}\.md$" % "|".join(sorted(set(FOLDERS.values()))))


def _snapshot(path: Path, keep: int = 0) -> tuple[str | None, bytes | None]:
    """``(sha256 hex of the file's bytes, the bytes when at most ``keep`` of them)``; ``(None, None)``
    when there is no such file. A symlink is never followed (nothing outside the tree is read): its
    digest is that of its target's name, prefixed ``link:``. Raises OSError (other than a missing file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        return "link:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest(), None
    with os.fdopen(fd, "rb") as handle:
        head = handle.read(keep + 1) if keep else b""
        digest = hashlib.sha256(head)
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest(), (head if len(head) <= keep and keep else None)


def file_digest(path: Path) -> str | None:
    """sha256 hex of the file's bytes; None when there is no such file (see :func:`_snapshot`)."""
    return _snapshot(path)[0]


def text_digest(text: str) -> str:
    """sha256 hex of ``text`` as UTF-8: what :func:`file_digest` gives once ``atomic_write`` wrote it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _valid_intent_file(entry: object) -> bool:
    """Whether an intent's file entry may be acted on: a ``<folder>/<ULID>.md`` path, and a post-image
    (when it carries one) whose digest matches and that parses as the record of that path."""
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not _RECORD_PATH.match(entry["path"]):
        return False
    text = entry.get("text")
    if text is None:
        return not entry.get("write")
    if not isinstance(text, str) or text_digest(text) != entry.get("post"):
        return False
    try:
        return parse(text).relpath() == entry["path"]
    except RecordError:
        return False


def _record_arguments(type: str, source: str, text: object, title: object, anchors: Iterable[str]) -> list[str]:
    """Check the arguments of :meth:`MemoryStore.record` that need no store; returns the anchors as a list.

    Raises MemoryRefused ``bad_request``.
    """
    if type not in TYPES:
        raise bad_request(f"type must be one of {', '.join(TYPES)}, got {type!r}")
    if source not in SOURCES:
        raise bad_request(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if not isinstance(text, str) or (title is not None and not isinstance(title, str)):
        raise bad_request("text and title must be strings")
    anchors = list(anchors)
    if not all(isinstance(a, str) and a for a in anchors):
        raise bad_request("anchors must be code entity ids (non-empty strings)")
    return anchors


@dataclass
class FileChange:
    """One file of a :meth:`MemoryStore.commit`.

    ``record``: the post-image, projected once the events are in (None with ``delete``).
    ``relpath``: under ``.cogd/memory/`` (default: the record's place). ``text``: what to
    write (default: ``serialise(record)``). ``write``: False when the file already holds
    the post-image (a hand edit being accepted). ``delete``: the file is removed (a purge).
    ``text_changed``: the projection re-embeds it. ``vector``: an embedding already made.
    """

    record: Record | None
    relpath: str = ""
    text: str | None = None
    write: bool = True
    delete: bool = False
    text_changed: bool = False
    vector: "tuple[str, np.ndarray] | None" = None


class MemoryStore:
    """One repository's memory. Thread-safe: one lock serialises every mutation and sync.

    ``root``: the repository root; records live in ``root/.cogd/memory/``.
    ``state_db``: the ledger database (``events``, ``tombstones``).
    ``index_dir``: where ``memory.db`` goes and ``index.db`` (the code index) is read.
    ``config``: a :class:`cogd.config.MemoryConfig`. ``embed``: see :data:`Embed`.
    ``clock``: unix seconds (tests may pin it).
    """

    def __init__(self, root: Path, state_db: Path, index_dir: Path, config=None, embed: Embed | None = None,
                 clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.memory_dir = self.root / ".cogd" / "memory"
        for folder in FOLDERS.values():  # real folders of ours, 0700 (raises UnsafePath)
            safepath.check_chain(self.memory_dir / folder, create=True)
        self.config = config if config is not None else _default_config()
        self.embed = embed
        self.clock = clock
        self.ledger = MemoryLedger(state_db)
        self.projection = Projection(index_dir / "memory.db")
        self.code = CodeIndex(index_dir / "index.db")
        self._lock = threading.RLock()
        self._last_sync = 0.0
        self._anchor_mark: str | None = None
        self.last_sync_at: float | None = None
        self.secrets_swept = False  # the first sync masks secrets in every record file (see sync.py)
        self._uncommitted_dirty = True  # a memory file changed: the git-state count is due a refresh
        self.git_state = UncommittedMemory(self.root)  # memory files git does not hold yet (cached)

    def close(self) -> None:
        with self._lock:
            self.projection.close()
            self.ledger.close()

    # ---- helpers -----------------------------------------------------------------
    def path_of(self, record: Record) -> Path:
        return self.memory_dir / record.relpath()

    def _vector(self, text: str) -> tuple[str, np.ndarray] | None:
        if self.embed is None:
            return None
        try:
            return self.embed(text)
        except Exception:  # an encoder failure must not refuse a memory: dedup degrades to titles
            log.exception("memory embedding failed")
            return None

    def _existing(self, rows, model: str | None) -> list[Existing]:
        vectors = self.projection.vectors([r["id"] for r in rows], model) if model else {}
        return [Existing(r["id"], r["title"], r["content_hash"], vectors.get(r["id"])) for r in rows]

    def encoder_model(self) -> str | None:
        """The model id the encoder gives vectors of now (it embeds a short probe text); None without
        an encoder or when the encoder fails (the failure is logged)."""
        got = self._vector("probe")
        return got[0] if got is not None else None

    def load(self, entity_id: str) -> tuple[Record, "object"]:
        """The record file of ``entity_id`` (a :class:`Record`) and its projection row (sqlite3.Row).

        Raises MemoryRefused ``bad_request`` (not a non-empty string, the file has an unresolved
        problem, or it cannot be read or parsed) and ``not_found`` (no such memory in the projection).
        Takes no lock: to change the record, load it through :meth:`editing`.
        """
        if not isinstance(entity_id, str) or not entity_id:
            raise bad_request("id must be a non-empty string")
        row = self.projection.row(entity_id)
        if row is None:
            raise not_found(entity_id)
        path = self.memory_dir / row["path"]
        problem = self._problem(row["path"])
        if problem:
            raise bad_request(f"{path} has an unresolved problem ({problem.get('message')}): fix the file first",
                              problem.get("fix") or None, id=entity_id, path=str(path),
                              problem=problem)
        try:
            record = parse(read_text(path))
        except (OSError, UnicodeDecodeError, RecordError) as exc:
            raise bad_request(f"cannot read {path}: {exc}", id=entity_id, path=str(path)) from exc
        return record, row

    def _problem(self, relpath: str) -> dict | None:
        row = self.projection.files().get(relpath)
        return json.loads(row["problem"]) if row is not None and row["problem"] else None

    def _stat_file(self, record: Record, problem: dict | None = None) -> None:
        path = self.path_of(record)
        st = path.stat()
        self.projection.set_file(record.relpath(), st.st_mtime_ns, st.st_size, record.id, problem)

    def _project(self, record: Record, vector: tuple[str, np.ndarray] | None = None, *, text_changed: bool) -> None:
        """Put ``record``'s accepted state into the projection (and its vector)."""
        body = "" if record.status == "pruned" else strip_private(record.body).strip()
        chash = record.tombstone if record.status == "pruned" and record.tombstone else content_hash(body)
        self.projection.upsert(_without_private(record), body, chash)
        if record.status == "pruned":
            self.projection.drop_vector(record.id)
        elif text_changed:
            got = vector or self._vector(f"{record.title}\n{body}")
            if got is not None:
                self.projection.set_vector(record.id, got[0], got[1])
            else:
                self.projection.drop_vector(record.id)
        if self.path_of(record).exists():
            self._stat_file(record)

    # ---- the write path: intent, files, events, projection -------------------------------------
    @contextmanager
    def editing(self, *entity_ids: str) -> Iterator[list[tuple[Record, "object"]]]:
        """Hold the store's write lock and load ``entity_ids`` (in order, each as :meth:`load`).

        Yields ``[(record, projection row), ...]``, one per id. Change the records and hand them to
        :meth:`commit` inside the block: nothing else mutates the store or syncs until it ends, so
        the rows are still the accepted state when the events (their pre-images) are written.
        Raises what :meth:`load` raises, with the lock released.
        """
        with self._lock:
            yield [self.load(entity_id) for entity_id in entity_ids]

    def commit(self, op: str, actor: str, changes: Sequence[FileChange], ops: list, *,
               erase: Sequence[str] = ()) -> list:
        """Carry out one memory operation so that a crash at any step is completed on restart.

        ``op``: the operation's name (``record``, ``transition``, ``merge`` …; fault points are
        ``<op>:<step>``, see :mod:`cogd.faults`). ``actor``: who does it. ``changes``: the files
        it writes or deletes, in order. ``ops``: the ledger rows it appends, in order (see
        :class:`cogd.memory.events.Intent`: ``["event", {...}]``, ``["tombstone", {...}]``,
        ``["redact", id]``, ``["redact_reasons", id]``). ``erase``: entity ids whose projection
        rows go (a purge). Returns one result per op (event ids, redacted-row counts).

        Sequence: (1) an intent row with every file's pre- and post-image hash and the
        post-image text; (2) the files, each atomically; (3) the ops and the intent marked
        ``logged``, in one transaction; (4) the projection; (5) the intent is deleted. The
        intent is the commit point: a crash before (1) changed nothing, a crash after it is
        rolled forward by :meth:`recover` (a file still equal to its pre-image gets the
        post-image, one equal to neither — edited by hand since — is left to the scan).
        Raises OSError or sqlite3.Error from the files or the ledger; a failure before (3)
        puts the pre-images back and drops the intent, so the operation did not happen.
        Call with the store's lock held.
        """
        files, before = [], []
        for change in changes:
            rel = change.relpath or change.record.relpath()
            # the pre-image's bytes are kept (in memory only) to undo a failed commit; a file
            # over the size limit (a purge of a too-large file) is hashed, not kept
            pre, pre_bytes = _snapshot(self.memory_dir / rel, keep=MAX_FILE_BYTES)
            before.append(pre_bytes)
            if change.delete:
                text, post = None, None
            elif not change.write:
                text, post = None, pre
            else:
                text = change.text if change.text is not None else serialise(change.record)
                post = text_digest(text)
            files.append({"path": rel, "pre": pre, "post": post, "text": text if change.write else None,
                          "project": change.record is not None, "text_changed": change.text_changed,
                          "write": change.write and not change.delete, "delete": change.delete})
        faults.point(f"{op}:planned")
        intent = self.ledger.open_intent(op, actor, {"files": files, "ops": ops, "erase": list(erase)})
        faults.point(f"{op}:intent")
        try:
            for k, entry in enumerate(files, start=1):
                self._apply_file(entry)
                faults.point(f"{op}:file{k}")
            results = self.ledger.log_intent(intent, ops)
        except BaseException:
            self._undo_files(intent, files, before)
            raise
        faults.point(f"{op}:logged")
        for k, (change, entry) in enumerate(zip(changes, files), start=1):
            if entry["delete"]:
                self.projection.drop_file(entry["path"])
            elif change.record is not None:
                self._project(change.record, change.vector, text_changed=change.text_changed)
            faults.point(f"{op}:project{k}")
        for entity_id in erase:
            self.projection.delete(entity_id, erase=True)
        self.ledger.close_intent(intent)
        self._uncommitted_dirty = True
        return results

    def _apply_file(self, entry: dict) -> None:
        """Bring one file of an intent to its post-image (write or delete)."""
        path = self.memory_dir / entry["path"]
        if entry["delete"]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        elif entry["write"]:
            atomic_write(path, entry["text"])

    def _undo_files(self, intent: int, files: list[dict], before: list[bytes | None]) -> None:
        """A commit failed before its events: put every file back as it was and drop the intent.
        When that fails too, the intent stays open and the next sync rolls the operation forward."""
        try:
            for entry, pre_bytes in zip(files, before):
                path = self.memory_dir / entry["path"]
                if file_digest(path) == entry["pre"]:
                    continue
                if entry["pre"] is None:
                    path.unlink(missing_ok=True)
                elif pre_bytes is None:
                    raise OSError(f"cannot restore {entry['path']}: its pre-image was not kept")
                else:
                    atomic_write(path, pre_bytes)
            self.ledger.close_intent(intent)
        except Exception:  # noqa: BLE001 — the intent stays; recover() completes the operation later
            log.exception("could not undo a failed memory write (intent %d); the next sync completes it", intent)

    def recover(self) -> int:
        """Complete every operation a crash interrupted (their intents are still in the ledger).

        For an intent still ``open``: each file equal to its pre-image gets its post-image (or is
        deleted), one equal to its post-image is done, one equal to neither was changed by hand
        after the crash and is left as found (the scan judges it against the completed state);
        then the intent's events are appended with ``"recovered": true`` in their detail — unless
        no file had reached its post-image and one was edited by hand: then the person edited the
        state before the operation, and the operation is rolled back (dropped). For every
        intent: the records are projected from their post-images and the intent is deleted. Skips
        intents of another live process (a writer at work). Returns how many were completed.
        Call with the store's lock held (:meth:`sync` does).
        """
        if not self.ledger.has_intents():
            return 0
        me = process_token()
        done = 0
        for intent in self.ledger.intents():
            if intent.owner != me and owner_alive(intent.owner):
                continue
            files = intent.plan.get("files") or []
            if not all(_valid_intent_file(f) for f in files):
                # state.db is local, but a repository may arrive with a crafted .cogd/: never write
                # anything an intent says unless it is a record of its own name in a record folder
                log.warning("memory intent %d is malformed (a path outside the record folders, or a post-image "
                            "that is not that record): dropped unapplied", intent.id)
                self.ledger.close_intent(intent.id)
                continue
            try:
                self._complete(intent, files)
            except Exception:  # noqa: BLE001 — a disk or ledger failure: the intent stays, the next sync retries
                log.exception("could not complete the interrupted memory %s (intent %d)", intent.op, intent.id)
                continue
            done += 1
        return done

    def _complete(self, intent, files: list[dict]) -> None:
        """:meth:`recover` for one intent whose files passed :func:`_valid_intent_file`."""
        if intent.state == "open":
            now = [file_digest(self.memory_dir / entry["path"]) for entry in files]
            reached = any(d == e["post"] and e["post"] != e["pre"] for d, e in zip(now, files))
            edited = [e["path"] for d, e in zip(now, files) if d not in (e["pre"], e["post"])]
            if edited and not reached:
                # Nothing of the operation is visible, and a person edited a file since (starting from
                # the pre-image): the edit wins, the operation is rolled back (it never happened).
                self.ledger.close_intent(intent.id)
                log.warning("an interrupted memory %s was rolled back: %s changed by hand since",
                            intent.op, ", ".join(edited))
                return
            for digest, entry in zip(now, files):
                if digest == entry["pre"] and digest != entry["post"] and (entry.get("write") or entry.get("delete")):
                    self._apply_file(entry)
                elif digest not in (entry["pre"], entry["post"]):
                    log.warning("%s changed after an interrupted %s: left as found", entry["path"], intent.op)
            self.ledger.log_intent(intent.id, intent.plan.get("ops") or [], recovered=True)
        for entry in files:
            path = self.memory_dir / entry["path"]
            if entry.get("delete"):
                self.projection.drop_file(entry["path"])
                continue
            if not entry.get("project") or file_digest(path) != entry["post"]:
                continue  # edited by hand after the crash: the scan reads it
            try:
                record = parse(read_text(path))
            except (OSError, UnicodeDecodeError, RecordError):
                continue
            if record.relpath() == entry["path"]:
                self._project(record, text_changed=bool(entry.get("text_changed")))
        for entity_id in intent.plan.get("erase") or []:
            if isinstance(entity_id, str):
                self.projection.delete(entity_id, erase=True)
        self.ledger.close_intent(intent.id)
        self._anchor_mark = None
        self._uncommitted_dirty = True
        log.warning("completed a memory %s interrupted by a crash (intent %d, %s, %s)", intent.op, intent.id,
                    intent.actor, ", ".join(f["path"] for f in files) or "no files")

    def _check_secrets(self, *texts: str) -> None:
        findings, seen = [], set()
        for text in texts:
            for finding in scan_secrets(text):
                if (finding.kind, finding.preview) not in seen:  # a title is often the body's first line
                    seen.add((finding.kind, finding.preview))
                    findings.append(finding)
        if findings:
            kinds = sorted({f.kind for f in findings})
            first = findings[0]
            raise MemoryRefused(
                "secret_detected",
                f"refused: the text looks like it holds a secret ({', '.join(kinds)}; line {first.line}, "
                f"starts {first.preview!r}). Remove it, or wrap what must not be stored in <private>…</private>.",
                findings=[f.as_dict() for f in findings])

    def _check_tombstone(self, chash: str, entity_id: str = "") -> None:
        stone = self.ledger.tombstone(chash)
        if stone is not None and stone.entity_id != entity_id:
            raise MemoryRefused(
                "tombstoned",
                f"refused: this claim was rejected on {_when(stone.at)} as {stone.entity_id}"
                + (f" (reason: {stone.reason})" if stone.reason else "")
                + f"; see `cogd memory show {stone.entity_id}` and `cogd events --entity {stone.entity_id}`",
                id=stone.entity_id, rejected_at=stone.at, rejected_on=_when(stone.at), reason=stone.reason)

    # ---- operations -------------------------------------------------------------------
    def record(self, type: str, text: str, *, title: str | None = None, anchors: Iterable[str] = (),
               source: str = "agent", actor: str | None = None, session_id: str = "", creation_reason: str = "",
               tags: Iterable[str] = (), status: str | None = None, entity_id: str | None = None,
               created_at: float | None = None, allow_duplicate: bool = False) -> dict:
        """Write a new memory. Returns ``{"record": {...}, "path": str, "warnings": [str]}``.

        ``type``: observation | rule | knowledge. ``text``: the claim (markdown;
        ``<private>…</private>`` spans are dropped before anything is stored).
        ``title``: defaults to the text's first line. ``anchors``: code entity ids,
        each stored with its current content hash from the code index.
        ``source``: agent | human | consolidation | import. ``status``: default
        ``active`` for ``human``, ``candidate`` otherwise (imports are always candidates).

        Raises MemoryRefused: ``bad_request`` (bad type/source/text, an id in use),
        ``secret_detected``, ``tombstoned`` (the same normalised claim was rejected;
        data: id, date, reason), ``duplicate`` (data: id, how, score — exact content or
        title over memories of the type that are live, embedding over active ones),
        ``not_found`` (an anchor entity the index does not hold), ``illegal_transition``.
        A near-duplicate of a rejected claim (embedding cosine ≥
        ``config.tombstone_similarity``) is accepted only as ``candidate`` with a warning.
        """
        anchors = _record_arguments(type, source, text, title, anchors)
        with self._lock:
            self.sync()
            head, body, tags, creation_reason, session_id = self._clean_fields(
                text, title, tags, creation_reason, session_id, anchors)
            chash = content_hash(body)
            self._check_tombstone(chash)
            warnings: list[str] = []
            if status is None:
                status = "active" if source == "human" else "candidate"
            if source == "import":
                status = "candidate"
            vector = self._vector(f"{head}\n{body}")
            if self._near_rejected(vector, warnings):
                status = "candidate"
            self._refuse_duplicate(type, head, chash, vector, allow_duplicate)
            anchor_list = self._anchor(anchors)
            entity_id = self._unused_id(entity_id or new_id())
            lattice.transition(None, status, entity_id=entity_id)
            now = self.clock()
            record = Record(
                id=entity_id, type=type, title=head, status=status, body=body,
                created_at=created_at if created_at is not None else now, updated_at=now, source=source,
                valid_from_commit=self.code.commit(), creation_reason=creation_reason,
                session_id=str(session_id or "")[:200], anchors=anchor_list, tags=tags,
            )
            who = actor or source
            self.commit("record", who, [FileChange(record, text_changed=True, vector=vector)], [
                event_op(who, entity_id, "create", None, status, None,
                         {"path": record.relpath(), "source": source,
                          "anchors": [a.as_dict() for a in anchor_list], "warnings": warnings})])
            return {"record": record.as_dict(), "path": str(self.path_of(record)), "warnings": warnings}

    def _clean_fields(self, text: str, title: str | None, tags: Iterable[str], creation_reason: str,
                      session_id: str, anchors: list[str]) -> tuple[str, str, list[str], str, str]:
        """The stored fields of a new memory: ``(title, body, tags, creation_reason, session_id)``.

        Private spans leave every field first; then every field is scanned
        whole for secrets, before any is cut to its stored length (a cut JWT or
        key no longer looks like one, and its head would be kept). Raises
        MemoryRefused (``bad_request``: empty or too long; ``secret_detected``).
        """
        body = strip_private(text).strip()
        if not body:
            raise bad_request("the text is empty (after removing any <private>…</private> spans)")
        if len(body) > BODY_MAX:
            raise bad_request(f"the text is {len(body)} characters; at most {BODY_MAX}")
        head = " ".join(strip_private(title or "").split()) or derive_title(body)
        if len(head) > TITLE_MAX:
            raise bad_request(f"the title is {len(head)} characters; at most {TITLE_MAX}")
        tags = [t for t in (strip_private(str(t)).strip() for t in tags) if t]
        creation_reason = strip_private(str(creation_reason or ""))
        session_id = strip_private(str(session_id or ""))
        self._check_secrets(head, body, creation_reason, session_id, *tags, *anchors)
        return head, body, [t[:100] for t in tags][:50], creation_reason[:500], session_id

    def _near_rejected(self, vector: tuple[str, np.ndarray] | None, warnings: list[str]) -> bool:
        """Whether the new text's embedding is close to a rejected memory's (then adds a warning).

        Close means cosine ≥ ``config.tombstone_similarity``: such a claim is
        recorded only as a candidate, for a person to review.
        """
        model = vector[0] if vector else None
        near = nearest(vector[1] if vector else None,
                       self._existing(self.projection.rows(status="rejected"), model),
                       self.config.tombstone_similarity)
        if near is None:
            return False
        stone = self.projection.row(near.id)
        warnings.append(f"close to rejected memory {near.id} ({stone['title'] if stone else ''!s}, "
                        f"similarity {near.score:.2f}): recorded as a candidate for review")
        return True

    def _refuse_duplicate(self, type: str, head: str, chash: str, vector: tuple[str, np.ndarray] | None,
                          allow_duplicate: bool) -> None:
        """Raise MemoryRefused ``duplicate`` when a memory of ``type`` says the same already.

        Exact content is checked over every live memory of the type; the title
        (fuzzy) and, with a vector, the embedding over active ones, unless
        ``allow_duplicate`` (then only exact content counts).
        """
        model = vector[0] if vector else None
        live = self.projection.rows(type=type, status=("candidate", "active", "stale"))
        exact = [r for r in live if r["content_hash"] == chash]
        active = [r for r in live if r["status"] == "active"]
        pool = {r["id"]: r for r in exact + ([] if allow_duplicate else active)}
        duplicate = find_duplicate(head, chash, None, self._existing(list(pool.values()), None),
                                   similarity=self.config.duplicate_similarity)
        if duplicate is None and vector is not None and not allow_duplicate:
            duplicate = find_duplicate(head, chash, vector[1], self._existing(active, model),
                                       similarity=self.config.duplicate_similarity)
        if duplicate is not None:
            raise MemoryRefused("duplicate", f"refused: a {type} like this exists already: {duplicate.id} "
                               f"({duplicate.how} match, {duplicate.score:.2f})", **duplicate.as_dict())

    def _unused_id(self, entity_id: str) -> str:
        """``entity_id`` when it is a ULID no memory here has used (purged ones included); else bad_request."""
        if not is_ulid(entity_id):
            raise bad_request(f"id must be a ULID, got {entity_id!r}")
        if self.projection.row(entity_id) is not None or self.ledger.last_status(entity_id) is not None:
            raise bad_request(f"id {entity_id} is already in use (or was purged here)", id=entity_id)
        return entity_id

    def _anchor(self, entity_ids: list[str]) -> list[Anchor]:
        if not entity_ids:
            return []
        hashes = self.code.hashes(entity_ids)
        missing = [e for e in entity_ids if e not in hashes]
        if missing:
            raise MemoryRefused("not_found", f"the code index holds no entity {missing[0]!r} (ids look like "
                               "'path/to/file.py::Class.method'; see `cogd search`)", id=missing[0], entities=missing)
        return [Anchor(e, hashes[e]) for e in dict.fromkeys(entity_ids)]

    def transition(self, entity_id: str, to: str, *, reason: str = "", actor: str = "agent") -> dict:
        """Move a memory to status ``to`` through the lattice. Returns ``{"record": {...}}``.

        ``reject`` needs a ``reason`` (kept with the tombstone). ``rejected`` records
        the normalised-content tombstone; ``pruned`` removes the body, keeps the
        tombstone. Supersession needs the successor: use :meth:`supersede`.
        Raises MemoryRefused ``not_found``, ``bad_request``, ``illegal_transition``.
        """
        if to not in lattice.STATUSES:
            raise bad_request(f"status must be one of {', '.join(lattice.STATUSES)}, got {to!r}")
        if to == "superseded":
            raise bad_request("a memory is superseded by another one: use memory.supersede (OLD_ID, NEW_ID)")
        reason = " ".join(strip_private(str(reason or "")).split())
        if to == "rejected" and not reason:
            raise bad_request("a rejection needs a reason (it is kept with the tombstone)")
        if reason:
            self._check_secrets(reason)
        reason = reason[:1000]
        with self._lock:
            self.sync()
            record, row = self.load(entity_id)
            old = row["status"]
            action = lattice.transition(old, to, entity_id=entity_id)
            if old == to:
                raise bad_request(f"{entity_id} is already {to}", id=entity_id)
            pre = pre_image(row)
            record.status = to
            record.updated_at = self.clock()
            ops = []
            if to == "rejected":
                record.rejected_reason = reason
                record.tombstone = content_hash(strip_private(record.body).strip())
                ops.append(tombstone_op(record.tombstone, entity_id, reason, record.updated_at))
            if to == "pruned":
                if not record.tombstone:
                    record.tombstone = content_hash(strip_private(record.body).strip())
                    ops.append(tombstone_op(record.tombstone, entity_id, reason or "pruned", record.updated_at))
                record.body = ""
            ops.append(event_op(actor, entity_id, action, old, to, pre, {"reason": reason} if reason else {}))
            self.commit("transition", actor, [FileChange(record)], ops)
            return {"record": record.as_dict()}

    def supersede(self, old_id: str, new_id: str, *, actor: str = "agent") -> dict:
        """``old_id`` (active) becomes ``superseded`` by ``new_id`` (candidate or active), both files updated.

        Returns ``{"old": {...}, "new": {...}}``. Raises MemoryRefused ``not_found``,
        ``bad_request`` (same id, successor not live, different types), ``illegal_transition``.
        """
        if old_id == new_id:
            raise bad_request("a memory cannot supersede itself")
        with self._lock:
            self.sync()
            old, old_row = self.load(old_id)
            new, new_row = self.load(new_id)
            if new_row["status"] not in ("candidate", "active"):
                raise bad_request(f"the successor {new_id} is {new_row['status']}; it must be candidate or active")
            if new.type != old.type:
                raise bad_request(f"{new_id} is a {new.type}, {old_id} a {old.type}: supersede within one type")
            if old_row["status"] == "superseded":
                raise MemoryRefused("illegal_transition", f"{old_id} is already superseded (by {old.superseded_by or '?'})",
                                   id=old_id, **{"from": "superseded", "to": "superseded", "allowed": ["pruned"]})
            action = lattice.transition(old_row["status"], "superseded", entity_id=old_id)
            lattice.transition(new_row["status"], new_row["status"], entity_id=new_id)
            now = self.clock()
            old.status, old.superseded_by, old.updated_at = "superseded", new_id, now
            new.supersedes, new.updated_at = old_id, now
            self.commit("supersede", actor, [FileChange(old), FileChange(new)], [
                event_op(actor, old_id, action, old_row["status"], "superseded", pre_image(old_row),
                         {"superseded_by": new_id}),
                event_op(actor, new_id, "edit", new_row["status"], new_row["status"], None,
                         {"supersedes": old_id})])
            return {"old": old.as_dict(), "new": new.as_dict()}

    def verify(self, entity_id: str, *, actor: str = "human") -> dict:
        """Re-anchor a memory to the code as it is now; a ``stale`` one becomes ``active`` again.

        Returns ``{"record": {...}, "anchors": [{"entity", "was", "now"}]}``. Raises
        MemoryRefused ``not_found`` (the memory, or an anchored entity that is gone:
        edit the anchors or reject the memory), ``illegal_transition``.
        """
        with self._lock:
            self.sync()
            record, row = self.load(entity_id)
            old = row["status"]
            to = "active" if old == "stale" else old
            lattice.transition(old, to, entity_id=entity_id)
            hashes = self.code.hashes([a.entity for a in record.anchors])
            gone = [a.entity for a in record.anchors if a.entity not in hashes]
            if gone:
                raise MemoryRefused("not_found", f"cannot re-anchor {entity_id}: the code index no longer holds "
                                   f"{', '.join(gone)}; edit its anchors (`cogd memory edit`) or reject it",
                                   id=entity_id, entities=gone)
            changes = [{"entity": a.entity, "was": a.hash, "now": hashes[a.entity]} for a in record.anchors]
            record.anchors = [Anchor(a.entity, hashes[a.entity]) for a in record.anchors]
            record.status = to
            record.updated_at = self.clock()
            self.commit("verify", actor, [FileChange(record)],
                        [event_op(actor, entity_id, "verify", old, to, None, {"anchors": changes})])
            self._anchor_mark = None
            return {"record": record.as_dict(), "anchors": changes}

    def edit(self, entity_id: str, text: str, *, actor: str = "human") -> dict:
        """Replace a memory's file with ``text`` (a whole record file, as from ``$EDITOR``).

        The edit goes through exactly what a hand edit of the file goes through
        (:meth:`apply_file_state`): parse, lattice, secrets, tombstones. On success
        the file holds ``text`` as given. Returns ``{"record": {...}, "action": str}``.
        Raises MemoryRefused ``bad_request`` (unparsable text — message has line and
        column — or another id), ``illegal_transition``, ``secret_detected``, ``tombstoned``;
        on any error the file is untouched.
        """
        if not isinstance(text, str):
            raise bad_request("text must be a string")
        try:
            record = parse(text)
        except RecordError as exc:
            raise bad_request(f"the edited record does not parse: {exc}", line=exc.line, column=exc.column) from exc
        if record.id != entity_id:
            raise bad_request(f"the edited record's id is {record.id}, not {entity_id}: ids cannot change")
        with self._lock:
            self.sync()
            _, row = self.load(entity_id)
            if record.type != row["type"]:
                raise bad_request(f"the type cannot change ({row['type']} → {record.type}): record a new memory")
            if text == read_text(self.memory_dir / row["path"]):
                return {"record": self._row_record(row), "action": "unchanged"}
            action = self.apply_file_state(record, row["status"], row, actor=actor, raise_errors=True,
                                           write_text=text)
            return {"record": record.as_dict(), "action": action}

    def purge(self, entity_id: str, *, actor: str = "human") -> dict:
        """Erase a memory: its file, projection rows and vector; its events' text becomes a hash.

        What remains: the events themselves (that something happened, when, by
        whom, status moves), the tombstone hash if it was rejected, and a ``purge``
        event. Not erased: git history, backups, other copies of the file.
        Works on memories of any status and on files with problems. Returns
        ``{"id", "removed_file": bool, "events_redacted": int}``. Raises ``not_found``.
        """
        if not isinstance(entity_id, str) or not entity_id:
            raise bad_request("id must be a non-empty string")
        with self._lock:
            self.sync()
            row = self.projection.row(entity_id)
            files = [p for p, f in self.projection.files().items() if f["id"] == entity_id]
            if row is not None:
                files.append(row["path"])
            if row is None and not files:
                raise not_found(entity_id)
            files = list(dict.fromkeys(files))
            removed = any((self.memory_dir / rel).is_file() for rel in files)
            old = row["status"] if row is not None else None
            results = self.commit("purge", actor, [FileChange(None, rel, delete=True) for rel in files], [
                ["redact", entity_id], ["redact_reasons", entity_id],
                event_op(actor, entity_id, "purge", old, "purged", None, {"files": len(files)})],
                erase=[entity_id])
            redacted = results[0]
            self.ledger.checkpoint()
            return {"id": entity_id, "removed_file": removed, "events_redacted": redacted}

    # ---- reads ------------------------------------------------------------------------
    def _row_record(self, row) -> dict:
        hit = row_to_hit(row)
        data = hit.as_dict()
        data.update({"path": row["path"], "supersedes": row["supersedes"], "superseded_by": row["superseded_by"],
                     "session_id": row["session_id"], "valid_from_commit": row["valid_from_commit"]})
        data.pop("score", None)
        return data

    def get(self, entity_id: str) -> dict:
        """One memory: ``{"record": {...}, "text": file text, "path", "problem", "events": [...]}``.

        The record is the projection's (the last legal state); ``text`` is the
        file as it is now. Raises MemoryRefused ``not_found``.
        """
        if not isinstance(entity_id, str) or not entity_id:
            raise bad_request("id must be a non-empty string")
        with self._lock:
            self.sync()
            row = self.projection.row(entity_id)
            if row is None:
                raise not_found(entity_id)
            path = self.memory_dir / row["path"]
            try:
                text = read_text(path)
            except (OSError, UnicodeDecodeError):
                text = ""
            return {"record": self._row_record(row), "text": text, "path": str(path),
                    "problem": self._problem(row["path"]), "events": self.ledger.events(entity_id)}

    def list(self, *, type: str | None = None, status: str | None = None, limit: int | None = None) -> list[dict]:
        """Memories newest first, as :meth:`get`'s ``record`` dicts. Raises ``bad_request`` on unknown filters."""
        if type is not None and type not in TYPES:
            raise bad_request(f"type must be one of {', '.join(TYPES)}, got {type!r}")
        if status is not None and status not in lattice.STATUSES:
            raise bad_request(f"status must be one of {', '.join(lattice.STATUSES)}, got {status!r}")
        with self._lock:
            self.sync()
            return [self._row_record(r) for r in self.projection.rows(type=type, status=status, limit=limit)]

    def listing(self, type: str | None = None, status=None, limit: int | None = None) -> list[MemoryHit]:
        """For packs: memories as :class:`MemoryHit` (score 0.0), newest ``updated_at`` first.

        ``status``: one status, a tuple/list of them, or None for all.
        """
        return [row_to_hit(r) for r in self.projection.rows(type=type, status=status, limit=limit)]

    def search(self, query: str, limit: int = 10, statuses=("active", "stale")) -> list[MemoryHit]:
        """For packs: memories matching ``query``, best first, at most ``limit``.

        Candidates: FTS5 BM25 over title (weight 4) and body, and — when an encoder
        is available — cosine similarity of the query embedding to every stored
        memory vector of the same model; both filtered by ``statuses`` before the
        cut, fused by reciprocal rank (:func:`cogd.fusion.reciprocal_rank_fusion`, k = 60). ``score`` is the fused value.
        Returns [] for an empty query or store; never raises on odd text.
        """
        statuses = tuple(statuses)
        if not isinstance(query, str) or not query.strip() or limit <= 0 or not statuses:
            return []
        depth = max(limit * 3, 30)
        lexical = self.projection.bm25(query, statuses, depth)
        dense: list[tuple[str, float]] = []
        got = self._vector(query)
        if got is not None:
            model, qv = got
            rows = {r["id"] for r in self.projection.rows(status=statuses)}
            vectors = {i: v for i, v in self.projection.vectors(None, model).items() if i in rows}
            scored = [(i, float(np.dot(qv, v))) for i, v in vectors.items() if v.shape == qv.shape]
            dense = sorted(scored, key=lambda t: -t[1])[:depth]
        fused = reciprocal_rank_fusion((1.0, [i for i, _ in ranked]) for ranked in (lexical, dense))
        best = sorted(fused.items(), key=lambda t: -t[1])[:limit]
        hits = []
        for entity_id, score in best:
            row = self.projection.row(entity_id)
            if row is not None:
                hits.append(row_to_hit(row, round(score, 6)))
        return hits

    def events(self, entity_id: str | None = None, limit: int | None = None) -> list[dict]:
        """Events oldest first (the newest ``limit`` when given), for one entity or all."""
        return self.ledger.events(entity_id or None, limit)

    def status(self) -> dict:
        """The ``memory`` block of the daemon status: counts, problems with fixes, last sync time."""
        counts = self.projection.counts()
        return {
            "total": sum(sum(v.values()) for v in counts.values()),
            "by_type": counts,
            "problems": self.projection.problems(),
            "last_sync_at": self.last_sync_at,
            # {"count", "paths", "error", "checked_at"}: memory files git does not hold (see gitstate)
            "uncommitted": (self.git_state.refresh() if self._uncommitted_dirty or self.git_state.peek() is None
                            else self.git_state.peek()),
        }

    # ---- export / import ------------------------------------------------------------------
    def export(self) -> list[dict]:
        """Every memory but pruned ones, as JSON-safe dicts (the record files' content), oldest first."""
        with self._lock:
            self.sync()
            out = []
            for row in reversed(self.projection.rows()):
                if row["status"] == "pruned":
                    continue
                try:
                    record = parse(read_text(self.memory_dir / row["path"]))
                except (OSError, UnicodeDecodeError, RecordError):
                    continue
                if record.status != row["status"]:  # a refused hand edit: export the last legal state
                    record.status = row["status"]
                record.body = strip_private(record.body).strip()
                out.append(record.as_dict())
            return out

    def import_(self, items: list, *, actor: str = "import") -> dict:
        """Import exported memories: each lands as ``candidate`` with ``source: import``.

        ``items``: dicts with at least ``type`` and ``body`` (``title``, ``id``, ``tags``,
        ``anchors``, ``creation_reason`` optional). The id is kept when it is a
        ULID not known here. Anchors whose entity this index does not hold are
        dropped with a warning. Each item is checked like any write (secrets,
        tombstones, duplicates); a refused item does not stop the others.
        Returns ``{"imported": [id], "refused": [{"index", "kind", "message", ...}]}``.
        """
        if not isinstance(items, list):
            raise bad_request("items must be a list of objects")
        imported, refused = [], []
        for index, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise bad_request("not an object")
                anchors = []
                warnings = []
                wanted = [a.get("entity") for a in item.get("anchors") or [] if isinstance(a, dict)]
                wanted = [a for a in wanted if isinstance(a, str) and a]
                known = self.code.hashes(wanted)
                for entity in wanted:
                    (anchors if entity in known else warnings).append(entity)
                candidate_id = item.get("id") if is_ulid(item.get("id")) else None
                if candidate_id and (self.projection.row(candidate_id) is not None
                                     or self.ledger.last_status(candidate_id) is not None):
                    candidate_id = None
                result = self.record(
                    str(item.get("type", "")), item.get("body") if isinstance(item.get("body"), str) else "",
                    title=item.get("title") if isinstance(item.get("title"), str) else None, anchors=anchors,
                    source="import", actor=actor, creation_reason=str(item.get("creation_reason") or "import"),
                    tags=[t for t in item.get("tags") or [] if isinstance(t, str)], entity_id=candidate_id,
                    created_at=item.get("created_at") if isinstance(item.get("created_at"), (int, float)) else None)
                imported.append(result["record"]["id"])
                if warnings:
                    refused.append({"index": index, "kind": "warning", "id": result["record"]["id"],
                                    "message": f"anchors dropped (not in this index): {', '.join(warnings)}"})
            except MemoryRefused as exc:
                refused.append({"index": index, "kind": exc.kind, "message": str(exc), **exc.data})
        return {"imported": imported, "refused": refused}

    # ---- the sync (hand edits, arrivals, anchors, vectors) -------------------------------------
    def sync(self) -> dict:
        """Scan the record files and carry every change through the lattice; check anchors.

        Cheap when nothing changed (one ``stat`` per file). Returns the scan's
        counts. See :mod:`cogd.memory.sync`.
        """
        with self._lock:
            recovered = self.recover()  # a write a crash interrupted is completed before any file is judged
            result = scan_files(self)
            result["recovered"] = recovered
            if result["changed"] or result["removed"] or recovered:
                self._uncommitted_dirty = True
            result["staled"] = self.check_anchors()
            self.last_sync_at = self.clock()
            return result

    def maybe_sync(self, interval_s: float = 1.0) -> dict | None:
        """:meth:`sync` at most once per ``interval_s`` (the daemon's housekeeping calls this every second);
        also embeds a few memories that have no vector yet."""
        now = time.monotonic()
        if now - self._last_sync < interval_s:
            return None
        self._last_sync = now
        result = self.sync()
        self.fill_vectors()
        dirty, self._uncommitted_dirty = self._uncommitted_dirty, False
        try:  # off the pack path: packs only read the cached count
            self.git_state.maybe_refresh(dirty)
        except Exception:  # noqa: BLE001 — a git problem must not stop the housekeeping
            log.exception("counting uncommitted memory files failed")
        return result

    def fill_vectors(self, batch: int = 16) -> int:
        """Embed up to ``batch`` memories that have no vector of the current model. Returns how many."""
        probe = self._vector("probe") if self.embed is not None else None
        if probe is None:
            return 0
        done = 0
        with self._lock:
            for row in self.projection.missing_vectors(probe[0], batch):
                got = self._vector(f"{row['title']}\n{row['body']}")
                if got is not None:
                    self.projection.set_vector(row["id"], got[0], got[1])
                    done += 1
        return done

    def check_anchors(self) -> int:
        """Active memories whose anchored entity changed (content hash) or vanished go ``stale``.

        Each through the lattice, with a ``stale`` event by actor ``daemon`` naming
        the entities. Runs only when the code index was refreshed or memories
        changed since the last check. Returns how many went stale.
        """
        rows = [r for r in self.projection.rows(status="active") if r["anchors"] not in ("", "[]")]
        mark = f"{self.code.meta('indexed_at')}|{self.code.commit()}|{len(rows)}|" + ",".join(
            sorted(f"{r['id']}:{r['updated_at']}" for r in rows))
        if mark == self._anchor_mark:
            return 0
        self._anchor_mark = mark
        if not rows or not self.code.index_db.exists():
            return 0
        anchors = {r["id"]: row_anchors(r) for r in rows}
        hashes = self.code.hashes([a.entity for items in anchors.values() for a in items])
        if not hashes and not self.code.meta("indexed_at"):
            return 0  # no index built yet: nothing can be judged
        # An entity missing from the index is gone only when its file is indexed without it or no
        # longer exists; a file not (re)indexed yet — a rebuild in progress — says nothing.
        missing_paths = {entity_path(a.entity) for items in anchors.values() for a in items if a.entity not in hashes}
        indexed = self.code.indexed_files(sorted(missing_paths))
        gone_paths = {p for p in missing_paths if p in indexed or not exists_in_tree(self.root, p)}
        staled = 0
        for row in rows:
            changed = [{"entity": a.entity, "was": a.hash, "now": hashes.get(a.entity)}
                       for a in anchors[row["id"]]
                       if (a.entity in hashes and hashes[a.entity] != a.hash)
                       or (a.entity not in hashes and entity_path(a.entity) in gone_paths)]
            if not changed:
                continue
            try:
                record, _ = self.load(row["id"])
            except MemoryRefused:
                continue  # a file with a pending problem is left to its owner
            action = lattice.transition("active", "stale", entity_id=row["id"])
            record.status = "stale"
            record.updated_at = self.clock()
            self.commit("stale", "daemon", [FileChange(record)],
                        [event_op("daemon", row["id"], action, "active", "stale", None, {"anchors": changed})])
            staled += 1
        if staled:
            self._anchor_mark = None
        return staled

    def mask_file_secrets(self, relpath: str, st):
        """Rewrite the record file at ``relpath`` with every secret in it masked; returns its (new) stat.

        A record file is committed to git, so a secret found in a hand-edited or arriving file is
        not left there for a person to notice: the file is rewritten (atomically) with each secret
        masked to its first characters and ``[secret:<kind>]`` — the raw text is masked, keeping the
        file's layout; when that leaves a field unclean (YAML escapes) or the text no longer parses
        the same, the parsed record is masked field by field and written again. A ``secret_masked``
        event (actor ``daemon``; kinds, lines, ≤ 4-character previews) and a warning in the daemon
        log say so. ``st``: the file's stat as the scan saw it. Files over ``MAX_FILE_BYTES`` and
        unreadable ones are left to the caller's checks.
        """
        path = self.memory_dir / relpath
        if st.st_size > MAX_FILE_BYTES:
            return st
        try:
            text = read_text(path)  # never through a link (the safe-path layer)
        except (OSError, UnicodeDecodeError):
            return st
        masked, findings = redact(text)
        record = None
        try:
            record = parse(masked)
        except RecordError:
            try:  # masking the raw text broke its layout (a key block YAML folded): mask field by field
                record, findings = parse(text), []
            except RecordError:
                pass  # a broken file is masked as text and reported by the scan as broken
        if record is not None:
            leftover = mask_record(record)
            if leftover:
                findings += leftover
                masked = serialise(record)
        if not findings:
            return st
        entity_id = record.id if record is not None else path.stem
        kinds = sorted({f.kind for f in findings})
        # through the intent like every write: a crash between the file and its event is completed
        # (the scan projects the record; a broken file's intent is dropped and the file masked again)
        self.commit("mask", "daemon", [FileChange(None, relpath, text=masked)], [
            event_op("daemon", entity_id, "secret_masked", None, None, None,
                     {"path": relpath, "findings": [f.as_dict() for f in findings]})])
        log.warning("%s held %d secret(s) (%s): rewritten with them masked", relpath, len(findings), ", ".join(kinds))
        return path.stat()

    def apply_file_state(self, record: Record, old_status: str | None, row, *, actor: str, relpath: str | None = None,
                         raise_errors: bool = False, write_text: str | None = None, arrival: bool = False) -> str:
        """Accept (or refuse) a record file's new state — the hand-edit path.

        ``record``: the parsed file. ``old_status``: the last legal status (projection row, or the
        ledger's last event after a rebuild; None for a record never seen). ``row``: the projection
        row or None. ``actor``: who the events name. ``relpath``: the file under ``.cogd/memory``
        (default: where the record belongs). ``write_text``: write this text to the file on
        success (``cogd memory edit``); None means the file already holds it. ``arrival``: a file
        the projection has not seen (a record never seen may arrive in any status, see
        :func:`cogd.memory.lattice.allowed`).
        On refusal the file is never rewritten: an event (``illegal_transition``
        or ``refused``) is appended, the problem is stored against the file (shown
        by ``cogd status``), and the projection keeps the last legal state; with
        ``raise_errors`` the MemoryRefused is raised instead of being recorded
        as a file problem (nothing is written). Returns the action name
        (``create``, ``edit``, ``reject`` … or ``unchanged``, or ``refused``).
        """
        relpath = relpath or record.relpath()
        try:
            action, body, text_changed = self._judge_file_state(record, old_status, row, arrival)
        except MemoryRefused as exc:
            if raise_errors:
                raise
            self._refuse_file_state(exc, record, old_status, actor, relpath)
            return "refused"
        if old_status == record.status and (row is None or not text_changed):
            action = "unchanged"  # a touch, a metadata edit, or a rebuilt projection re-reading a known record
        ops = self._file_state_ops(record, action, old_status, row, body, actor, relpath)
        if ops or write_text is not None:
            self.commit("edit" if write_text is not None else "accept_file", actor,
                        [FileChange(record, relpath, text=write_text, write=write_text is not None,
                                    text_changed=text_changed)], ops)
        else:
            self._project(record, text_changed=text_changed)
        st = (self.memory_dir / relpath).stat()
        self.projection.set_file(relpath, st.st_mtime_ns, st.st_size, record.id, None)
        self._anchor_mark = None
        return action

    def _judge_file_state(self, record: Record, old_status: str | None, row,
                          arrival: bool) -> tuple[str, str, bool]:
        """The checks a file's new state must pass: ``(lattice action, projected body, text changed)``.

        Raises MemoryRefused: ``illegal_transition`` (a purged record back, or a move the lattice
        refuses), ``bad_request`` (superseded without a successor, a body over :data:`BODY_MAX`),
        ``secret_detected``, ``tombstoned`` (a live record whose changed claim was rejected).
        """
        if old_status == "purged":
            raise MemoryRefused("illegal_transition", f"{record.id} was purged (erased) here: it cannot come back",
                               id=record.id, **{"from": "purged", "to": record.status, "allowed": []})
        action = lattice.transition(old_status, record.status, entity_id=record.id, arrival=arrival)
        if record.status == "superseded" and old_status not in (None, "superseded"):
            self._check_successor(record)
        body = strip_private(record.body).strip()
        if len(body) > BODY_MAX:  # the limit every other write path has (a hand edit must not bypass it)
            raise bad_request(f"the body is {len(body)} characters; at most {BODY_MAX}", id=record.id)
        chash = content_hash(body) if body else record.tombstone
        text_changed = row is None or row["content_hash"] != chash or row["title"] != record.title
        # Every field of the file, as it is written (private spans too: the file goes to git). The
        # sync masks a hand-edited file's secrets before it gets here; `cogd memory edit` is refused.
        self._check_secrets(*(text for _, text in free_text(record)))
        if record.status in lattice.LIVE and text_changed:
            self._check_tombstone(chash, record.id)
        return action, body, text_changed

    def _refuse_file_state(self, exc: MemoryRefused, record: Record, old_status: str | None, actor: str,
                           relpath: str) -> None:
        """Record a refused file state: an ``illegal_transition`` or ``refused`` event, and the problem
        (kind, message, fix) stored against the file; the file and the projection row stay as they are."""
        problem = {"kind": exc.kind, "id": record.id, "message": str(exc),
                   "fix": self._fix_hint(exc, old_status, record), **{k: v for k, v in exc.data.items()
                                                                   if k in ("from", "to", "allowed")}}
        self.ledger.append(actor, record.id, "illegal_transition" if exc.kind == "illegal_transition" else "refused",
                           old_status, record.status if exc.kind == "illegal_transition" else None, None,
                           {"path": relpath, "kind": exc.kind})
        st = (self.memory_dir / relpath).stat()
        self.projection.set_file(relpath, st.st_mtime_ns, st.st_size, record.id, problem)

    @staticmethod
    def _file_state_ops(record: Record, action: str, old_status: str | None, row, body: str, actor: str,
                        relpath: str) -> list:
        """The ledger ops of an accepted file state: a tombstone for a rejected or pruned claim, and
        the event of the move (none for ``unchanged``)."""
        ops = []
        if record.status in ("rejected", "pruned") and (record.tombstone or body):
            stone = record.tombstone or content_hash(body)
            ops.append(tombstone_op(stone, record.id, record.rejected_reason or f"{record.status} by hand edit",
                                    record.updated_at))
        if action != "unchanged":
            # updated_at stays what the file says even when a hand edit did not bump it: the projection
            # must be rebuildable from the files (`cogd reset`); the event below carries the edit's time.
            ops.append(event_op(actor, record.id, action, old_status, record.status, pre_image(row),
                                {"path": relpath, "via": "file"}))
        return ops

    def _check_successor(self, record: Record) -> None:
        """A hand edit into ``superseded`` must name its successor in ``superseded_by`` (as
        :meth:`supersede` does): a supersession without one would mean nothing, and cannot be undone.
        The successor is a memory of the same type known here, or its file is present (a ``git pull``
        brings both files at once, and the scan may read the superseded one first)."""
        successor = record.superseded_by.strip()
        ok = False
        if is_ulid(successor) and successor != record.id:
            row = self.projection.row(successor)
            ok = (row["type"] == record.type) if row is not None else \
                (self.memory_dir / FOLDERS[record.type] / f"{successor}.md").is_file()
        if not ok:
            raise bad_request(
                f"{record.id} is marked superseded, but superseded_by ({successor or 'empty'}) names no "
                f"{record.type} here; superseded cannot be undone, so it needs its successor",
                id=record.id, fix="set `superseded_by:` to the id of the memory that replaces it, or set "
                "`status:` back (or use `cogd memory supersede OLD_ID NEW_ID`)")

    @staticmethod
    def _fix_hint(exc: MemoryRefused, old_status: str | None, record: Record) -> str:
        if exc.kind == "illegal_transition":
            if old_status == "purged":
                return "delete the file (the memory was erased)"
            targets = exc.data.get("allowed") or []
            options = [old_status] + list(targets) if old_status else list(targets)
            return f"set `status:` back to {' or '.join(repr(s) for s in options if s)} in the file"
        if exc.kind == "secret_detected":
            return "remove the secret from the file (wrap private notes in <private>…</private>)"
        if exc.kind == "tombstoned":
            return f"this claim was rejected as {exc.data.get('id')}; delete the file or change the claim"
        return exc.fix or "fix the file"
