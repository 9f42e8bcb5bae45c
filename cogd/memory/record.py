"""One memory record: a markdown file with YAML frontmatter.

```
---
id: 01JD6Y0M7Q3V9S2W1T0R8K4N5P
type: observation
title: parse_date returns naive datetimes
status: candidate
created_at: '2026-11-30T10:12:00Z'
...
---

The body: the claim itself, in markdown.
```

Known keys are listed in :data:`KNOWN_KEYS`; every other key is kept, in its
order, and written back on rewrite. Writes are atomic (:func:`atomic_write`):
a temporary file in the same folder, fsync, rename, fsync of the folder, so a
kill at any moment leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ulid import ULID

from cogd import safepath
from cogd.memory.vocabulary import FOLDERS, TYPES  # noqa: F401 (re-exported for the record's users)

SOURCES = ("agent", "human", "consolidation", "import")
TITLE_MAX = 200
# A record file larger than this is not read at all (a body holds at most 100,000 characters:
# ``api.BODY_MAX``). Reading, hashing and secret-scanning a 50 MB file held the store's lock for
# minutes, so every memory request — and the daemon's housekeeping — waited behind it.
MAX_FILE_BYTES = 1 << 20

# In the order they are written (docs/memory.md describes each). ``tombstone`` (normalised-content
# hash) and ``rejected_reason`` are written only on rejected and pruned records.
KNOWN_KEYS = (
    "id", "type", "title", "status", "created_at", "updated_at", "valid_from_commit", "source",
    "creation_reason", "session_id", "anchors", "supersedes", "superseded_by", "tags",
    "rejected_reason", "tombstone",
)


class RecordError(ValueError):
    """A record file that cannot be read: ``line`` and ``column`` are 1-based (0 when unknown).

    ``kind``: ``broken_frontmatter``, or ``too_large`` for a file over :data:`MAX_FILE_BYTES`.
    """

    def __init__(self, message: str, line: int = 0, column: int = 0, kind: str = "broken_frontmatter"):
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"{where}{message}")
        self.message = message
        self.line = line
        self.column = column
        self.kind = kind


def new_id() -> str:
    """A fresh ULID as its 26-character Crockford base32 string."""
    return str(ULID())


def is_ulid(value: object) -> bool:
    if not isinstance(value, str) or len(value) != 26:
        return False
    try:
        ULID.from_str(value)
    except ValueError:
        return False
    return True


def iso(ts: float) -> str:
    """Unix seconds → ``2026-11-30T10:12:00.123456Z`` (UTC)."""
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> float | None:
    """An ISO 8601 string (or a YAML timestamp) → unix seconds; None when absent or unreadable."""
    if isinstance(value, _dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
        return moment.timestamp()
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip():
        text = value.strip().replace("Z", "+00:00")
        try:
            moment = _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
        return (moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)).timestamp()
    return None


@dataclass
class Anchor:
    """A code entity id and its content hash when the memory was written (or last verified)."""

    entity: str
    hash: str

    def as_dict(self) -> dict:
        return {"entity": self.entity, "hash": self.hash}


@dataclass
class Record:
    """A memory record. Times are unix seconds (written to the file as ISO 8601 UTC)."""

    id: str
    type: str
    title: str
    status: str
    body: str
    created_at: float
    updated_at: float
    source: str = "agent"
    valid_from_commit: str = ""
    creation_reason: str = ""
    session_id: str = ""
    anchors: list[Anchor] = field(default_factory=list)
    supersedes: str = ""
    superseded_by: str = ""
    tags: list[str] = field(default_factory=list)
    rejected_reason: str = ""
    tombstone: str = ""
    extra: dict = field(default_factory=dict)  # unknown frontmatter keys, kept as read

    @property
    def text(self) -> str:
        """Title and body, as one string (what the secret scan and the pre-image cover)."""
        return f"{self.title}\n\n{self.body}" if self.body else self.title

    def relpath(self) -> str:
        """Where the record lives under ``.cogd/memory/``: ``observations/<id>.md``."""
        return f"{FOLDERS[self.type]}/{self.id}.md"

    def frontmatter(self) -> dict:
        data: dict = {
            "id": self.id, "type": self.type, "title": self.title, "status": self.status,
            "created_at": iso(self.created_at), "updated_at": iso(self.updated_at),
            "valid_from_commit": self.valid_from_commit, "source": self.source,
            "creation_reason": self.creation_reason, "session_id": self.session_id,
            "anchors": [a.as_dict() for a in self.anchors],
            "supersedes": self.supersedes, "superseded_by": self.superseded_by, "tags": list(self.tags),
        }
        if self.rejected_reason:
            data["rejected_reason"] = self.rejected_reason
        if self.tombstone:
            data["tombstone"] = self.tombstone
        for key, value in self.extra.items():
            if key not in data:
                data[key] = value
        return data

    def as_dict(self) -> dict:
        """JSON-safe: the frontmatter with unix-second times, plus ``body``."""
        data = self.frontmatter()
        data["created_at"] = self.created_at
        data["updated_at"] = self.updated_at
        data["body"] = self.body
        return data


def _str(data: dict, key: str, line_of: dict, default: str = "") -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise RecordError(f"{key} must be a string", line_of.get(key, 0), 1)


def _key_lines(lines: list[str]) -> dict[str, int]:
    """Top-level frontmatter key → its 1-based line in the file (for error messages)."""
    found = {}
    for number, line in enumerate(lines, start=2):
        if line and not line[0].isspace() and ":" in line:
            found.setdefault(line.split(":", 1)[0].strip(), number)
    return found


def split(text: str) -> tuple[str, str, int]:
    """``(frontmatter YAML, body, body start line)``; RecordError when there is no frontmatter block."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        raise RecordError("the file must start with a '---' line opening the YAML frontmatter", 1, 1)
    for number in range(1, len(lines)):
        if lines[number].rstrip("\r") in ("---", "..."):
            front = "\n".join(line.rstrip("\r") for line in lines[1:number])
            body = "\n".join(line.rstrip("\r") for line in lines[number + 1:])
            return front, body.strip("\n"), number + 2
    raise RecordError("the frontmatter is never closed by a '---' line", len(lines), 1)


