"""Prompt parts in retrieval on a real index (real tree-sitter, real SQLite FTS5): traceback
frames and paths resolved to entities at any path depth, identifiers, IDF-chosen search terms
for long prompts, vendored code and tests demoted, and ``--explain`` naming the part behind
each item (cogd/retrieve/clues.py, lexical.py, priors.py, hybrid.py, pack.py)."""

from __future__ import annotations

import pytest

from cogd.config import PackConfig, RetrieveConfig
from cogd.retrieve.clues import resolve, resolve_paths
from cogd.retrieve.lexical import query_terms, weighted_terms
from cogd.retrieve.pack import prompt_pack
from cogd.retrieve.priors import vendored_name, vendored_patterns
from cogd.retrieve.prompt import analyze
from conftest import make_repo

READER = '''"""Read headers of data files."""


def parse_header(text):
    """Split a header line into cards."""
    cards = []
    for line in text.splitlines():
        cards.append(line.split("="))
    return cards


def header_value(cards, key):
    for name, value in cards:
        if name == key:
            return value
    raise KeyError(key)


class Writer:
    def write_header(self, cards):
        return "\\n".join(f"{k}={v}" for k, v in cards)
'''
VENDORED = '''def parse_header(text):
    """A vendored header parser: split header cards of the text."""
    return [line.split("=") for line in text.splitlines()]


def header_cards(text):
    return parse_header(text)
'''
GENERATED = '''def header_table(text):
    """Generated: header cards of a text as a table."""
    return [line.split("=") for line in text.splitlines()]
'''
TESTS = '''from pkg.reader import header_value, parse_header


def test_header_value_reads_a_card():
    cards = parse_header("a=1")
    assert header_value(cards, "a") == "1"


def test_header_value_of_a_missing_card():
    cards = parse_header("a=1")
    assert header_value(cards, "b") is None
'''
KEYWORDS = '''def require_keyword(block, keyword):
    if keyword not in block:
        raise ValueError("value missing for keyword %s in block %s" % (keyword, block.name))
    return block[keyword]
'''
REPO = {
    "pkg/__init__.py": "",
    "pkg/keywords.py": KEYWORDS,
    "pkg/reader.py": READER,
    "pkg/extern/ply/headers.py": VENDORED,
    "pkg/generated/tables.py": GENERATED,
    "tests/test_reader.py": TESTS,
    "docs/conf.py": "project = 'x'\n",
    "pkg/conf.py": "settings = {}\n",
    ".gitattributes": "pkg/generated/** linguist-vendored\n*.py text\n",
}
LONG_PROSE = ("When I read the header of a file that is missing a card, the reader does not behave as documented. "
              "I expected a clear message; the tests of the package pass all the same. ") * 3


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    from cogd.index.indexer import Indexer  # tree-sitter: only for the tests that ask

    base = tmp_path_factory.mktemp("prompt-retrieval")
    root = make_repo(base / "repo", REPO)
    indexer = Indexer(root, base / "index.db")
    indexer.refresh()
    yield root, indexer.conn
    indexer.close()


def pack(indexed, prompt: str, **retrieve):
    root, conn = indexed
    return prompt_pack(conn, root, prompt, PackConfig(), RetrieveConfig(**retrieve), mode="bm25")


def test_a_frame_resolves_at_the_depth_that_exists_in_the_tree(indexed):
    _root, conn = indexed
    assert resolve_paths(conn, ["/usr/lib/python3/site-packages/pkg/reader.py", "reader.py", "conf.py",
                                "/elsewhere/other/reader.py", "pkg/nothere.py"]) == {
        "/usr/lib/python3/site-packages/pkg/reader.py": "pkg/reader.py",
        "reader.py": "pkg/reader.py",  # one file of that name
        "/elsewhere/other/reader.py": "pkg/reader.py",
        # conf.py: two files of that name and nothing else to tell them apart -> no answer
    }
    text = ('Traceback (most recent call last):\n'
            '  File "/home/me/run.py", line 3, in <module>\n'
            '  File "/usr/lib/python3/site-packages/pkg/reader.py", line 16, in header_value\n'
            '  File "/usr/lib/python3/site-packages/pkg/reader.py", line 8, in parse_header\n'
            "KeyError: 'b'\n"
            "pkg/reader.py:22: in write_header\n")
    clues = resolve(conn, analyze(text), tests_ok=False)
    # innermost (last printed) Python-family frame first; the pytest frame's line names the method spanning it
    assert clues.frames == ["pkg/reader.py::Writer.write_header", "pkg/reader.py::parse_header",
                            "pkg/reader.py::header_value"]
    assert clues.labels["pkg/reader.py::parse_header"] == "traceback frame 3 (reader.py:8 in parse_header)"
    assert clues.files == ["pkg/reader.py"]


