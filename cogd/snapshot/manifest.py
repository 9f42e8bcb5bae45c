"""The snapshot manifest: what a snapshot holds, and the checks every downloaded one must pass.

A manifest is a small JSON object at ``<repo-id>/<commit>/manifest.json`` in the store::

    {"format": 1, "repo_id": "<root commit>", "commit": "<commit>", "parents": ["<commit>", ...],
     "created_at": 1764620000.0, "cogd_version": "0.1.0", "schema_version": "2",
     "model": {"id": "minilm@…", "sha256": "…", "dim": 384, "text": "full", "max_tokens": 256} | null,
     "counts": {"files": n, "entities": n, "file_entities": n, "edges": n, "vectors": n},
     "files": [{"name": "index.db", "size": bytes, "sha256": "…",
                "parts": [{"object": "<sha256 of the stored bytes>", "size": stored bytes, "raw_size": bytes}]}]}

Everything in it comes from the store, so it is untrusted: :func:`parse` accepts only this
shape, file names from the fixed list :data:`FILE_NAMES` (never a path), object names of 64
hex digits, and sizes within the limits below; anything else raises :class:`SnapshotError`
naming the field. The object names are SHA-256 digests of the stored (compressed) bytes and
each file's ``sha256`` that of its assembled content, so a pull verifies both.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from cogd.errors import CogdError

FORMAT = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20
INDEX_FILE, VECTORS_FILE = "index.db", "vectors.db"
FILE_NAMES = (INDEX_FILE, VECTORS_FILE)  # the only names a snapshot may hold
PART_BYTES = 32 << 20  # uncompressed bytes per object: a killed pull resumes from the last whole object
MAX_PARTS = 4096
HEX64 = re.compile(r"^[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
COUNT_KEYS = ("files", "entities", "file_entities", "edges", "vectors")


class SnapshotError(CogdError):
    """A snapshot that cannot be used (kind ``snapshot``): malformed, unverifiable, incompatible or
    unreachable. ``message`` says which and why; the daemon falls back to a local build."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__("snapshot", message, fix)


def stored_bound(raw_size: int) -> int:
    """The most bytes zlib may turn ``raw_size`` bytes into (its worst case is 0.03 % plus a few
    bytes; RFC 1950/1951 stored blocks), with room to spare: larger stored objects are refused."""
    return raw_size + raw_size // 100 + 1024


@dataclass(frozen=True)
class Part:
    object: str  # sha256 of the stored (zlib) bytes: the object's name in the store
    size: int  # stored bytes
    raw_size: int  # bytes after decompression


@dataclass(frozen=True)
class FileEntry:
    name: str  # one of FILE_NAMES
    size: int  # bytes of the assembled file
    sha256: str  # of the assembled file
    parts: tuple[Part, ...]


@dataclass
class Manifest:
    repo_id: str
    commit: str
    parents: list[str]
    created_at: float
    cogd_version: str
    schema_version: str
    model: dict | None  # {"id", "sha256", "dim", "text", "max_tokens"} when vectors are included
    counts: dict[str, int]
    files: list[FileEntry] = field(default_factory=list)
    format: int = FORMAT

    def file(self, name: str) -> FileEntry | None:
        """The entry of file ``name``, or None when the snapshot does not hold it."""
        return next((f for f in self.files if f.name == name), None)

    @property
    def total_bytes(self) -> int:
        """Uncompressed bytes of every file."""
        return sum(f.size for f in self.files)

    @property
    def stored_bytes(self) -> int:
        """Stored (compressed) bytes of every object."""
        return sum(p.size for f in self.files for p in f.parts)

    def to_json(self) -> bytes:
        """The manifest as UTF-8 JSON, keys sorted (the same manifest gives the same bytes)."""
        data = asdict(self)
        return json.dumps(data, sort_keys=True, indent=1).encode("utf-8")


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise SnapshotError(f"manifest rejected: {what}")


def _int(value: object, what: str, upper: int) -> int:
    _need(type(value) is int and 0 <= value <= upper, f"{what} must be an integer in 0..{upper}, got {value!r}"[:200])
    return value  # type: ignore[return-value]


def _parse_model(raw: object) -> dict | None:
    if raw is None:
        return None
    _need(isinstance(raw, dict), "model must be an object or null")
    assert isinstance(raw, dict)
    ok = (isinstance(raw.get("id"), str) and 0 < len(raw["id"]) <= 200 and isinstance(raw.get("sha256"), str)
          and HEX64.match(raw["sha256"]) is not None and isinstance(raw.get("text"), str) and len(raw["text"]) <= 40)
    _need(ok, "model needs id, sha256 (64 hex digits) and text")
    return {"id": raw["id"], "sha256": raw["sha256"], "dim": _int(raw.get("dim"), "model.dim", 65536),
            "text": raw["text"], "max_tokens": _int(raw.get("max_tokens"), "model.max_tokens", 1 << 20)}


