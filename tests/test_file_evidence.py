"""File-level evidence beyond the retrieval lists, on real code (tree-sitter, SQLite FTS5, git):
the files a version-bump request changes (cogd/retrieve/version.py), and the prior of a file
from how many of history's change requests changed it (HistoryQueries.file_changes,
Feedback.file_prior_shares) as the file-level ranking reads it (cogd/retrieve/hybrid.py): on
every definition of a file, or on the file's first appearance only
(``[rank] history_file_prior_scope``), its counts taken at the end of each mining pass."""

from __future__ import annotations

import pytest

from cogd.config import ConfigError, HistoryConfig, PackConfig, RankConfig, RetrieveConfig, load_config
from cogd.history.miner import HistoryMiner
from cogd.history.query import HistoryQueries
from cogd.history.store import HistoryStore
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.pack import prompt_pack
from cogd.retrieve.version import version_files, version_request
from conftest import make_repo, write
from test_history import commit, indexed, init_repo, mine

INIT = '''"""A toolkit for command lines."""

from .options import version_option

__version__ = "2.3.0"
'''
OPTIONS = '''"""Options every command may take."""


def version_option(version=None, message="%(prog)s, version %(version)s"):
    """Add a --version option that prints the version and exits."""
    return {"version": version, "message": message}


def check_version(version):
    """Reject a version string that does not parse."""
    if not version or not version[0].isdigit():
        raise ValueError("bad version %r" % version)
    return version
'''
VERSION_REPO = {"tool/__init__.py": INIT, "tool/options.py": OPTIONS,
                "tool/shell.py": 'VERSION_HINT = "version"\n\n\ndef shell_version():\n    return "bash version 5"\n'}


def test_a_version_bump_is_a_short_request_naming_a_number_or_a_bump():
    assert version_request("start version 8.0")
    assert version_request("Bump version to 2.4")
    assert version_request("release version 8.1.3")
    assert version_request("bump the version")
    assert not version_request("update the version check in the parser")  # the miner's rule alone takes it
    assert not version_request("version_option prints the wrong program name")
    assert not version_request("start version 8.0 " + "and rewrite the parser " * 20)  # a task, not a bump
    assert not version_request("")


def test_the_files_assigning_the_version_are_found_and_lead_the_pack(tmp_path):
    root = make_repo(tmp_path / "repo", VERSION_REPO)
    conn = indexed(root)
    try:
        # shell.py mentions a version and assigns VERSION_HINT, which is no version assignment
        assert version_files(conn, root) == ["tool/__init__.py"]
        config = RetrieveConfig(version_weight=1.5)
        on = prompt_pack(conn, root, "start version 2.4", PackConfig(), config, mode="bm25")
        off = prompt_pack(conn, root, "start version 2.4", PackConfig(), RetrieveConfig(version_weight=0.0),
                          mode="bm25")
        on_files = list(dict.fromkeys(i.path for i in on.items))
        assert "tool/__init__.py" in on_files[:2]
        assert on.items[[i.entity_id for i in on.items].index("tool/__init__.py")].signals["version_rank"] == 1
        assert all("version_rank" not in i.signals for i in off.items)
        # a prompt that is no bump gets no version list, whatever the weight
        other = prompt_pack(conn, root, "check_version rejects 2.4rc1", PackConfig(), config, mode="bm25")
        assert all("version_rank" not in i.signals for i in other.items)
        # a version file deleted from the tree since it was indexed is skipped, not an error
        (root / "tool" / "__init__.py").unlink()
        assert version_files(conn, root) == []
    finally:
        conn.close()


def test_file_changes_count_each_request_once_per_file_and_follow_a_move(tmp_path):
    root = init_repo(tmp_path / "repo")
    text = (root / "shapes.py").read_text()
    write(root, "shapes.py", text.replace("return width * height", "return abs(width * height)")
          .replace("2 * (width + height)", "2 * abs(width + height)"))
    commit(root, "area and perimeter are never negative")  # two definitions, one request for the file
    write(root, "util.py", "def clamp(x, low, high):\n    return max(low, min(high, x))\n")
    commit(root, "add a clamp helper")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("Circle(self.radius * factor)",
                                                                      "Circle(abs(self.radius * factor))"))
    commit(root, "scale keeps the radius positive")
    write(root, "util.py", "def clamp(x, low, high):\n    return low if x < low else high if x > high else x\n")
    commit(root, "Bump version to 1.1")  # a version commit: skipped by the miner, so not counted
    miner, _store = mine(root)
    conn = indexed(root)
    try:
        counts = HistoryQueries(miner, HistoryConfig()).file_changes(conn)
        # the initial commit added shapes.py (its file entity); then two requests changed it
        assert counts["shapes.py"] == 3
        assert counts["util.py"] == 1
        (root / "geometry").mkdir()
        (root / "shapes.py").rename(root / "geometry" / "shapes.py")
        commit(root, "move the shapes into a package")
        miner.sync()
        moved = HistoryQueries(miner, HistoryConfig()).file_changes(indexed(root))
        assert "shapes.py" not in moved and moved["geometry/shapes.py"] >= 2  # the definitions followed the file
    finally:
        conn.close()