def test_the_frame_entity_leads_the_pack_and_explain_names_the_frame(indexed):
    text = (LONG_PROSE + '\nTraceback (most recent call last):\n'
            '  File "/opt/env/lib/python3.11/site-packages/pkg/reader.py", line 17, in header_value\n'
            "    raise KeyError(key)\nKeyError: 'b'\n")
    result = pack(indexed, text)
    first = result.items[0]
    assert first.entity_id == "pkg/reader.py::header_value"
    assert "traceback frame 1 (reader.py:17 in header_value)" in first.as_dict()["reason"]
    assert first.signals["frame_rank"] == 1
    # without the frame list the same prompt ranks by words alone
    assert pack(indexed, text, frame_weight=0.0).items[0].signals.get("frame_rank") is None


def test_identifiers_name_their_definitions(indexed):
    _root, conn = indexed
    clues = resolve(conn, analyze("Calling `Writer.write_header()` drops cards; so does header_cards."), tests_ok=False)
    assert clues.identifiers == ["pkg/reader.py::Writer.write_header", "pkg/extern/ply/headers.py::header_cards"]
    assert clues.labels["pkg/reader.py::Writer.write_header"] == "identifier `Writer.write_header`"


def test_the_callee_of_a_refused_call_is_the_innermost_frame(indexed):
    _root, conn = indexed
    text = ('Traceback (most recent call last):\n'
            '  File "/usr/lib/python3/site-packages/pkg/reader.py", line 8, in parse_header\n'
            "TypeError: Writer.write_header() got an unexpected keyword argument 'sep'\n")
    clues = resolve(conn, analyze(text), tests_ok=False)
    # raised before the callee ran, so no frame names it: it goes first, its file too
    assert clues.frames == ["pkg/reader.py::Writer.write_header", "pkg/reader.py::parse_header"]
    assert clues.labels["pkg/reader.py::Writer.write_header"] == "callee refused in the error `Writer.write_header()`"
    assert clues.files == ["pkg/reader.py"]
    for error, callee in (("TypeError: header_value() missing 1 required positional argument: 'key'",
                           "pkg/reader.py::header_value"),
                          ("TypeError: Writer.write_header() takes 2 positional arguments but 3 were given",
                           "pkg/reader.py::Writer.write_header")):
        assert resolve(conn, analyze(error), tests_ok=False).frames == [callee]
    # defined in two files: both pinned; a name defined nowhere, or another error, pins nothing
    assert sorted(resolve(conn, analyze("TypeError: parse_header() takes 1 positional argument but 2 were given"),
                          tests_ok=False).frames) == ["pkg/extern/ply/headers.py::parse_header", "pkg/reader.py::parse_header"]
    assert resolve(conn, analyze("TypeError: nowhere() got an unexpected keyword argument 'x'"), tests_ok=False).frames == []
    assert resolve(conn, analyze("ValueError: parse_header() got an unexpected keyword argument 'x'"),
                   tests_ok=False).frames == []