class _RecordLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases.

    ``*name`` makes a node share another's value, so nine lines of nested
    aliases under an unknown key (``b: &b [*a, *a, …]``) stand for hundreds of
    millions of strings: small on disk, but every walk over the frontmatter
    (the secret scan of each field, the JSON of the projection) visits them
    all, and a 429-byte committed file held ``cogd memory list`` for minutes.
    cogd never writes an alias (:class:`_Dumper`), so a record holding one was
    crafted or hand-made: it is refused as broken frontmatter, with its line.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a memory record", mark)
        return super().compose_node(parent, index)


def parse(text: str) -> Record:
    """Read one record file's text. Raises RecordError with 1-based line and column.

    Checks: frontmatter present and a YAML mapping; ``id`` a ULID; ``type``
    and ``status`` known values; ``title`` present; ``anchors`` a list of
    ``{entity, hash}``; ``tags`` a list of strings. Unknown keys go to
    ``Record.extra``.
    """
    from cogd.memory.lattice import STATUSES

    front, body, _ = split(text)
    try:
        data = yaml.load(front, Loader=_RecordLoader) if front.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if mark is not None:
            raise RecordError(f"YAML: {problem}", mark.line + 2, mark.column + 1) from None
        raise RecordError(f"YAML: {problem}", 2, 1) from None
    if not isinstance(data, dict):
        raise RecordError("the frontmatter must be a mapping of keys to values", 2, 1)
    line_of = _key_lines(front.split("\n"))
    for key in ("id", "type", "title", "status"):
        if data.get(key) in (None, ""):
            raise RecordError(f"missing required key {key!r}", line_of.get(key, 2), 1)
    entity_id = _str(data, "id", line_of)
    if not is_ulid(entity_id):
        raise RecordError(f"id must be a ULID (26 characters of Crockford base32), got {entity_id!r}",
                          line_of.get("id", 2), 1)
    kind = _str(data, "type", line_of)
    if kind not in TYPES:
        raise RecordError(f"type must be one of {', '.join(TYPES)}, got {kind!r}", line_of.get("type", 2), 1)
    status = _str(data, "status", line_of)
    if status not in STATUSES:
        raise RecordError(f"status must be one of {', '.join(STATUSES)}, got {status!r}",
                          line_of.get("status", 2), 1)
    anchors_raw = data.get("anchors") or []
    if not isinstance(anchors_raw, list):
        raise RecordError("anchors must be a list of {entity, hash}", line_of.get("anchors", 2), 1)
    anchors = []
    for item in anchors_raw:
        if not isinstance(item, dict) or not isinstance(item.get("entity"), str):
            raise RecordError("each anchor must be a mapping with 'entity' and 'hash'", line_of.get("anchors", 2), 1)
        anchors.append(Anchor(item["entity"], str(item.get("hash") or "")))
    tags_raw = data.get("tags") or []
    if not isinstance(tags_raw, list) or not all(isinstance(t, (str, int, float)) for t in tags_raw):
        raise RecordError("tags must be a list of strings", line_of.get("tags", 2), 1)
    source = _str(data, "source", line_of, "human") or "human"
    now = None
    created = parse_time(data.get("created_at"))
    updated = parse_time(data.get("updated_at"))
    if created is None or updated is None:
        import time

        now = time.time()
    return Record(
        id=entity_id, type=kind, title=_str(data, "title", line_of)[:TITLE_MAX], status=status, body=body,
        created_at=created if created is not None else now, updated_at=updated if updated is not None else (created or now),
        source=source, valid_from_commit=_str(data, "valid_from_commit", line_of),
        creation_reason=_str(data, "creation_reason", line_of), session_id=_str(data, "session_id", line_of),
        anchors=anchors, supersedes=_str(data, "supersedes", line_of),
        superseded_by=_str(data, "superseded_by", line_of), tags=[str(t) for t in tags_raw],
        rejected_reason=_str(data, "rejected_reason", line_of), tombstone=_str(data, "tombstone", line_of),
        extra={k: v for k, v in data.items() if k not in KNOWN_KEYS},
    )