def test_the_file_prior_is_relative_to_the_most_changed_file_and_shrunk_by_history():
    counts = {"core.py": 40, "types.py": 10, "rare.py": 1}
    young = Feedback(RankConfig(history_file_prior=0.5), file_changes=lambda: counts,
                     history=lambda text: [], evidence={"history_association": 0})
    grown = Feedback(RankConfig(history_file_prior=0.5), file_changes=lambda: counts,
                     history=lambda text: [], evidence={"history_association": 10_000})
    off = Feedback(RankConfig(history_file_prior=0.0), file_changes=lambda: counts, history=lambda text: [])
    assert all(v == 0.0 for v in young.file_prior_shares().values())  # no evidence, no prior
    shares = grown.file_prior_shares()
    assert 0.49 < shares["core.py"] <= 0.5 and abs(shares["types.py"] - shares["core.py"] / 4) < 1e-9
    assert off.file_prior_shares() == {}
    assert Feedback(RankConfig(history_file_prior=0.5)).file_prior_shares() == {}  # no history at all


def _three_requests(root):
    """shapes.py changed by two requests (and added by the first commit), util.py by one."""
    text = (root / "shapes.py").read_text()
    write(root, "shapes.py", text.replace("return width * height", "return abs(width * height)"))
    commit(root, "area is never negative")
    write(root, "util.py", "def clamp(x, low, high):\n    return max(low, min(high, x))\n")
    commit(root, "add a clamp helper")
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("Circle(self.radius * factor)",
                                                                      "Circle(abs(self.radius * factor))"))
    commit(root, "scale keeps the radius positive")


def test_a_mining_pass_ends_with_the_file_counts_so_no_request_counts_them(tmp_path):
    root = init_repo(tmp_path / "repo")
    _three_requests(root)
    index = [indexed(root)]  # the index as the daemon's reader sees it (reopened after a re-index)
    (root / ".cogd" / "index").mkdir(parents=True, exist_ok=True)
    store = HistoryStore(root / ".cogd" / "index" / "history.db")
    try:
        miner = HistoryMiner(root, store, HistoryConfig(), index_reader=lambda: index[0])
        miner.sync()
        # the same counts as a reader without the view counts them through SQL
        by_sql = HistoryQueries(HistoryMiner(root, store, HistoryConfig()), HistoryConfig()).file_changes(index[0])
        assert miner.view.file_changes == by_sql == {"shapes.py": 3, "util.py": 1}
        assert miner.status()["file_prior_files"] == 2
        # a request reads them from the view: not even the index is read (a closed connection
        # would raise sqlite3.ProgrammingError if it were)
        closed = indexed(root)
        closed.close()
        queries = HistoryQueries(miner, HistoryConfig())
        assert queries.file_changes(closed) is miner.view.file_changes
        # the next pass counts again, against the index as it is then: a moved file's
        # definitions follow it
        (root / "geometry").mkdir()
        (root / "shapes.py").rename(root / "geometry" / "shapes.py")
        commit(root, "move the shapes into a package")
        assert queries.file_changes(index[0]) == {}  # HEAD moved, not yet synchronised: no history
        index[0].close()
        index[0] = indexed(root)
        miner.sync()
        moved = queries.file_changes(closed)
        assert moved is miner.view.file_changes and "shapes.py" not in moved and moved["geometry/shapes.py"] >= 2
        assert moved == HistoryQueries(HistoryMiner(root, store, HistoryConfig()),
                                       HistoryConfig()).file_changes(index[0])
        # an index that cannot be read when the pass ends: the view holds no counts, and the
        # first request counts them itself (the same figures)
        blind = HistoryMiner(root, store, HistoryConfig(), index_reader=lambda: closed)
        blind.sync()
        assert blind.view is not None and blind.view.file_changes is None
        assert blind.status()["file_prior_files"] is None
        assert HistoryQueries(blind, HistoryConfig()).file_changes(index[0]) == moved
    finally:
        index[0].close()
        store.close()