def test_vendored_code_ranks_below_the_projects_own_unless_named(indexed):
    root, _conn = indexed
    assert vendored_patterns(root) == ["pkg/generated/**"]
    assert vendored_name("pkg/extern/ply/headers.py") == "ply"
    assert vendored_name("pkg/generated/tables.py", ["pkg/generated/**"]) == "pkg/generated/**"
    assert vendored_name("pkg/reader.py", ["pkg/generated/**"]) is None
    prompt = "parse header cards of the text"
    # file-level ranking off: the prior alone
    off = [i.entity_id for i in pack(indexed, prompt, vendor_prior=1.0, file_rank_weight=0.0).items]
    on = pack(indexed, prompt, file_rank_weight=0.0)
    ids = [i.entity_id for i in on.items]
    assert off[0].startswith("pkg/extern/ply/")  # the copy matches the words best
    assert ids[:2] == ["pkg/reader.py::parse_header", "pkg/reader.py::header_value"]
    assert ids.index("pkg/reader.py::parse_header") < ids.index("pkg/extern/ply/headers.py::parse_header")
    vendored = next(i for i in on.items if i.entity_id == "pkg/extern/ply/headers.py::parse_header")
    assert "prior ×0.3 (vendored: ply)" in vendored.as_dict()["reason"]
    assert next(i for i in on.items if i.entity_id == "pkg/generated/tables.py::header_table").signals["vendored"] \
        == "pkg/generated/**"
    named = pack(indexed, prompt + " in the ply copy", file_rank_weight=0.0).items  # the prompt names it: ranked as its words say
    assert [i.entity_id for i in named][0] == "pkg/extern/ply/headers.py::header_cards"
    assert not any(i.signals.get("vendored") == "ply" for i in named)


def test_a_long_prompt_demotes_tests_unless_it_names_one(indexed):
    prompt = LONG_PROSE + "\nheader_value of a missing card should raise KeyError, it returns None.\n"
    loose = pack(indexed, prompt, strict_test_prior=False)  # "tests" in the prose: no demotion
    assert not any(i.signals.get("test_prior") for i in loose.items)
    strict = pack(indexed, prompt)
    demoted = [i for i in strict.items if i.signals.get("test_prior")]
    assert {i.path for i in demoted} == {"tests/test_reader.py"}
    assert "(test, the prompt is not about tests)" in demoted[0].as_dict()["reason"]
    named = pack(indexed, prompt + "See tests/test_reader.py::test_header_value_of_a_missing_card.")
    assert not any(i.signals.get("test_prior") for i in named.items)
    by_path = pack(indexed, prompt + "It is like tests/test_reader.py does.")  # a test file of this tree
    assert not any(i.signals.get("test_prior") for i in by_path.items)
    own = pack(indexed, prompt + "My reproducer is header_repro_test.py.")  # the reporter's file, not ours
    assert {i.path for i in own.items if i.signals.get("test_prior")} == {"tests/test_reader.py"}


def test_long_prompts_search_their_rarest_terms_and_short_ones_are_unchanged(indexed):
    _root, conn = indexed
    short = "parse the header cards"
    assert weighted_terms(conn, short) == query_terms(short)
    filler = " ".join(f"word{n}x" for n in range(80))  # 80 distinct terms the index does not hold
    long_prompt = filler + " then header_value fails for a card"
    assert "header_value" not in query_terms(long_prompt)  # order of appearance: cut after 48 terms
    chosen = weighted_terms(conn, long_prompt, {"header_value": 3.0, "header": 3.0, "value": 3.0})
    assert chosen[:3] == ["header_value", "value", "header"] or set(chosen[:3]) == {"header_value", "value", "header"}
    assert not any(t.startswith("word") for t in chosen)  # no entity contains them
    assert set(chosen) == {"header_value", "header", "value", "fails", "card"} & set(chosen)
    assert "card" in chosen


def test_prose_windows_each_add_a_nearest_neighbour_list_named_in_explain(indexed):
    import numpy as np

    from cogd.index.vectors import DenseIndex
    from cogd.retrieve.hybrid import retrieve

    _root, conn = indexed
    rows = conn.execute("SELECT id, kind FROM entities ORDER BY id").fetchall()
    near = {"pkg/reader.py::header_value": [1.0, 0.0, 0.0], "pkg/reader.py::Writer.write_header": [0.0, 1.0, 0.0]}
    dense = DenseIndex(3)
    dense.replace([r[0] for r in rows], [r[1] for r in rows],
                  np.array([near.get(r[0], [0.0, 0.0, 1.0]) for r in rows], dtype=np.float32))
    windows = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    hits = {h.id: h for h in retrieve(conn, "zzz", RetrieveConfig(), mode="vector", query_vector=windows, dense=dense)}
    assert hits["pkg/reader.py::Writer.write_header"].signals["part"] == "prose window 2"
    assert hits["pkg/reader.py::header_value"].signals["part"] == "prose window 1"
    assert hits["pkg/reader.py::header_value"].signals["window_rank"] == 1
    # the mean of the two windows is equally near both: each is first or second on that list too
    assert {hits["pkg/reader.py::header_value"].signals["vector_rank"],
            hits["pkg/reader.py::Writer.write_header"].signals["vector_rank"]} == {1, 2}


