"""Context packs (cogd/retrieve/pack.py): rendering, the character budget, pointers, excerpts read
from the work tree, pinned and working-set packs, the repository map. Real index over real code
(conftest's ``small_index``), BM25 only, exact text."""

from __future__ import annotations

import os

import pytest

from cogd.config import PACK_HARD_CAP_CHARS, PackConfig, RetrieveConfig
from cogd.retrieve.pack import overview_pack, prompt_pack, reason_of, working_set_pack
from cogd.retrieve.repomap import pagerank

QUERY = "normalise text"
HEADER = ("## cogd: code that may matter for this prompt\n"
          "(BM25 over the repository index; `path:start-end`, then the entity id)\n")
TOKENISE = ("1. `pkg/core.py:9-10` function **tokenise**\n"
            "   `def tokenise(text)`\n"
            "   id: `pkg/core.py::tokenise`\n"
            "```python\ndef tokenise(text):\n    return normalise(text).split()\n```\n")


def handle(rank: int, n: int, excerpt: bool) -> str:
    """The rendered block of ``pkg/user{n}.py::handle{n}`` at ``rank`` (its docstring is shown once)."""
    block = (f"{rank}. `pkg/user{n}.py:4-6` function **handle{n}**\n"
             f"   `def handle{n}(text)`\n"
             f"   Handler {n}.\n"
             f"   id: `pkg/user{n}.py::handle{n}`\n")
    return block + (f"```python\ndef handle{n}(text):\n    return tokenise(normalise(text))\n```\n" if excerpt else "")


NORMALISE = ("6. `pkg/core.py:4-6` function **normalise**\n"
             "   `def normalise(text)`\n"
             "   Fold case and spaces.\n"
             "   id: `pkg/core.py::normalise`\n")


def pointer(entity_id: str, span: str) -> str:
    return f"- `{entity_id}` ({entity_id.split('::')[0]}:{span})\n"


def pack(small_index, config: PackConfig = PackConfig(), **kwargs):
    root, conn = small_index
    return prompt_pack(conn, root, kwargs.pop("prompt", QUERY), config, RetrieveConfig(), mode="bm25", **kwargs)


def test_a_prompt_pack_renders_ranked_items_with_excerpts_for_the_first_three(small_index):
    result = pack(small_index)
    assert result.text == (HEADER + TOKENISE + handle(2, 0, True) + handle(3, 1, True) + handle(4, 2, False)
                           + handle(5, 3, False) + NORMALISE)
    assert [(i.entity_id, i.rank, i.pointer) for i in result.items] == [
        ("pkg/core.py::tokenise", 1, False), ("pkg/user0.py::handle0", 2, False), ("pkg/user1.py::handle1", 3, False),
        ("pkg/user2.py::handle2", 4, False), ("pkg/user3.py::handle3", 5, False), ("pkg/core.py::normalise", 6, False)]
    # each item's size is its block's: header plus items is the whole text
    assert len(HEADER) + sum(i.chars for i in result.items) == len(result.text)
    assert result.items[0].chars == len(TOKENISE)
    assert result.as_dict()["chars"] == len(result.text)


def test_the_budget_turns_what_does_not_fit_into_pointers(small_index):
    # 400 characters are kept for the pointer list: the first two items fit, the third does not
    budget = len(HEADER) + len(TOKENISE) + len(handle(2, 0, True)) + 400 + 10
    result = pack(small_index, PackConfig(max_chars=budget))
    assert result.text == (HEADER + TOKENISE + handle(2, 0, True)
                           + "\nAlso relevant (expand with `cogd show ID`):\n"
                           + pointer("pkg/user1.py::handle1", "4-6") + pointer("pkg/user2.py::handle2", "4-6")
                           + pointer("pkg/user3.py::handle3", "4-6") + pointer("pkg/core.py::normalise", "4-6"))
    assert len(result.text) <= budget
    assert [(i.rank, i.pointer, i.chars) for i in result.items][2:] == [
        (3, True, len(pointer("pkg/user1.py::handle1", "4-6"))), (4, True, 45), (5, True, 45),
        (6, True, len(pointer("pkg/core.py::normalise", "4-6")))]


