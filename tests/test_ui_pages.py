"""The viewer's long lists come a page at a time: the real ``cogd ui`` over a real daemon holding
more memories than one page shows, without a browser (tests/test_ui.py drives one).

Memories are recorded through the daemon's own ``memory.record`` (what ``cogd memory add`` sends),
so the list is what the memory store holds, newest first.
"""

from __future__ import annotations

import re

import pytest

from cogd.paths import Layout
from cogd.rpc.client import call
from cogd.ui.pages import PAGE_ROWS
from conftest import Daemon, lexical_only, make_repo
from test_ui_attacks import fetch, start_viewer, stop_viewer, url

RULES, KNOWLEDGE = PAGE_ROWS + 20, PAGE_ROWS  # rules fill two pages; all memories three


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """A daemon holding RULES rules and KNOWLEDGE knowledge memories, and a viewer over it."""
    root = lexical_only(make_repo(tmp_path_factory.mktemp("ui-pages") / "repo", {"pkg/a.py": "def f():\n    return 1\n"}))
    daemon = Daemon(root)
    try:
        daemon.start()
        socket = Layout(root).socket_path
        for n in range(RULES + KNOWLEDGE):
            kind = "rule" if n < RULES else "knowledge"
            call(socket, "memory.record", {"type": kind, "text": f"Claim number {n} about subsystem {n * 7919}.",
                                           "title": f"{kind} {n:03d} on part {n * 7919}", "source": "human",
                                           "allow_duplicate": True}, timeout=60)
        proc, found = start_viewer(root)
        try:
            yield found
        finally:
            _, errors = stop_viewer(proc)
            assert proc.returncode == 0, errors
    finally:
        daemon.stop()


def titles(body: str) -> list[str]:
    """The titles in the page's memory list, in order."""
    table = body[body.index('<table id="memories">'):]
    table = table[:table.index("</table>")]
    return re.findall(r"<a href=\"/memory/item\?[^\"]*\">([^<]*)</a>", table)


def pager_links(body: str) -> dict[str, str]:
    """``{"prev"/"next": href}`` of the page's pager (HTML entities of the href decoded)."""
    return {rel: href.replace("&amp;", "&") for href, rel in re.findall(r'<a href="([^"]*)" rel="(prev|next)">', body)}


def test_the_memory_list_is_paginated_and_keeps_its_filter(viewer):
    total = RULES + KNOWLEDGE
    status, first, _ = fetch(url(viewer, "/memory"))
    assert status == 200
    shown = titles(first)
    assert len(shown) == PAGE_ROWS
    assert f"All memories ({total})" in first
    assert f"1–{PAGE_ROWS} of {total} · page 1 of 3" in first
    links = pager_links(first)
    assert set(links) == {"next"} and "page=2" in links["next"]

    seen = list(shown)
    for page in (2, 3):
        status, body, _ = fetch(viewer["base"] + links["next"] if page == 2 else url(viewer, "/memory", page=page))
        assert status == 200
        seen += titles(body)
        links = pager_links(body)
    assert len(seen) == total and len(set(seen)) == total  # every memory once, none twice
    assert set(links) == {"prev"}  # the last page: no next
    assert f"{2 * PAGE_ROWS + 1}–{total} of {total} · page 3 of 3" in body
    assert seen == sorted(seen, key=lambda t: int(t.split()[1]), reverse=True)  # newest first, across pages

    status, rules, _ = fetch(url(viewer, "/memory", type="rule", page=2))
    assert status == 200
    assert [t.split()[0] for t in titles(rules)] == ["rule"] * (RULES - PAGE_ROWS)
    links = pager_links(rules)
    assert set(links) == {"prev"} and "type=rule" in links["prev"] and "page=1" in links["prev"]


@pytest.mark.parametrize("page, expected", [("0", 1), ("-2", 1), ("abc", 1), ("²", 1), ("9" * 50, 1), ("99", 3),
                                            ("3", 3)])
def test_a_page_number_from_the_address_bar_is_read_safely(viewer, page, expected):
    status, body, _ = fetch(url(viewer, "/memory", page=page))
    assert status == 200
    assert f"page {expected} of 3" in body


def test_the_session_list_has_the_same_pager(viewer):
    status, body, _ = fetch(url(viewer, "/sessions"))
    assert status == 200 and "no session has received a pack yet" in body
    assert 'class="meta pager"' not in body  # one page: no pager