def test_a_printed_error_finds_the_code_that_raises_it(indexed):
    from cogd.retrieve.lexical import message_trigrams

    assert message_trigrams(["the header has no card named x"]) == [
        "the header has", "header has no", "has no card", "no card named", "card named x"]
    text = LONG_PROSE + "\nIt fails with\n\n    ValueError: value missing for keyword SIMPLE in block primary\n"
    result = pack(indexed, text)
    first = result.items[0]
    assert first.entity_id == "pkg/keywords.py::require_keyword"
    assert first.signals["message_rank"] == 1
    assert "error message “value missing for keyword SIMPLE in block primary”" in first.as_dict()["reason"]
    assert pack(indexed, text, message_weight=0.0).items[0].entity_id != "pkg/keywords.py::require_keyword"


# ---------------------------------------------------------------- through the real daemon and hook

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One lexical-only daemon on the module's repository, stopped at the end of the module."""
    from conftest import lexical_only, running_daemon

    root = lexical_only(make_repo(tmp_path_factory.mktemp("prompt-served") / "repo", REPO))
    with running_daemon(root):
        yield root


REPORT = (LONG_PROSE * 12 + '\nTraceback (most recent call last):\n'
          '  File "/opt/env/lib/python3.11/site-packages/pkg/reader.py", line 17, in header_value\n'
          "    raise KeyError(key)\nKeyError: 'b'\n")


def test_explain_names_the_frame_and_the_hook_leads_with_it_for_a_long_report(served):
    import json

    from conftest import HOOK_DEADLINE_MS, payload, run_cogd, run_hook

    assert len(REPORT) > 4_000  # the traceback sits after pages of prose
    out = run_cogd(served, "context", REPORT, "--mode", "bm25", "--explain")
    shown = " ".join(out.stderr.split())  # the console wraps long lines
    assert "1. pkg/reader.py::header_value why: BM25 #" in shown and "traceback frame 1 (reader.py:17 in" in shown
    items = json.loads(run_cogd(served, "context", REPORT, "--mode", "bm25", "--json").stdout)["items"]
    assert items[0]["entity_id"] == "pkg/reader.py::header_value"
    assert items[0]["reason"].startswith("BM25 #") and "traceback frame 1 (reader.py:17 in header_value)" in items[0]["reason"]
    proc, _seconds = run_hook("prompt-submit", payload("user_prompt_submit.json", served, prompt=REPORT),
                              deadline_ms=HOOK_DEADLINE_MS)
    assert proc.returncode == 0
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    first = context.split("\n1. ", 1)[1].split("\n", 1)[0]
    assert first.startswith("`pkg/reader.py:") and "**header_value**" in first


def test_a_hostile_megabyte_prompt_is_bounded(indexed):
    import time

    hostile = "".join(f'  File "/x/{n}/pkg/reader{n}.py", line {n}, in f{n}\n src/m{n}.rs:1:1 a-b-{n} `X{n}.y`\n'
                      for n in range(12_000))
    assert len(hostile) > 1_000_000
    start = time.monotonic()
    result = pack(indexed, hostile)
    assert time.monotonic() - start < 20  # bounded work (a few seconds on a busy machine), never a hang
    assert len(result.text) <= 9_500


def test_a_long_prompt_leaves_no_transaction_open_on_a_readers_connection(tmp_path):
    """The term statistics write a temporary table; a pending transaction would freeze a
    daemon reader's snapshot of the index at its first long prompt."""
    from cogd.index import store
    from cogd.index.indexer import Indexer
    from cogd.retrieve.lexical import bm25_search

    root = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/reader.py": READER})
    indexer = Indexer(root, tmp_path / "index.db")
    indexer.refresh()
    reader = store.connect(tmp_path / "index.db", readonly=True)
    try:
        long_prompt = " ".join(f"word{n}x" for n in range(80)) + " header cards"
        assert sorted(weighted_terms(reader, long_prompt)) == ["cards", "header"]
        assert not reader.in_transaction
        (root / "pkg" / "later.py").write_text("def stamp_voucher(voucher):\n    return voucher\n", encoding="utf-8")
        indexer.refresh()
        assert [h.id for h in bm25_search(reader, "stamp voucher")][:1] == ["pkg/later.py::stamp_voucher"]
    finally:
        reader.close()
        indexer.close()


