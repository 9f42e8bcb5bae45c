"""Vendored packages recognised by their own licence or distribution metadata
(cogd/retrieve/priors.py: package_roots), on a real git tree indexed by tree-sitter: a copied
library with its own LICENSE and setup.py, an unpacked distribution with PKG-INFO, a licence-only
copy, and the first-party cases that must not be demoted (a monorepo package whose name shares
the root's, a licence copied byte for byte from the root, a manifest without a licence)."""

from __future__ import annotations

import pytest

from cogd.config import PackConfig, RetrieveConfig
from cogd.index.sources import list_tree_names
from cogd.retrieve.pack import prompt_pack
from cogd.retrieve.priors import package_roots, vendored_root
from conftest import make_repo

MIT = "MIT License\n\nCopyright (c) 2024 Acme Developers\n\nPermission is hereby granted, free of charge...\n"
BSD = "BSD 3-Clause License\n\nCopyright (c) 2011 Headerlib authors\n\nRedistribution and use...\n"
READER = '''def parse_header(text):
    """Split the header of a file into cards."""
    return [line.split("=", 1) for line in text.splitlines() if "=" in line]
'''
COPY = '''def parse_header(text):
    """Parse header cards: split each header line of the text into cards of key and value."""
    cards = []
    for line in text.splitlines():
        if "=" in line:
            cards.append(line.split("=", 1))
    return cards
'''
REPO = {
    "pyproject.toml": '[project]\nname = "acme"\nversion = "1.0"\n',
    "LICENSE": MIT,
    "acme/__init__.py": "",
    "acme/reader.py": READER,
    # a copy of another project: its own licence and manifest, another name
    "libs/headerlib/LICENSE": BSD,
    "libs/headerlib/setup.py": "from setuptools import setup\nsetup(name='headerlib', version='0.3')\n",
    "libs/headerlib/headers.py": COPY,
    # an unpacked distribution
    "lib/cardkit/PKG-INFO": "Metadata-Version: 2.1\nName: cardkit\n",
    "lib/cardkit/cards.py": "def card_value(card):\n    return card[1]\n",
    # a licence-only copy whose text is not the root's
    "third/tinyparse/COPYING.txt": BSD,
    "third/tinyparse/parse.py": "def parse_line(line):\n    return line.split()\n",
    # first-party: a monorepo package (related name, own licence), a copied root licence, a fixture
    "packages/acme-core/pyproject.toml": '[project]\nname = "acme-core"\n',
    "packages/acme-core/LICENSE": "Apache License 2.0\nCopyright 2024 Acme\n",
    "packages/acme-core/core.py": "def core_header():\n    return 'header'\n",
    "docs/LICENSE": MIT,
    "docs/helpers.py": "def doc_header():\n    return 'header'\n",
    "tools/fixture/setup.py": "from setuptools import setup\nsetup(name='somethingelse')\n",
    "tools/fixture/fix.py": "def fixture_header():\n    return 'header'\n",
    "manual/license.rst": "License\n=======\n\nThe project is under the MIT license.\n",  # a page, not a licence
    "manual/conf.py": "project = 'acme'\n",
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    from cogd.index.indexer import Indexer  # tree-sitter: only for the tests that ask

    base = tmp_path_factory.mktemp("vendored-packages")
    root = make_repo(base / "repo", REPO)
    indexer = Indexer(root, base / "index.db")
    indexer.refresh()
    yield root, indexer.conn
    indexer.close()


def test_package_roots_name_the_marker_and_keep_first_party_packages(indexed):
    root, _conn = indexed
    names = list_tree_names(root)
    assert "libs/headerlib/LICENSE" in names and "lib/cardkit/PKG-INFO" in names  # not indexed, still listed
    assert package_roots(root, names) == {
        "lib/cardkit": "has its own PKG-INFO",
        "libs/headerlib": "has its own LICENSE",
        "third/tinyparse": "has its own COPYING.txt",
    }
    assert vendored_root("libs/headerlib/headers.py", package_roots(root, names)) == ("libs/headerlib", "has its own LICENSE")
    assert vendored_root("packages/acme-core/core.py", package_roots(root, names)) is None
    # a wheel's metadata directory marks the directory it was unpacked into
    assert package_roots(root, ["vendor2/six-1.16.0.dist-info/METADATA", "vendor2/six.py"]) == {
        "vendor2": "has its own six-1.16.0.dist-info"}


def test_a_package_with_its_own_licence_ranks_below_the_projects_code_unless_named(indexed):
    root, conn = indexed
    prompt = "parse header cards: each header line of the text split into cards of key and value"
    config = RetrieveConfig(file_rank_weight=0.0)
    off = prompt_pack(conn, root, prompt, PackConfig(), RetrieveConfig(file_rank_weight=0.0, vendor_prior=1.0), mode="bm25")
    assert off.items[0].entity_id == "libs/headerlib/headers.py::parse_header"  # the copy matches the words best
    on = prompt_pack(conn, root, prompt, PackConfig(), config, mode="bm25")
    ids = [i.entity_id for i in on.items]
    assert ids[0] == "acme/reader.py::parse_header"
    copy = next(i for i in on.items if i.entity_id == "libs/headerlib/headers.py::parse_header")
    assert copy.signals["vendored"] == "has its own LICENSE"
    assert "prior ×0.3 (vendored: has its own LICENSE)" in copy.as_dict()["reason"]
    named = prompt_pack(conn, root, prompt + " in headerlib", PackConfig(), config, mode="bm25")
    assert named.items[0].entity_id == "libs/headerlib/headers.py::parse_header"
    assert "vendored" not in named.items[0].signals
