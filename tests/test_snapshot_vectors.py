"""A snapshot carries the vectors and their embedding-cache entries: a clone at a descendant
pulls them and the model embeds only what changed, ending with the vector ids of a fresh build."""

from __future__ import annotations

import json

import pytest

from conftest import Daemon, git, make_repo, run_cogd, wait_for, write
from snapshot_helpers import clone_at, config_text, projection

EMBED_WAIT_S = 600.0  # loading the real model and embedding a handful of entities, on a busy machine
pytestmark = pytest.mark.timeout(4 * EMBED_WAIT_S)

CODE = {
    "shop/cart.py": (
        '"""A shopping cart."""\n\n\n'
        "class Cart:\n"
        "    def add_item(self, sku, quantity):\n"
        '        """Put a product in the basket."""\n'
        "        self.items[sku] = self.items.get(sku, 0) + quantity\n\n"
        "    def total_price(self, prices):\n"
        '        """Sum what the customer owes."""\n'
        "        return sum(prices[s] * q for s, q in self.items.items())\n"
    ),
    "shop/mail.py": (
        "def send_receipt(address, body):\n"
        '    """Email the receipt to the customer."""\n'
        "    return (address, body)\n"
    ),
}


def wait_embedded(root) -> dict:
    """The status's embedding section once every entity and file of the current index has its vector."""
    def done() -> dict | None:
        status = json.loads(run_cogd(root, "status", "--json").stdout)
        embedding, index = status["embedding"], status["index"]
        assert embedding["state"] != "error", embedding
        current = embedding["entities"] == index["entities"] + index["files"]
        return embedding if (embedding["state"] == "idle" and not embedding["queued"]
                             and embedding["coverage"] == 1.0 and current) else None

    return wait_for(done, EMBED_WAIT_S, "every entity's vector")


def vector_rows(root) -> set[tuple[str, str, str]]:
    """(id, model, src_hash) of every row of the LanceDB table (the daemon is stopped)."""
    import lancedb

    table = lancedb.connect(str(root / ".cogd" / "index" / "vectors")).open_table("entities").to_arrow()
    return set(zip(*(table.column(c).to_pylist() for c in ("id", "model", "src_hash"))))


def embedded_run(root) -> tuple[dict, set]:
    """Start the daemon, index, wait for every vector, stop; (embedding status, vector rows)."""
    daemon = Daemon(root)
    try:
        daemon.start()
        embedding = wait_embedded(root)
    finally:
        daemon.stop()
    return embedding, vector_rows(root)


def test_vectors_travel_and_only_changed_entities_are_embedded(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    config = config_text(f"file://{store}", embed='model = "minilm"')
    origin = make_repo(tmp_path / "origin", {**CODE, ".cogd/config.toml": config})
    daemon = Daemon(origin)
    try:
        daemon.start()
        wait_embedded(origin)
        published = json.loads(run_cogd(origin, "snapshot", "publish", "--json").stdout)  # while the daemon runs
    finally:
        daemon.stop()
    at_a = {(e[0], e[11]) for e in projection(origin)["entities"]}
    assert published["counts"]["vectors"] == len(at_a) == published["counts"]["entities"] + published["counts"]["files"]
    write(origin, "shop/mail.py", CODE["shop/mail.py"].replace("return (address, body)", "return (address, body.strip())"))
    write(origin, "shop/tax.py", "def vat(amount):\n    \"\"\"Value added tax on an amount.\"\"\"\n    return amount * 0.2\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "B")
    b = git(origin, "rev-parse", "HEAD").strip()

    pulled = clone_at(origin, tmp_path / "pulled", b)
    embedding, rows = embedded_run(pulled)
    log = (pulled / ".cogd" / "logs" / "daemon.log").read_text()
    assert "vectors) in" in log and f"snapshot of {published['commit'][:12]} installed (1 commit behind HEAD" in log
    changed = {(i, h) for i, *_rest, h, _p in projection(pulled)["entities"]} - at_a
    assert 1 <= embedding["computed"] <= len(changed) < len(at_a)  # the model ran for what changed only

    fresh = clone_at(origin, tmp_path / "fresh", b)
    (fresh / ".cogd" / "config.toml").write_text(config_text("", embed='model = "minilm"'))
    git(fresh, "update-index", "--assume-unchanged", ".cogd/config.toml")
    fresh_embedding, fresh_rows = embedded_run(fresh)
    assert fresh_embedding["computed"] == len(fresh_rows) > embedding["computed"]
    assert rows == fresh_rows
    assert projection(pulled)["entities"] == projection(fresh)["entities"]