def test_an_item_whose_excerpt_does_not_fit_is_shown_without_it(small_index):
    budget = len(HEADER) + len(TOKENISE) + len(handle(2, 0, True)) + len(handle(3, 1, False)) + 400
    result = pack(small_index, PackConfig(max_chars=budget))
    assert result.text.startswith(HEADER + TOKENISE + handle(2, 0, True) + handle(3, 1, False)
                                  + "\nAlso relevant (expand with `cogd show ID`):\n")
    assert [i.entity_id for i in result.items if i.pointer] == [
        "pkg/user2.py::handle2", "pkg/user3.py::handle3", "pkg/core.py::normalise"]


def test_max_items_and_max_pointers_bound_the_pack(small_index):
    result = pack(small_index, PackConfig(max_items=2, max_pointers=1))
    assert result.text == (HEADER + TOKENISE + handle(2, 0, True) + "\nAlso relevant (expand with `cogd show ID`):\n"
                           + pointer("pkg/user1.py::handle1", "4-6"))
    assert [i.pointer for i in result.items] == [False, False, True]


def test_the_hard_cap_wins_over_a_larger_setting(tmp_path):
    from conftest import make_repo
    from cogd.index.indexer import Indexer

    functions = "".join(f'def widget_{n}(value):\n    """Widget number {n} turns the value into a widget."""\n'
                        f"    return value + {n}\n\n\n" for n in range(80))
    root = make_repo(tmp_path / "repo", {"widgets.py": functions})
    indexer = Indexer(root, tmp_path / "index.db")
    try:
        indexer.refresh()
        config = dict(max_items=80, max_pointers=80, per_file_cap=80, excerpt_items=80)
        huge = prompt_pack(indexer.conn, root, "widget value", PackConfig(max_chars=50_000, **config), RetrieveConfig(),
                           mode="bm25")
        capped = prompt_pack(indexer.conn, root, "widget value", PackConfig(max_chars=PACK_HARD_CAP_CHARS, **config),
                             RetrieveConfig(), mode="bm25")
    finally:
        indexer.close()
    assert huge.text == capped.text
    assert PACK_HARD_CAP_CHARS - 400 < len(huge.text) <= PACK_HARD_CAP_CHARS
    assert any(i.pointer for i in huge.items) and not all(i.pointer for i in huge.items)


@pytest.mark.parametrize("prompt", ["ok", "continue", "thanks!", "ok thanks"])
def test_chat_filler_gets_no_pack(small_index, prompt):
    result = pack(small_index, prompt=prompt)
    assert (result.text, result.items) == ("", [])


def test_excerpts_are_read_from_the_work_tree_now(small_index, tmp_path):
    root, _conn = small_index
    core = root / "pkg" / "core.py"
    core.write_text(core.read_text().replace("return normalise(text).split()", "return normalise(text).split(',')"))
    assert TOKENISE.replace("split()", "split(',')") in pack(small_index).text
    # a file turned into a link out of the tree since it was indexed: listed, but nothing of it is read
    outside = tmp_path / "outside.py"
    outside.write_text(core.read_text().replace("split(',')", "split('SECRET')"))
    core.unlink()
    os.symlink(outside, core)
    text = pack(small_index).text
    assert "SECRET" not in text
    assert ("1. `pkg/core.py:9-10` function **tokenise**\n   `def tokenise(text)`\n   id: `pkg/core.py::tokenise`\n"
            "2. `pkg/user0.py:4-6`") in text


def test_pinned_items_come_first(small_index):
    result = pack(small_index, pinned=["pkg/lonely.py::lonely_footer", "pkg/gone.py::nothing"])
    assert result.text.startswith(
        HEADER + "(the first items are this session's working set, re-added after compaction)\n"
        "1. `pkg/lonely.py:6-8` function **lonely_footer**\n   `def lonely_footer(rows)`\n"
        "   Footer line of the lonely report.\n   id: `pkg/lonely.py::lonely_footer`\n"
        '```python\ndef lonely_footer(rows):\n    return f"{len(rows)} rows"\n```\n'
        "2. `pkg/core.py:9-10` function **tokenise**\n")
    assert result.items[0].signals == {"pinned": "working set re-added after compaction"}
    assert [i.entity_id for i in result.items].count("pkg/lonely.py::lonely_footer") == 1


