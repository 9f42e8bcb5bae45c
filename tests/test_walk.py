"""Which files get indexed, and how the awkward ones are handled.

Each test is a case from a real bug report against code indexers: ignore files
that only half work, loops through symlinks, minified bundles, odd encodings,
ghosts of deleted files, parses that never end. Real git repositories, real
walks, real tree-sitter, real SQLite.
"""

from __future__ import annotations

import codecs
import importlib.util
import logging
import marshal
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import STDLIB, WAIT_S, git, make_repo, write
from cogd.config import load_config
from cogd.index import store
from cogd.index.extract import content_hash
from cogd.index.indexer import Indexer
from cogd.index.sources import list_source_files
from cogd.retrieve.lexical import bm25_search



def plain_tree(tmp_path: Path, monkeypatch, files: dict[str, str | bytes]) -> Path:
    """A directory outside any git repository, holding ``files``."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "plain"
    root.mkdir()
    for rel, content in files.items():
        write(root, rel, content)
    return root


def index(root: Path, db: Path) -> tuple[Indexer, dict]:
    ix = Indexer(root, db)
    return ix, ix.refresh().as_dict()


def ids(conn, path: str) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM entities WHERE path = ? ORDER BY id", (path,))]


def spans(conn, path: str) -> list[tuple]:
    return [tuple(r) for r in conn.execute(
        "SELECT qualname, kind, start_line, end_line FROM entities WHERE path = ? ORDER BY start_line, qualname",
        (path,))]


def status(conn, path: str) -> str | None:
    row = conn.execute("SELECT status FROM files WHERE path = ?", (path,)).fetchone()
    return row[0] if row else None


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


APP_PY = '''"""The storefront."""


def render_widget(widget_id):
    """Render one widget of the storefront page."""
    return f"<div id={widget_id}></div>"
'''


def minified_bundle(functions: int) -> str:
    """One line of JavaScript, the way a minifier writes a vendored library."""
    body = ";".join(f"function widgetRender{i}(a,b){{return a.widget(b+{i})}}" for i in range(functions))
    return f"/*! widgets v3.2.1 | MIT */!function(w){{{body}}}(window);"


# --------------------------------------------------------------------------- ignore files

def test_nested_gitignore_and_a_vendored_bundle_outside_git(tmp_path, monkeypatch):
    """Outside git, nested .gitignore files rule their own directory, and a
    vendored minified bundle that nobody ignores does not flood the results."""
    root = plain_tree(tmp_path, monkeypatch, {
        ".gitignore": "*.log.py\n*.gen.js\n",
        "app/main.py": APP_PY,
        "app/debug.log.py": "def noise():\n    pass\n",  # root pattern, applied in a subdirectory
        "web/.gitignore": "dist/\ngenerated.js\n",  # relative to web/
        "web/app.js": "export function mountWidgets(root) {\n  return root;\n}\n",
        "web/generated.js": "function generatedWeb() {}\n",
        "web/dist/bundle.js": "function distributed() {}\n",
        "web/src/.gitignore": "!keep.gen.js\n",  # a deeper rule overrides a shallower one
        "web/src/keep.gen.js": "function keptGenerated() {}\n",
        "web/src/other.gen.js": "function otherGenerated() {}\n",
        "generated.js": "function rootGenerated() {}\n",  # web/'s pattern does not reach up here
        "vendor/widgets.min.js": minified_bundle(3000),
        "node_modules/widgets/index.js": "function fromNodeModules() {}\n",
        ".cache/stale.py": "def stale():\n    pass\n",
        ".cogd/index/stray.py": "def inside_cogd():\n    pass\n",
    })
    assert list_source_files(root) == [
        "app/main.py", "generated.js", "vendor/widgets.min.js", "web/app.js", "web/src/keep.gen.js",
    ]
    ix, result = index(root, tmp_path / "index.db")
    try:
        assert result["skipped"] == {"minified": 1}
        assert status(ix.conn, "vendor/widgets.min.js") == "minified"
        assert ids(ix.conn, "vendor/widgets.min.js") == ["vendor/widgets.min.js"]  # findable by path only
        hits = bm25_search(ix.conn, "render widget")
        assert hits[0].id == "app/main.py::render_widget"
        assert [h.id for h in hits if h.path.startswith("vendor/")] == ["vendor/widgets.min.js"]  # one, not 3,000
        assert store.counts(ix.conn)["entities"] == 4  # render_widget, mountWidgets, keptGenerated, rootGenerated
    finally:
        ix.close()


def test_anchored_pattern_does_not_match_a_nested_directory(tmp_path, monkeypatch):
    """``/build`` in a .gitignore (or .cogdignore) means the top-level build/ only."""
    files = {
        "build/gen.py": "def generated():\n    pass\n",
        "src/build/helpers.py": "def build_helper():\n    pass\n",
        "src/main.py": "def main():\n    pass\n",
    }
    root = plain_tree(tmp_path, monkeypatch, {".gitignore": "/build\n", **files})
    assert list_source_files(root) == ["src/build/helpers.py", "src/main.py"]

    repo = make_repo(tmp_path / "repo", {".cogdignore": "/build\n", **files})  # tracked, yet excluded
    assert list_source_files(repo) == ["src/build/helpers.py", "src/main.py"]


def test_cogdignore_in_a_git_repository(tmp_path):
    """.cogdignore excludes tracked and untracked files git itself would index,
    nested .cogdignore files are relative to their directory, and adding one
    drops files already in the index."""
    repo = make_repo(tmp_path / "repo", {
        "src/app.py": APP_PY,
        "src/generated/api_pb2.py": "class CheckoutRequest:\n    pass\n",
        "third_party/vendored.py": "def vendored_helper():\n    pass\n",
        "pkg/models.py": "class Order:\n    pass\n",
        "pkg/models_generated.py": "class OrderGenerated:\n    pass\n",
        "pkg/keep_generated.py": "class KeptGenerated:\n    pass\n",
        "tests/fixtures/broken.py": "def fixture_only(:\n",
        "tests/test_app.py": "def test_render():\n    pass\n",
    })
    write(repo, "src/generated/untracked_pb2.py", "class Untracked:\n    pass\n")  # untracked, not gitignored
    ix = Indexer(repo, tmp_path / "index.db")
    try:
        ix.refresh()
        assert "third_party/vendored.py::vendored_helper" in ids(ix.conn, "third_party/vendored.py")

        # .cogdignore files are personal here: git ignores them, cogd still reads them.
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "exclude").write_text(".cogdignore\n")
        write(repo, ".cogdignore", "third_party/\n**/generated/\n")
        write(repo, "pkg/.cogdignore", "*_generated.py\n!keep_generated.py\n")
        write(repo, "tests/.cogdignore", "fixtures/\n")
        assert "cogdignore" not in git(repo, "ls-files", "--others", "--exclude-standard")
        expected = ["pkg/keep_generated.py", "pkg/models.py", "src/app.py", "tests/test_app.py"]
        assert list_source_files(repo) == expected

        result = ix.refresh()
        assert result.removed == 5
        assert sorted(store.known_files(ix.conn)) == expected
        assert bm25_search(ix.conn, "vendored helper") == []
        assert bm25_search(ix.conn, "checkout request") == []
        hits = bm25_search(ix.conn, "generated", kinds=("class",))
        assert [h.id for h in hits] == ["pkg/keep_generated.py::KeptGenerated"]
    finally:
        ix.close()


@pytest.mark.parametrize("mode", ["plain", "git"])
def test_directory_symlink_to_its_parent_terminates(tmp_path, monkeypatch, mode):
    """A symlink back up the tree must not send the walk round in circles, and
    a file reached twice (through a link) is indexed once."""
    outside = write(tmp_path / "elsewhere", "shared.py", "def shared_outside():\n    pass\n")
    files = {"a.py": "def top():\n    pass\n", "pkg/mod.py": "def inner():\n    pass\n"}
    if mode == "plain":
        root = plain_tree(tmp_path, monkeypatch, files)
    else:
        root = make_repo(tmp_path / "repo", files, commit=False)
    os.symlink("..", root / "pkg" / "loop")  # pkg/loop/pkg/loop/... for ever
    os.symlink(".", root / "pkg" / "self")
    os.symlink("a.py", root / "alias.py")  # the same file under a second name
    os.symlink(outside, root / "outside.py")  # a file from outside the tree: never read (tests/test_boundary.py)
    if mode == "git":
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "links")

    started = time.monotonic()
    assert list_source_files(root) == ["a.py", "pkg/mod.py"]
    ix, result = index(root, tmp_path / "index.db")
    try:
        # The exact lists prove the cycles were not followed; this only turns a walk that
        # loops into a failure rather than a hang (generous: not a latency test).
        assert time.monotonic() - started < WAIT_S
        assert result["parsed"] == 3 and result["skipped"] == {"symlink_outside": 1}
        functions = [r[0] for r in ix.conn.execute("SELECT id FROM entities WHERE kind = 'function' ORDER BY id")]
        assert functions == ["a.py::top", "pkg/mod.py::inner"]
    finally:
        ix.close()


# --------------------------------------------------------------------------- skip reasons

def test_minified_files_do_not_stall_an_otherwise_normal_tree(stdlib_template, tmp_path):
    """A 2 MB one-line bundle and a module with a 200 KB line: both kept by
    path only, everything else indexed, and quickly."""
    repo = tmp_path / "repo"
    shutil.copytree(stdlib_template, repo, symlinks=True)
    normal = list_source_files(repo)
    bundle = minified_bundle(40_000)
    assert len(bundle) > 2_000_000 and "\n" not in bundle
    write(repo, "static/app.min.js", bundle)
    table = "".join(f"\\u{i:04x}" for i in range(0x100, 0x100 + 200_000 // 6))
    module = (
        '"""Generated lookup table."""\n\n\n'
        "def lookup(ch):\n    return TABLE.get(ch)\n\n\n"
        f'TABLE = dict(enumerate("{table}"))\n\n\n'
        "def reverse_lookup(value):\n    return {v: k for k, v in TABLE.items()}[value]\n"
    )
    assert max(len(line) for line in module.splitlines()) > 200_000
    write(repo, "tables/unicode_table.py", module)

    started = time.monotonic()
    ix, result = index(repo, tmp_path / "index.db")
    elapsed = time.monotonic() - started
    try:
        # The skip statuses and spans below prove that neither file was parsed; the bound only
        # catches a stall (a tokenizer crawling through the 2 MB line), generously.
        assert elapsed < WAIT_S, f"index took {elapsed:.1f} s"
        assert result["skipped"] == {"minified": 2}
        assert result["parsed"] == len(normal) + 2
        rows = {r["path"]: r["status"] for r in ix.conn.execute("SELECT path, status FROM files")}
        assert rows.pop("static/app.min.js") == rows.pop("tables/unicode_table.py") == "minified"
        assert sorted(rows) == normal and set(rows.values()) == {"ok"}
        assert spans(ix.conn, "static/app.min.js") == [("static/app.min.js", "file", 1, 1)]
        assert spans(ix.conn, "tables/unicode_table.py") == [("tables/unicode_table.py", "file", 1, 12)]
        assert bm25_search(ix.conn, "decode json document")[0].path.startswith("json/")
    finally:
        ix.close()


def test_parse_timeout_cancels_the_parse_and_the_refresh_finishes(tmp_path, caplog):
    """A parse over ``index.parse_timeout_ms`` is cancelled: the file is kept by
    path with status ``timeout``, a warning is logged, the index goes on."""
    # The limit is the test's own: high enough that a busy machine cannot push the small file's
    # parse (well under a millisecond of CPU) past it, low enough that the big one (some 1.2 s
    # of CPU on a quiet machine) never fits under it.
    limit_ms = 200
    generated = "".join(f"def handler_{i}(event):\n    return event + {i}\n\n\n" for i in range(240_000))
    assert len(generated) > 8_000_000
    repo = make_repo(tmp_path / "repo", {
        "a_generated.py": generated,  # sorted first: the next parse reuses the cancelled parser
        "b_small.py": APP_PY,
        ".cogd/config.toml": f"[index]\nparse_timeout_ms = {limit_ms}\nmax_file_bytes = 16777216\n",
    })
    config = load_config(repo / ".cogd" / "config.toml")
    assert config.index.parse_timeout_ms == limit_ms
    ix = Indexer(repo, tmp_path / "index.db", config.index)
    try:
        with caplog.at_level(logging.WARNING, logger="cogd.index"):
            started = time.monotonic()
            result = ix.refresh()
            elapsed = time.monotonic() - started
        assert elapsed < WAIT_S  # a stall, not a slow machine: the status and the warning prove the cancel
        assert result.skipped == {"timeout": 1} and result.parsed == 2
        assert status(ix.conn, "a_generated.py") == "timeout"
        assert spans(ix.conn, "a_generated.py") == [("a_generated.py", "file", 1, 960_000)]
        assert any("a_generated.py" in r.getMessage() and f"{limit_ms} ms" in r.getMessage() for r in caplog.records)
        assert status(ix.conn, "b_small.py") == "ok"
        assert spans(ix.conn, "b_small.py") == [("b_small.py", "file", 1, 6), ("render_widget", "function", 4, 6)]
    finally:
        ix.close()


def test_unreadable_file_is_kept_by_path_and_retried(tmp_path, monkeypatch):
    """A file that cannot be read (permissions, a lock on Windows, a network
    mount gone stale) is recorded by path and read again on the next refresh."""
    repo = make_repo(tmp_path / "repo", {"ok.py": APP_PY, "locked.py": "def locked():\n    pass\n"})
    st = (repo / "locked.py").stat()
    os.utime(repo / "locked.py", ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))  # old: stat alone would say "unchanged"
    import cogd.index.indexer as indexer_module

    real_read_source = indexer_module.read_source
    locked = [True]

    # Tests run as root, which chmod cannot lock out: fail the read itself.
    def read_source(path, limit, **kwargs):
        if Path(path).name == "locked.py" and locked[0]:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_source(path, limit, **kwargs)

    monkeypatch.setattr(indexer_module, "read_source", read_source)
    ix = Indexer(repo, tmp_path / "index.db")
    try:
        result = ix.refresh()
        assert result.skipped == {"unreadable": 1}
        assert status(ix.conn, "locked.py") == "unreadable" and ids(ix.conn, "locked.py") == ["locked.py"]
        locked[0] = False  # permissions fixed: no new mtime, yet it is read again
        result = ix.refresh()
        assert result.skipped == {} and result.parsed == 1
        assert ids(ix.conn, "locked.py") == ["locked.py", "locked.py::locked"]
    finally:
        ix.close()


# --------------------------------------------------------------------------- encodings

ENCODED = '''# -*- coding: {coding} -*-
"""Prix et devises."""


def prix_en_euros(montant):
    """Formate un montant : « {{montant}} € »."""
    return f"{{montant:.2f}} €"


class Caisse:
    """La caisse du café."""

    def encaisser(self, montant):
        return prix_en_euros(montant)
'''


def test_utf16_latin1_and_a_binary_with_a_source_name(tmp_path):
    """Windows editors save UTF-16 with a BOM, old code is Latin-1, and build
    output lands under a .py name: the text ones are indexed with the right
    lines, the binary one by path only."""
    utf16 = ENCODED.format(coding="utf-16")
    latin1 = ENCODED.format(coding="latin-1").replace(" €", " EUR")  # Latin-1 has no euro sign
    code = compile(APP_PY, "app.py", "exec")
    pyc = importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(code)
    repo = make_repo(tmp_path / "repo", {
        "utf16_le.py": codecs.BOM_UTF16_LE + utf16.encode("utf-16-le"),
        "utf16_be.py": codecs.BOM_UTF16_BE + utf16.encode("utf-16-be"),
        "utf8_bom.py": codecs.BOM_UTF8 + ENCODED.format(coding="utf-8-sig").encode("utf-8"),
        "latin1.py": latin1.encode("latin-1"),
        "compiled.py": pyc,
    })
    ix, result = index(repo, tmp_path / "index.db")
    try:
        assert result["skipped"] == {"binary": 1}
        assert status(ix.conn, "compiled.py") == "binary" and ids(ix.conn, "compiled.py") == ["compiled.py"]
        for path, text in (("utf16_le.py", utf16), ("utf16_be.py", utf16), ("utf8_bom.py", utf16),
                           ("latin1.py", latin1)):
            assert status(ix.conn, path) == "ok", path
            last = len(text.splitlines())
            assert spans(ix.conn, path) == [
                (path, "file", 1, last),
                ("prix_en_euros", "function", line_of(text, "def prix_en_euros"), line_of(text, 'return f"')),
                ("Caisse", "class", line_of(text, "class Caisse"), last),
                ("Caisse.encaisser", "method", line_of(text, "def encaisser"), last),
            ], path
        doc = ix.conn.execute("SELECT doc FROM entities WHERE id = 'utf16_le.py::Caisse'").fetchone()[0]
        assert doc == "La caisse du café."
        assert bm25_search(ix.conn, "encaisser")[0].path in {"utf16_le.py", "utf16_be.py", "utf8_bom.py", "latin1.py"}
        # The stored hash is the file's own bytes: a touch re-hashes but does not re-parse.
        row = ix.conn.execute("SELECT hash FROM files WHERE path = 'utf16_le.py'").fetchone()
        assert row[0] == content_hash((repo / "utf16_le.py").read_bytes())
        for path in ("utf16_le.py", "latin1.py"):
            st = (repo / path).stat()
            os.utime(repo / path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))
        again = ix.refresh()
        assert again.parsed == 1 and again.skipped == {"binary": 1}  # only the binary is looked at again
    finally:
        ix.close()


def test_crlf_file_spans_equal_its_lf_twin(tmp_path):
    """A checkout with CRLF line endings must give the same line numbers."""
    files = {}
    for rel in ("json/decoder.py", "textwrap.py", "logging/config.py"):
        text = (STDLIB / rel).read_text(encoding="utf-8")
        files[f"lf/{rel}"] = text.encode()
        files[f"crlf/{rel}"] = text.replace("\n", "\r\n").encode()
    js = "/** Mount. */\nexport class Panel {\n  open() {\n    return 1;\n  }\n}\n\nfunction helper() {}\n"
    files["lf/panel.js"], files["crlf/panel.js"] = js.encode(), js.replace("\n", "\r\n").encode()
    repo = make_repo(tmp_path / "repo", files)
    ix, _ = index(repo, tmp_path / "index.db")
    try:
        for rel in ("json/decoder.py", "textwrap.py", "logging/config.py", "panel.js"):
            lf = [s[1:] for s in spans(ix.conn, f"lf/{rel}")]  # (kind, start, end), qualname order
            crlf = [s[1:] for s in spans(ix.conn, f"crlf/{rel}")]
            assert len(lf) > 1 and crlf == lf, rel
            lf_names = [s[0] for s in spans(ix.conn, f"lf/{rel}")[1:]]
            assert [s[0] for s in spans(ix.conn, f"crlf/{rel}")[1:]] == lf_names, rel
    finally:
        ix.close()


# --------------------------------------------------------------------------- deletes and renames

@pytest.mark.parametrize("mode", ["plain", "git"])
def test_deleted_and_renamed_files_never_come_back_in_search(tmp_path, monkeypatch, mode):
    files = {
        "checkout.py": "def legacy_checkout_flow(cart):\n    return cart\n",
        "billing.py": "def compute_invoice_total(lines):\n    return sum(lines)\n",
        "app.py": APP_PY,
    }
    root = plain_tree(tmp_path, monkeypatch, files) if mode == "plain" else make_repo(tmp_path / "repo", files)
    db = tmp_path / "index.db"
    ix, _ = index(root, db)
    try:
        assert bm25_search(ix.conn, "legacy checkout")[0].id == "checkout.py::legacy_checkout_flow"
        (root / "checkout.py").unlink()
        (root / "payments").mkdir()
        os.rename(root / "billing.py", root / "payments" / "billing.py")  # not git mv: as an editor does it
        result = ix.refresh()
        assert result.removed == 2
        for _ in range(2):
            assert bm25_search(ix.conn, "legacy checkout flow") == []
            hits = bm25_search(ix.conn, "invoice total")
            assert hits[0].id == "payments/billing.py::compute_invoice_total"
            assert {h.path for h in hits} == {"payments/billing.py"}
            ix.refresh(paths=["checkout.py", "billing.py"])  # a late save event for the old names
            ix.refresh()
    finally:
        ix.close()
    ix = Indexer(root, db)  # and after a restart
    try:
        ix.refresh()
        assert bm25_search(ix.conn, "legacy checkout flow") == []
        assert sorted(store.known_files(ix.conn)) == ["app.py", "payments/billing.py"]
    finally:
        ix.close()
