"""The daemon's embedding: vectors follow the index, the cache spares the model, modes and --explain."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import Daemon, cogd_in_process, make_repo, run_cogd, wait_for

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


def wait_embedded(root, timeout: float = EMBED_WAIT_S) -> dict:
    """The status's embedding section once every entity and file of the current index has its vector
    (polled through ``cogd status --json``'s code in this process: a CLI process per poll took CPU
    from the embedder being waited for)."""
    def done() -> dict | None:
        status = json.loads(cogd_in_process(root, "status", "--json").stdout)
        embedding, index = status["embedding"], status["index"]
        assert embedding["state"] != "error", embedding
        # compare counts too: an embedder that has not yet seen the latest index is idle at 1.0
        current = embedding["entities"] == index["entities"] + index["files"]
        return embedding if (embedding["state"] == "idle" and not embedding["queued"]
                             and embedding["coverage"] == 1.0 and current) else None

    return wait_for(done, timeout, "every entity's vector")


@pytest.fixture
def repo(tmp_path):
    root = make_repo(tmp_path / "repo", CODE)
    yield root
    Daemon(root).stop()


def test_vectors_follow_the_index_and_the_cache_spares_the_model(repo):
    run_cogd(repo, "start")
    cogd_in_process(repo, "index")  # after the real start: its code here, asking the daemon
    first = wait_embedded(repo)
    assert first["entities"] == 6 and first["computed"] == 6  # 2 files, 1 class, 3 functions

    # An edit re-embeds only what changed.
    cart = repo / "shop" / "cart.py"
    cart.write_text(CODE["shop/cart.py"] + "\n\ndef apply_coupon(total, code):\n    return total\n")
    run_cogd(repo, "index")
    second = wait_embedded(repo)
    assert second["entities"] == 7 and second["computed"] == 6 + 2  # the new function and its file

    # The vector table is a projection: lose it, restart, and the cache refills it without the model.
    run_cogd(repo, "stop")
    shutil.rmtree(repo / ".cogd" / "index" / "vectors")
    run_cogd(repo, "start")
    third = wait_embedded(repo)
    assert third["entities"] == 7 and third["computed"] == 0

    # A restart that loads stored vectors, then an edit: the loaded matrix must accept updates.
    run_cogd(repo, "stop")
    run_cogd(repo, "start")
    wait_embedded(repo)
    (repo / "shop" / "mail.py").write_text(CODE["shop/mail.py"] + "\n\ndef send_invoice(address):\n    return address\n")
    run_cogd(repo, "index")
    fourth = wait_embedded(repo)
    assert fourth["entities"] == 8 and fourth["error"] is None

    hits = json.loads(run_cogd(repo, "search", "basket", "--mode", "vector", "--json").stdout)
    assert hits[0]["id"] == "shop/cart.py::Cart.add_item"
    assert hits[0]["signals"]["vector_rank"] == 1 and "bm25_rank" not in hits[0]["signals"]


def test_explain_shows_each_signal(repo):
    run_cogd(repo, "start")
    cogd_in_process(repo, "index")  # after the real start: its code here, asking the daemon
    wait_embedded(repo)
    proc = run_cogd(repo, "context", "how much does the customer owe", "--explain")
    assert "shop/cart.py::Cart.total_price" in proc.stdout
    assert "ranking signals" in proc.stderr and "cosine=" in proc.stderr and "rrf=" in proc.stderr
    listing = run_cogd(repo, "search", "email the customer", "--explain").stdout
    assert "send_receipt" in listing and "vector_rank=" in listing


def test_models_lists_the_derived_default(repo):
    models = json.loads(run_cogd(repo, "models", "--json").stdout)
    active = [m for m in models if m.get("active")]
    assert len(active) == 1 and active[0]["dim"] == 384 and active[0]["source"] == "derived"
    assert active[0]["id"].startswith("all-MiniLM-L6-v2-int8pc@9e8025153763")  # derived by the daemon's first load