def free_text(record: Record) -> list[tuple[str, str]]:
    """Every string a record carries into its file, as ``(field, text)``: title, body, provenance,
    tags, anchors (entity and hash), links, rejection, and every string inside unknown keys. What the
    secret scan covers: a record file is committed to git, so no field may hold a credential."""
    fields = [("title", record.title), ("body", record.body), ("creation_reason", record.creation_reason),
              ("session_id", record.session_id), ("source", record.source),
              ("valid_from_commit", record.valid_from_commit), ("supersedes", record.supersedes),
              ("superseded_by", record.superseded_by), ("rejected_reason", record.rejected_reason),
              ("tombstone", record.tombstone)]
    fields += [("tags", tag) for tag in record.tags]
    for anchor in record.anchors:
        fields += [("anchors", anchor.entity), ("anchors", anchor.hash)]

    def walk(key: str, value) -> None:
        if isinstance(value, str):
            fields.append((key, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(key, str(k))
                walk(key, v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(key, v)
        elif value is not None and not isinstance(value, (bool, int, float)):
            fields.append((key, str(value)))  # a YAML date or other scalar, as it will be written back

    for key, value in record.extra.items():
        walk(str(key), key)
        walk(str(key), value)
    return [(name, text) for name, text in fields if text]


def mask_record(record: Record) -> list:
    """Mask every secret in every field of ``record`` in place (:func:`cogd.secrets.redact`).

    Returns the findings (``cogd.secrets.Finding``), each field's own; [] when the record was clean.
    """
    from cogd.secrets import mask_data, redact

    found: list = []

    def clean(text: str) -> str:
        masked, hits = redact(text)
        found.extend(hits)
        return masked

    for name in ("title", "body", "creation_reason", "session_id", "source", "valid_from_commit", "supersedes",
                 "superseded_by", "rejected_reason", "tombstone"):
        setattr(record, name, clean(getattr(record, name)))
    record.tags = [clean(t) for t in record.tags]
    record.anchors = [Anchor(clean(a.entity), clean(a.hash)) for a in record.anchors]
    if record.extra:
        record.extra, hits = mask_data(record.extra)
        found.extend(hits)
    return found


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # noqa: ARG002 — a shared value is written out again: the loader refuses aliases
        return True


def _str_presenter(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def serialise(record: Record) -> str:
    """The file text for ``record``: frontmatter, a blank line, the body, a final newline."""
    front = yaml.dump(record.frontmatter(), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                      default_flow_style=False, width=100)
    body = record.body.strip("\n")
    return f"---\n{front}---\n\n{body}\n" if body else f"---\n{front}---\n"


def atomic_write(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` (UTF-8; bytes as they are) atomically: temp file, fsync, rename,
    fsync the folder.

    The temporary file is ``.<name>.<random>.tmp`` in the same folder (the scan
    ignores dot files). Raises OSError; on failure the old file is untouched.
    """
    safepath.check_chain(path.parent, create=True)  # a link here would write outside .cogd/
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8") if isinstance(text, str) else text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_text(path: Path) -> str:
    """The UTF-8 text of the record file at ``path``, never through a symbolic link (cogd.safepath).

    Raises OSError (FileNotFoundError; :class:`cogd.safepath.UnsafePath` for a link or another
    user's file) and UnicodeDecodeError.
    """
    data = safepath.read_bytes(path, MAX_FILE_BYTES + 1)
    if data is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    return data.decode("utf-8")


def read(path: Path) -> Record:
    """Parse the record at ``path``. Raises RecordError (also for undecodable bytes, and ``too_large``
    for a file over :data:`MAX_FILE_BYTES`, which is never read past that size) or OSError."""
    data = safepath.read_bytes(path, MAX_FILE_BYTES + 1)  # a link to ~/.ssh/... is refused, not read
    if data is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if len(data) > MAX_FILE_BYTES:
        raise RecordError(f"the file is larger than {MAX_FILE_BYTES} bytes (a memory's body holds at most "
                          "100,000 characters)", kind="too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8 text (byte {exc.start})", 1, 1) from None
    return parse(text)