def test_the_working_set_pack_lists_known_entities_in_order(small_index):
    root, conn = small_index
    result = working_set_pack(conn, root, ["pkg/lonely.py::lonely_footer", "pkg/nope.py::gone", "pkg/core.py::normalise"],
                              PackConfig())
    assert result.text == (
        "## cogd: this session's working set (after compaction)\n"
        "(what this session edited, used and read; `path:start-end`, then the entity id)\n"
        "1. `pkg/lonely.py:6-8` function **lonely_footer**\n   `def lonely_footer(rows)`\n"
        "   Footer line of the lonely report.\n   id: `pkg/lonely.py::lonely_footer`\n"
        '```python\ndef lonely_footer(rows):\n    return f"{len(rows)} rows"\n```\n'
        "2. `pkg/core.py:4-6` function **normalise**\n   `def normalise(text)`\n   Fold case and spaces.\n"
        "   id: `pkg/core.py::normalise`\n"
        '```python\ndef normalise(text):\n    return " ".join(text.lower().split())\n```\n')
    assert [(i.entity_id, i.rank, i.signals) for i in result.items] == [
        ("pkg/lonely.py::lonely_footer", 1, {"working_set": True}), ("pkg/core.py::normalise", 2, {"working_set": True})]
    assert working_set_pack(conn, root, [], PackConfig()).text == ""


def test_overview_pack_lists_files_and_records_each_definition(small_index):
    root, conn = small_index
    result = overview_pack(conn, root, ["pkg/lonely.py"], PackConfig(), pagerank(conn))
    users = "".join(f"\n`pkg/user{n}.py` (6 lines)\n- function **handle{n}** L4-6: `def handle{n}(text)`\n" for n in range(4))
    assert result.text == (
        "## cogd: repository map\n(the definitions the code leans on most, weighted towards recent work; "
        "an item's id is `path::qualified.name` — `cogd show ID` expands it)\n"
        "\n`pkg/core.py` (10 lines) — Core helpers everyone uses.\n"
        "- function **normalise** L4-6: `def normalise(text)`\n- function **tokenise** L9-10: `def tokenise(text)`\n"
        "\n`pkg/lonely.py` (8 lines)\n"
        "- function **lonely_report** L1-3: `def lonely_report(rows)`\n"
        "- function **lonely_footer** L6-8: `def lonely_footer(rows)`\n"
        + users +
        "\n### Recently changed files\n- `pkg/lonely.py` (8 lines) — defines lonely_report, lonely_footer\n")
    ids = [i.entity_id for i in result.items]
    assert ids == ["pkg/core.py::normalise", "pkg/core.py::tokenise", "pkg/lonely.py::lonely_report",
                   "pkg/lonely.py::lonely_footer"] + [f"pkg/user{n}.py::handle{n}" for n in range(4)]
    assert [i.rank for i in result.items] == list(range(1, 9))
    assert all(i.signals["pagerank"] > 0 for i in result.items)


def test_reason_of_names_every_signal():
    assert reason_of({"bm25_rank": 3, "vector_rank": 7, "expanded_from": "caller of a.py::f (calls/import)",
                      "prior": 0.5, "utility": 0.41, "utility_x": 1.17, "working_set_x": 1.5}) == (
        "BM25 #3, vector #7; caller of a.py::f; prior ×0.5; utility 0.41 ×1.17; touched this session ×1.5")
    assert reason_of({"prior": 1.0, "association_rank": 2}) == "edited after similar prompts #2"
    assert reason_of({}) == ""


# ---------------------------------------------------------------- a file's definitions, on real code

PARSER = "email/_header_value_parser.py"
QUOTED = "parse a quoted string in a header value"
FIRST_TWELVE = [f"{PARSER}::get_word", f"{PARSER}::get_quoted_string", f"{PARSER}::quote_string",
                "email/_parseaddr.py::quote", f"{PARSER}::get_bare_quoted_string", "email/utils.py::unquote",
                "email/quoprimime.py::header_decode", f"{PARSER}::BareQuotedString.__str__",
                f"{PARSER}::QuotedString.quoted_value", "email/headerregistry.py::Address.addr_spec",
                f"{PARSER}::QuotedString", f"{PARSER}::get_value"]


