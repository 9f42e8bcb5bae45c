"""What the snapshot tests share: repositories at two commits, a projection read for comparison,
and crafting a snapshot the way a hostile store could (re-cut, re-checksummed, manifest rewritten)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from conftest import STDLIB, git, make_repo, write

PACKAGE = "json"  # a small real package of the standard library: a handful of files, a few hundred entities


def config_text(uri: str, *, embed: str = "enabled = false", extra: str = "") -> str:
    return f'[embed]\n{embed}\n[snapshot]\nuri = "{uri}"\n{extra}'


def make_history(root: Path, config: str) -> tuple[str, str]:
    """A repository with commits A and its child B (an edited function, a deleted file, a new
    file); returns ``(A, B)`` and leaves HEAD at A. The config is committed, as a team would."""
    shutil.copytree(STDLIB / PACKAGE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    write(root, ".cogd/config.toml", config)
    make_repo(root)
    a = git(root, "rev-parse", "HEAD").strip()
    decoder = root / PACKAGE / "decoder.py"
    decoder.write_text(decoder.read_text().replace("def py_scanstring(", "def py_scanstring_renamed(", 1))
    git(root, "rm", "-q", f"{PACKAGE}/tool.py")
    write(root, f"{PACKAGE}/extra.py", "def fresh_helper(value):\n    \"\"\"Only at B.\"\"\"\n    return value * 2\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "B")
    b = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", a)
    return a, b


def clone_at(src: Path, dest: Path, commit: str) -> Path:
    git(dest.parent, "clone", "-q", str(src), dest.name)
    git(dest, "checkout", "-q", commit)
    return dest


def projection(root: Path) -> dict:
    """The index projection as comparable sets: entities, edges, refs, FTS rows (by entity id),
    files (without stat times)."""
    conn = sqlite3.connect(f"file:{root / '.cogd/index/index.db'}?mode=ro", uri=True)
    try:
        return {
            "entities": set(conn.execute(
                "SELECT id, kind, subkind, path, name, qualname, start_line, end_line, language, signature, doc, "
                "hash, parent_id FROM entities")),
            "edges": set(conn.execute("SELECT src, dst, kind, path, resolution FROM edges")),
            "refs": sorted(conn.execute("SELECT path, src, kind, name, qualifier, alias, line FROM refs")),
            "fts": set(conn.execute("SELECT e.id, f.path, f.name, f.signature, f.doc, f.body FROM entities e "
                                    "JOIN entities_fts f ON f.rowid = e.rowid")),
            "fts_rows": conn.execute("SELECT count(*) FROM entities_fts").fetchone()[0],
            "files": set(conn.execute("SELECT path, language, hash, size, status FROM files")),
            "commit": conn.execute("SELECT value FROM meta WHERE key = 'commit'").fetchone()[0],
        }
    finally:
        conn.close()


def store_dir(store: Path, repo: Path, commit: str) -> Path:
    """The folder of ``commit``'s snapshot in a file:// store (repo id = the root commit)."""
    rid = git(repo, "rev-list", "--max-parents=0", "HEAD").split()[0]
    return store / rid / commit


def rewrite_manifest(folder: Path, change) -> None:
    """Apply ``change(manifest dict)`` to the manifest in ``folder`` (as a hostile store could)."""
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def recut_index(folder: Path, tamper) -> None:
    """Replace the snapshot's index.db by ``tamper(path to a copy)``'s result, with correct
    objects and checksums: what a store controlled by someone else can serve."""
    from cogd.snapshot.publish import _cut

    data = json.loads((folder / "manifest.json").read_text())
    entry = next(f for f in data["files"] if f["name"] == "index.db")
    work = folder.parent / "tamper"
    shutil.rmtree(work, ignore_errors=True)
    (work / "objects").mkdir(parents=True)
    raw = b"".join(_unpack(folder / "objects" / p["object"]) for p in entry["parts"])
    (work / "index.db").write_bytes(raw)
    tamper(work / "index.db")
    digest, parts = _cut(work / "index.db", work / "objects")
    for part in parts:
        shutil.copy(work / "objects" / part.object, folder / "objects" / part.object)
    entry.update(size=(work / "index.db").stat().st_size, sha256=digest,
                 parts=[{"object": p.object, "size": p.size, "raw_size": p.raw_size} for p in parts])
    (folder / "manifest.json").write_text(json.dumps(data))
    shutil.rmtree(work)


def _unpack(path: Path) -> bytes:
    import zlib

    return zlib.decompress(path.read_bytes())