def _parse_file(raw: object, max_bytes: int) -> FileEntry:
    _need(isinstance(raw, dict), "a files entry must be an object")
    assert isinstance(raw, dict)
    name = raw.get("name")
    _need(name in FILE_NAMES, f"file name must be one of {', '.join(FILE_NAMES)}, got {str(name)[:80]!r}")
    size = _int(raw.get("size"), f"{name}.size", max_bytes)
    _need(isinstance(raw.get("sha256"), str) and HEX64.match(raw["sha256"]) is not None, f"{name}.sha256 must be 64 hex digits")
    parts_raw = raw.get("parts")
    _need(isinstance(parts_raw, list) and len(parts_raw) <= MAX_PARTS, f"{name}.parts must be a list of at most {MAX_PARTS}")
    parts = []
    for p in parts_raw:
        _need(isinstance(p, dict) and isinstance(p.get("object"), str) and HEX64.match(p["object"]) is not None,
              f"{name}: a part's object must be 64 hex digits")
        raw_size = _int(p.get("raw_size"), f"{name} part raw_size", PART_BYTES)
        parts.append(Part(p["object"], _int(p.get("size"), f"{name} part size", stored_bound(raw_size)), raw_size))
    _need(sum(p.raw_size for p in parts) == size, f"{name}: its parts do not add up to its size")
    return FileEntry(name, size, raw["sha256"], tuple(parts))


def parse(data: bytes, *, max_bytes: int, repo_id: str | None = None, commit: str | None = None) -> Manifest:
    """The manifest in ``data`` (the bytes read from the store), checked field by field.

    ``max_bytes``: the largest total uncompressed size accepted; ``repo_id``/``commit``: what the
    manifest must say it is (it was read from that folder). Raises :class:`SnapshotError` naming
    the first field that is wrong. Does not judge compatibility (:func:`cogd.snapshot.pull.refusal`).
    """
    _need(len(data) <= MAX_MANIFEST_BYTES, f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SnapshotError(f"manifest rejected: not JSON ({exc})"[:300]) from exc
    _need(isinstance(raw, dict), "not a JSON object")
    _need(raw.get("format") == FORMAT, f"format {str(raw.get('format'))[:20]!r}, this cogd reads format {FORMAT}")
    for key in ("repo_id", "commit"):
        _need(isinstance(raw.get(key), str) and COMMIT.match(raw[key]) is not None, f"{key} must be a commit name")
    _need(repo_id is None or raw["repo_id"] == repo_id, f"it belongs to repository {raw['repo_id'][:12]}, not {str(repo_id)[:12]}")
    _need(commit is None or raw["commit"] == commit, f"it describes commit {raw['commit'][:12]}, not {str(commit)[:12]}")
    parents = raw.get("parents")
    _need(isinstance(parents, list) and len(parents) <= 64 and all(isinstance(p, str) and COMMIT.match(p) for p in parents),
          "parents must be a list of commit names")
    _need(isinstance(raw.get("schema_version"), str) and len(raw["schema_version"]) <= 20, "schema_version must be a string")
    _need(isinstance(raw.get("cogd_version"), str) and len(raw["cogd_version"]) <= 40, "cogd_version must be a string")
    _need(type(raw.get("created_at")) in (int, float), "created_at must be a number")
    counts = raw.get("counts")
    _need(isinstance(counts, dict), "counts must be an object")
    files_raw = raw.get("files")
    _need(isinstance(files_raw, list) and 0 < len(files_raw) <= len(FILE_NAMES), "files must list the snapshot's files")
    files = [_parse_file(f, max_bytes) for f in files_raw]
    names = [f.name for f in files]
    _need(len(set(names)) == len(names) and INDEX_FILE in names, "files must hold index.db, each name once")
    _need(sum(f.size for f in files) <= max_bytes, f"larger than the limit of {max_bytes} bytes (snapshot.max_mb)")
    model = _parse_model(raw.get("model"))
    _need((model is None) == (VECTORS_FILE not in names), "vectors.db and model come together")
    return Manifest(raw["repo_id"], raw["commit"], list(parents), float(raw["created_at"]), raw["cogd_version"],
                    raw["schema_version"], model, {k: _int(counts.get(k), f"counts.{k}", 1 << 40) for k in COUNT_KEYS},
                    files)