def test_dotted_module_names_and_prose_words_name_files(indexed):
    from cogd.retrieve.clues import resolve_modules

    root, conn = indexed
    prompt = ("Reading a header fails in `pkg.reader` when a card is missing\n\n"
              "The keywords are looked up after the reader gave up; nothing about the tables.\n\n"
              "```python\nimport pkg.conf\n```\n" + LONG_PROSE)
    parts = analyze(prompt)
    modules = resolve_modules(conn, parts, parts.prose, tests_ok=False)
    # pkg.conf is only in the code block; "tables" names a vendored-by-attribute file, still a module word
    assert modules.paths == ["pkg/reader.py", "pkg/keywords.py", "pkg/generated/tables.py"]
    assert modules.labels == {"pkg/reader.py": "module `pkg.reader`", "pkg/keywords.py": "module word `keywords`",
                              "pkg/generated/tables.py": "module word `tables`"}
    items = pack(indexed, prompt).items
    keywords = next(i for i in items if i.entity_id.startswith("pkg/keywords.py"))
    assert keywords.signals.get("module_rank") == 2 or keywords.entity_id != "pkg/keywords.py"
    off = resolve_modules(conn, analyze("the keywords"), "the keywords", tests_ok=False)
    assert off.paths == ["pkg/keywords.py"]


def test_the_projects_own_command_names_are_not_symbols(indexed):
    from cogd.retrieve.hybrid import _top_level_names, retrieve

    root, conn = indexed
    assert _top_level_names(conn) == {"pkg", "tests", "docs"}
    prompt = "Running `pkg-check` shows that `header-value` returns None for a card.\n\n" + LONG_PROSE
    hits = retrieve(conn, prompt, RetrieveConfig(), mode="bm25")
    labels = {h.signals.get("part") for h in hits}
    assert "symbol `header-value`" in labels and not any("pkg-check" in str(label) for label in labels)
    kept = retrieve(conn, prompt, RetrieveConfig(template_filter=False), mode="bm25")
    assert "a hyphenated name" in {h.signals.get("part") for h in kept}


def test_a_long_reports_title_is_a_list_of_its_own_and_its_snippets_names_are_not_clues(indexed):
    from cogd.retrieve.hybrid import report_title, retrieve, term_boosts, without_own_names

    _root, conn = indexed
    prompt = ("Keywords missing from a block are not reported\n\n" + LONG_PROSE +
              "\n```python\nclass Writer:\n    def write_header(self, cards):\n        return cards\n```\n")
    parts = analyze(prompt)
    assert report_title(prompt, parts) == "Keywords missing from a block are not reported"
    assert report_title("Keywords missing from a block", analyze("Keywords missing from a block")) == ""
    hits = retrieve(conn, prompt, RetrieveConfig(title_weight=1.0), mode="bm25")
    titled = {h.id: h.signals["title_rank"] for h in hits if "title_rank" in h.signals}
    # the title's words, alone: the keyword check first, the test that mentions "missing" after the code
    assert titled == {"pkg/keywords.py::require_keyword": 1, "pkg/keywords.py": 2,
                      "tests/test_reader.py::test_header_value_of_a_missing_card": 3, "tests/test_reader.py": 4}
    assert next(h for h in hits if h.id == "pkg/keywords.py::require_keyword").signals["part"] == "title #1"
    assert not any("title_rank" in h.signals for h in retrieve(conn, prompt, RetrieveConfig(title_weight=0.0), mode="bm25"))
    # The snippet defines its own Writer.write_header: with own names on, it names nothing here
    kept, own = without_own_names(parts, True)
    assert own == frozenset({"Writer", "write_header"}) and "write_header" not in kept.identifiers
    assert term_boosts(kept, own)["write_header"] == 0.5 and term_boosts(parts)["write_header"] == 3.0
    on = resolve(conn, kept, tests_ok=False)
    assert "pkg/reader.py::Writer.write_header" in resolve(conn, parts, tests_ok=False).identifiers
    assert "pkg/reader.py::Writer.write_header" not in on.identifiers
    assert without_own_names(analyze("Writer.write_header drops cards"), True)[1] == frozenset()