SCOPE_REPO = {
    "tool/options.py": '''"""Options."""


def parse_option_value(text):
    """Parse an option value: the option's value parsed from the command line."""
    value = text.strip()  # the parsed option value
    return value


def option_default(option):
    """The default of an option."""
    return option.get("default")
''',
    "tool/core.py": '''"""The core."""


def run_command(args):
    """Run a command."""
    return list(args)


def command_value(name):
    """The value a command holds."""
    return name


def invoke(ctx):
    """Invoke the callback with an option."""
    return ctx


def main(argv=None):
    """Entry point."""
    return argv
''',
}


def test_the_prior_on_the_file_order_moves_first_appearances_and_leaves_other_definitions_alone(tmp_path):
    root = make_repo(tmp_path / "repo", SCOPE_REPO)
    conn = indexed(root)
    counts = {"tool/core.py": 40, "tool/options.py": 2}  # history changes core.py most

    def pack(**rank):
        feedback = Feedback(RankConfig(**rank), file_changes=lambda: counts, history=lambda text, tests_unwanted=None: [],
                            evidence={"history_association": 10_000})
        items = prompt_pack(conn, root, "parse the option value", PackConfig(), RetrieveConfig(), mode="bm25",
                            feedback=feedback).items
        return items, {i.entity_id: i for i in items}

    try:
        off, off_by = pack(history_file_prior=0.0)
        every, every_by = pack(history_file_prior=2.0, history_file_prior_scope="entities")
        first, first_by = pack(history_file_prior=2.0, history_file_prior_scope="first")
        files = {name: list(dict.fromkeys(i.path for i in items)) for name, items in
                 (("off", off), ("entities", every), ("first", first))}
        # the words point at options.py; the prior moves core.py's first appearance ahead of it
        assert files["off"] == ["tool/options.py", "tool/core.py"]
        assert files["entities"] == files["first"] == ["tool/core.py", "tool/options.py"]
        seen: set[str] = set()
        later = []  # the items of a file already in the pack
        for item in first:
            if item.path in seen:
                later.append(item.entity_id)
                assert "file_prior_first" not in item.signals
            else:
                assert "file_prior_first" in item.signals  # each file's first appearance carries it
            seen.add(item.path)
        assert later == ["tool/options.py::option_default", "tool/core.py::invoke"]
        # those rank exactly as with no prior (score and order) ...
        assert [first_by[e].score for e in later] == [off_by[e].score for e in later]
        assert [e for e in (i.entity_id for i in off) if e in later] == later
        # ... where on every definition the prior lifts core.py's second item and sinks options.py's
        assert every_by["tool/core.py::invoke"].score > off_by["tool/core.py::invoke"].score
        assert every_by["tool/options.py::option_default"].score < off_by["tool/options.py::option_default"].score
        assert all("file_prior_first" not in i.signals for i in every + off)
    finally:
        conn.close()


UTILS = '''"""Helpers."""


def echo(message):
    """Print a message."""
    print(message)


def strip_value(text):
    """Strip a value."""
    return text.strip()
'''


def test_file_pointers_set_the_file_order_and_leave_every_definition_as_it_was(tmp_path):
    from cogd.retrieve.pack import reason_of

    root = make_repo(tmp_path / "repo", {**SCOPE_REPO, "tool/utils.py": UTILS})
    conn = indexed(root)
    counts = {"tool/utils.py": 40, "tool/core.py": 20, "tool/options.py": 1}

    def pack(**rank):
        feedback = Feedback(RankConfig(**rank), file_changes=lambda: counts, history=lambda text, tests_unwanted=None: [],
                            evidence={"history_association": 10_000})
        return prompt_pack(conn, root, "parse the option value", PackConfig(), RetrieveConfig(), mode="bm25",
                           feedback=feedback).items

    def definitions(items):
        return [(i.entity_id, i.score) for i in items if i.kind != "file"]

    def files(items):
        return list(dict.fromkeys(i.path for i in items))

    try:
        off = pack(history_file_prior=0.0)
        every = pack(history_file_prior=1.0, history_file_prior_scope="pointers", history_file_prior_after_first=False)
        after = pack(history_file_prior=1.0)  # the defaults: pointers, the words' first file kept first
        assert files(off) == ["tool/options.py", "tool/core.py", "tool/utils.py"]  # the words' order
        # the prior's order: utils.py and core.py lead, each placed by its own file entity
        assert files(every) == ["tool/utils.py", "tool/core.py", "tool/options.py"]
        assert [(i.entity_id, i.kind, i.signals.get("file_prior_pointer")) for i in every[:2]] == [
            ("tool/utils.py", "file", 1), ("tool/core.py", "file", 2)]
        # the words' first file kept first, the prior ordering the ones after it
        assert files(after) == ["tool/options.py", "tool/utils.py", "tool/core.py"]
        placed = [i for i in after if "file_prior_pointer" in i.signals]
        assert [(i.entity_id, i.signals["file_prior_pointer"]) for i in placed] == [("tool/utils.py", 2)]
        assert "placed as file #2 by history's file prior" in reason_of(placed[0].signals)
        # every definition keeps its place among definitions and its score: the ranking of
        # definitions is the one without the prior
        assert definitions(every) == definitions(after) == definitions(off)
        assert all("file_prior_pointer" not in i.signals for i in off)
    finally:
        conn.close()