def test_no_cap_per_file_by_default_so_the_strongest_file_keeps_its_definitions(stdlib_index):
    # The header parser holds the prompt's best matches: a cap of 8 filled the pointers with
    # weaker files (json's scanner for "string") once it had 8 items; without one (the default)
    # its next definitions come first, and MMR still put three other files in the first twelve.
    root, conn = stdlib_index
    assert PackConfig().per_file_cap == 0
    capped = prompt_pack(conn, root, QUOTED, PackConfig(per_file_cap=8), RetrieveConfig(), mode="bm25")
    free = prompt_pack(conn, root, QUOTED, PackConfig(), RetrieveConfig(), mode="bm25")
    for pack in (capped, free):
        assert [i.entity_id for i in pack.items if not i.pointer] == FIRST_TWELVE
    assert [i.entity_id for i in capped.items if i.pointer] == [
        "email/message.py::_formatparam", "email/charset.py::Charset.header_encode", "json/decoder.py::py_scanstring",
        "email/utils.py::encode_rfc2231", "email/_policybase.py::Policy.header_source_parse",
        "email/utils.py::decode_params", "email/__init__.py::message_from_string", "json/scanner.py::py_make_scanner"]
    assert [i.entity_id for i in free.items if i.pointer] == [
        f"{PARSER}::DisplayName.value", f"{PARSER}::BareQuotedString", f"{PARSER}::get_local_part",
        "email/message.py::_formatparam", f"{PARSER}::get_parameter", f"{PARSER}::MimeParameters.__str__",
        "email/charset.py::Charset.header_encode", f"{PARSER}::_get_ptext_to_endchars"]
    assert sum(i.path == PARSER for i in capped.items) == 8
    assert sum(i.path == PARSER for i in free.items) == 14


POLICY = "message header parsing policy"
POLICY_FILE = "email/_policybase.py"


def test_the_strongest_file_is_read_past_the_bm25_cut(stdlib_index):
    # _policybase.py is the candidates' strongest file; five more of its definitions match the
    # prompt's words at BM25 ranks 72-84, past the list's cut of 60. They join the candidates
    # with the RRF term of that rank, after the 60 that were there; no other file is read deeper.
    from cogd.retrieve.hybrid import retrieve

    root, conn = stdlib_index
    assert RetrieveConfig().file_depth == 300
    off = retrieve(conn, POLICY, RetrieveConfig(file_depth=0), mode="bm25", limit=60)
    hits = retrieve(conn, POLICY, RetrieveConfig(), mode="bm25", limit=60)
    assert [h.id for h in hits[:60]] == [h.id for h in off] and len(off) == 60
    added = [(h.id, h.signals["bm25_rank"]) for h in hits[60:]]
    assert added == [(f"{POLICY_FILE}::_PolicyBase.__repr__", 72), (f"{POLICY_FILE}::_PolicyBase.__setattr__", 76),
                     (f"{POLICY_FILE}::_PolicyBase.__init__", 77), (f"{POLICY_FILE}::_PolicyBase.__add__", 79),
                     (f"{POLICY_FILE}::_PolicyBase.clone", 84)]
    for hit in hits[60:]:
        assert hit.score == 1 / (60 + hit.signals["bm25_rank"]) and hit.signals["deepened"] is True
    assert not any(h.signals.get("deepened") for h in hits[:60])
    # In a pack of 60 ids the file's evidence lifts the first of them to 45th place.
    big = PackConfig(max_items=20, max_pointers=40, max_chars=9500)
    pack = prompt_pack(conn, root, POLICY, big, RetrieveConfig(), mode="bm25")
    assert [(i.rank, i.entity_id) for i in pack.items if i.signals.get("deepened")] == [
        (45, f"{POLICY_FILE}::_PolicyBase.__repr__"), (59, f"{POLICY_FILE}::_PolicyBase.__setattr__"),
        (60, f"{POLICY_FILE}::_PolicyBase.__init__")]
    assert reason_of(pack.items[44].signals).startswith("BM25 #72; in the strongest file, read past the BM25 cut")
    unread = prompt_pack(conn, root, POLICY, big, RetrieveConfig(file_depth=0), mode="bm25")
    assert sum(i.path == POLICY_FILE for i in unread.items) == 7
    assert sum(i.path == POLICY_FILE for i in pack.items) == 10
