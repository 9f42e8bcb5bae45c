"""What a newcomer meets first: searching for a name, reading ``--explain``, ids in an 80-column
table, and counts said in the right number. Real CLI on a real repository, no daemon (the
in-process backend), lexical only."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import COGD, lexical_only, make_repo, run_cogd

GREET = '''def hello(name):
    """Greet someone by name."""
    return "hi " + name


def get(mapping, key):
    return mapping[key]


def make_widget():
    return object()
'''
FUSION = '''class ReciprocalRankFusionCombiner:
    """Fuse ranked candidate lists."""

    def combine_ranked_candidate_lists(self, lists):
        """Combine the ranked lists into one."""
        return lists
'''
LONG_METHOD = "src/cogd_example/retrieve/hybrid_ranking.py::ReciprocalRankFusionCombiner.combine_ranked_candidate_lists"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """One indexed repository for the module's read-only commands (nothing here writes to it)."""
    root = lexical_only(make_repo(tmp_path_factory.mktemp("newcomer") / "repo", {
        "pkg/__init__.py": "", "pkg/greet.py": GREET, "src/cogd_example/retrieve/hybrid_ranking.py": FUSION}))
    run_cogd(root, "index")
    return root


def _search(root: Path, query: str) -> list[str]:
    return [hit["id"] for hit in json.loads(run_cogd(root, "search", query, "--json").stdout)]


# ---- cogd search NAME finds NAME, also when prose calls it filler ------------------------------

def test_a_search_for_a_name_that_prompts_drop_as_a_stopword_finds_it(repo):
    assert _search(repo, "hello")[0] == "pkg/greet.py::hello"
    assert _search(repo, "get")[0] == "pkg/greet.py::get"
    assert _search(repo, "hello world")[0] == "pkg/greet.py::hello"  # among other words too
    # Nothing defines `make`: a search of only such words searches them (make_widget's name has it).
    assert _search(repo, "make")[0] == "pkg/greet.py::make_widget"
    assert _search(repo, "someone")[0] == "pkg/greet.py::hello"  # an ordinary word (its docstring): as before


def test_prompts_still_drop_stopwords(repo):
    from cogd.retrieve.lexical import query_terms, stopword_names

    assert query_terms("hello, get make the widget") == ["widget"]
    assert stopword_names("hello, get make the widget") == ["hello", "get", "make", "the"]
    pack = run_cogd(repo, "context", "hello")  # a prompt of filler only: no pack, as before
    assert (pack.stdout, " ".join(pack.stderr.split())) == (
        "", "no pack: nothing in the index matches (a pack needs at least one searchable word)")


# ---- --explain: the pack on stdout, the signals on stderr -------------------------------------

def test_context_explain_leaves_stdout_exactly_the_pack(repo):
    prompt = "combine the ranked candidate lists"
    plain = run_cogd(repo, "context", prompt)
    explained = run_cogd(repo, "context", prompt, "--explain")
    assert plain.stdout and LONG_METHOD in plain.stdout
    assert explained.stdout == plain.stdout
    assert "ranking signals" in explained.stderr and f" 1. {LONG_METHOD}" in explained.stderr
    assert "bm25_rank=" in explained.stderr and "bm25_rank=" not in explained.stdout
    lines = explained.stderr.splitlines()[1:]  # after the rule: per item, its id line, why, signals
    items = [line for line in lines if re.match(r" ?\d+\. \S", line)]
    scores = [line for line in lines if line.startswith("    score=")]
    assert len(items) == len(scores) >= 1 and len(lines) == len(items) * 3  # no line wrapped
    assert all("rrf=" in line for line in scores)


# ---- ids in a table at 80 columns break between their parts ------------------------------------

def _table_ids(text: str) -> list[str]:
    """The ``id`` column of a ``cogd search`` table, each hit's cell lines joined."""
    ids: list[str] = []
    for line in text.splitlines():
        cells = line.split("│")
        if len(cells) != 6:
            continue
        score, cell = cells[1].strip(), cells[3].strip()
        if score:
            ids.append(cell)
        elif ids and cell:
            ids[-1] += cell
    return ids


def test_search_table_ids_at_80_columns_break_only_after_a_separator(repo):
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    proc = subprocess.run([COGD, "search", "combine ranked lists"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) == 80
    assert proc.stderr == ""  # embeddings are off here: no "no vectors yet" (none are coming)
    assert _table_ids(proc.stdout)[:2] == [LONG_METHOD, LONG_METHOD.split(".combine")[0]]
    cells = [line.split("│")[3].strip() for line in lines if line.count("│") == 5]
    assert cells[:3] == ["src/cogd_example/retrieve/hybrid_ranking.py::", "ReciprocalRankFusionCombiner.",
                         "combine_ranked_candidate_lists"]


def test_break_name_keeps_parts_whole_and_folds_only_a_part_too_wide():
    from cogd.cli.cells import break_name, name_parts

    assert name_parts("a/b.py::C.m") == ["a/", "b.", "py::", "C.", "m"]
    assert break_name("pkg/mod.py::Klass.method", 12) == ["pkg/mod.py::", "Klass.method"]
    assert break_name("pkg/mod.py::Klass.method", 80) == ["pkg/mod.py::Klass.method"]
    assert break_name("x/parse_the_date_string", 10) == ["x/parse_", "the_date_", "string"]  # a scope too wide: at "_"
    assert break_name("abcdefghij", 4) == ["abcd", "efgh", "ij"]  # one word too wide: folded
    assert break_name("", 5) == [""]
    for width in range(1, 30):
        assert "".join(break_name(LONG_METHOD, width)) == LONG_METHOD
        assert all(len(line) <= width for line in break_name(LONG_METHOD, width))


# ---- counts agree with their nouns --------------------------------------------------------------

def test_doctor_says_one_memory_file_in_the_singular(tmp_path):
    from cogd.cli.doctor_checks import check_memory_files, counted, make_context
    from cogd.paths import Layout

    root = lexical_only(make_repo(tmp_path / "repo", {
        "a.py": "x = 1\n", ".cogd/memory/observations/01J00000000000000000000000.md": "---\nid: [unclosed\n---\nbody\n"}))
    check = check_memory_files(make_context(Layout(root), load_model=False))
    assert check.status == "fail" and check.finding.startswith("1 memory file needs attention (broken_frontmatter), e.g. ")
    assert (counted(1, "memory file"), counted(2, "memory file"), counted(0, "directory", "directories")) == (
        "1 memory file", "2 memory files", "0 directories")