def test_file_pointers_place_no_test_file_unless_the_prompt_asks_for_tests(tmp_path):
    tests_file = ('from tool.options import parse_option_value\n\n\ndef test_option_value():\n'
                  '    assert parse_option_value(" 1 ") == "1"\n')
    root = make_repo(tmp_path / "repo", {**SCOPE_REPO, "tool/utils.py": UTILS, "tests/test_options.py": tests_file})
    conn = indexed(root)
    # tests change with most requests: history counts the test file most
    counts = {"tests/test_options.py": 60, "tool/utils.py": 40, "tool/core.py": 20, "tool/options.py": 1}

    def pack(prompt):
        # the additive prior places the most files, a weakly matched test file among them
        feedback = Feedback(RankConfig(history_file_prior=1.0, history_file_prior_combine="add"), file_changes=lambda: counts,
                            history=lambda text, tests_unwanted=None: [], evidence={"history_association": 10_000})
        items = prompt_pack(conn, root, prompt, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback).items
        return (list(dict.fromkeys(i.path for i in items)),
                [(i.entity_id, i.signals["file_prior_pointer"]) for i in items if "file_prior_pointer" in i.signals])

    try:
        files, placed = pack("parse the option value")
        assert placed == [("tool/utils.py", 2)]  # the test file, demoted for this prompt, is not placed
        assert files[-1] == "tests/test_options.py"
        files, placed = pack("test that we parse the option value")
        # asked for tests, the test file takes the prior's second place (its test already stands there)
        assert files[:3] == ["tool/options.py", "tests/test_options.py", "tool/utils.py"]
        assert placed == [("tool/utils.py", 3)]
    finally:
        conn.close()


def test_the_prior_defaults_and_choices_are_checked(tmp_path):
    assert (RankConfig().history_file_prior_scope, RankConfig().history_file_prior_combine) == ("pointers", "product")
    config = tmp_path / "config.toml"
    for key, good, bad, choices in (("history_file_prior_scope", "first", "files", "entities, first, pointers"),
                                    ("history_file_prior_combine", "add", "max", "add, product")):
        config.write_text(f'[rank]\n{key} = "{good}"\n')
        assert getattr(load_config(config).rank, key) == good
        config.write_text(f'[rank]\n{key} = "{bad}"\n')
        with pytest.raises(ConfigError, match=f"rank.{key} must be one of {choices}, got '{bad}'"):
            load_config(config)


def test_the_prior_as_a_product_reorders_only_what_the_words_support(tmp_path):
    from cogd.retrieve.hybrid import file_ranking
    from cogd.retrieve.lexical import Hit

    def hit(path, score):
        return Hit(f"{path}::f", "function", "", path, "f", "f", 1, 2, "", "", None, score)

    hits = [hit("core.py", 1.0), hit("utils.py", 0.4), hit("options.py", 0.1)]
    prior = {"utils.py": 1.25, "options.py": 1.25, "never_matched.py": 1.25}
    added = file_ranking(hits, [], named_files=prior)
    product = file_ranking(hits, [], scaled_files=prior)
    # added, a much-changed file with a weak match overtakes the words' best file
    assert max(added, key=added.get) == "utils.py"
    assert added["options.py"] == pytest.approx((0.1 + 1.25) / (0.4 + 1.25))
    # as a product it only scales each file's own evidence: 0.4 × 2.25 = 0.9 stays below 1.0
    assert product == pytest.approx({"core.py": 1.0, "utils.py": 0.9, "options.py": 0.225})
    assert "never_matched.py" not in added and "never_matched.py" not in product
    assert file_ranking(hits, [], scaled_files={"utils.py": 2.0}) == pytest.approx(
        {"core.py": 1.0 / 1.2, "utils.py": 1.0, "options.py": 0.1 / 1.2})
