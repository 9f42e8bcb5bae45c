"""cogd.embed.static_fit on real standard-library text with the bundled tokenizer, and a fitted
table loaded through ``[embed] model_dir`` (pinned by its manifest, hashed, refused when altered)."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from cogd.config import EmbedConfig
from cogd.embed import static_fit as sf
from cogd.embed.encoder import StaticEncoder, load_encoder
from cogd.embed.model import BUNDLED_TOKENIZER, MANIFEST_FILE, ModelError, resolve_model
from cogd.embed.text import entity_text
from cogd.index.extract import extract

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ("textwrap.py", "shlex.py", "fnmatch.py", "base64.py", "bisect.py", "colorsys.py")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = []
    for rel in FILES:
        for e in extract(rel, (STDLIB / rel).read_bytes(), "python").entities:
            out.append(entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path))
    return out


@pytest.fixture(scope="module")
def rows(texts):
    return sf.token_rows(Tokenizer.from_file(str(BUNDLED_TOKENIZER)), texts, 256)


def test_token_rows_are_each_texts_token_shares(texts, rows):
    tokenizer = Tokenizer.from_file(str(BUNDLED_TOKENIZER))
    tokenizer.no_truncation()  # the file's own truncation (128) must not be what token_rows uses
    ids = tokenizer.encode(texts[0], add_special_tokens=False).ids[:256]
    assert len(ids) > 128
    got_ids, weights = rows[0]
    assert sorted(set(ids)) == got_ids.tolist()
    assert abs(weights.sum() - 1) < 1e-12
    first = ids[0]
    assert weights[got_ids.tolist().index(first)] == pytest.approx(ids.count(first) / len(ids))


def test_ridge_fit_recovers_targets_a_table_makes(rows):
    # Targets that some table produces exactly: the fit from a zero start must reproduce them
    # (a tiny lam), and must move the free rows only.
    rng = np.random.default_rng(3)
    vocab = 30522
    truth = rng.normal(size=(vocab, 8))
    goal = sf.mean_rows(rows, truth)
    init = np.zeros((vocab, 8))
    free = sf.free_ids(rows, vocab, 1)
    gram, rhs = sf.normal_equations(rows, goal, init, free)
    assert gram.shape == (len(free), len(free)) and np.allclose(gram, gram.T)
    fitted = init.copy()
    fitted[free] = sf.ridge_solve(gram, rhs, init[free], 1e-9)
    assert np.abs(sf.mean_rows(rows, fitted) - goal).max() < 1e-4 * np.abs(goal).max()
    untouched = np.setdiff1d(np.arange(vocab), free)
    assert not fitted[untouched].any()
    scores = sf.holdout_scores(rows, fitted, goal)
    assert scores["cos"] > 0.9999 and scores["nn10"] > 0.99
    # A strong pull to the start leaves the table near it (the regularisation works).
    pulled = sf.ridge_solve(gram, rhs, init[free], 1e6)
    assert np.abs(pulled).max() < 1e-3 * np.abs(fitted[free]).max()


def test_fixed_rows_move_to_the_right_hand_side(rows):
    rng = np.random.default_rng(5)
    vocab = 30522
    truth = rng.normal(size=(vocab, 4))
    goal = sf.mean_rows(rows, truth)
    free = sf.free_ids(rows, vocab, 3)  # rare tokens stay fixed at their (true) start rows
    start = truth.copy()
    start[free] = 0.0
    gram, rhs = sf.normal_equations(rows, goal, start, free)
    fitted = start.copy()
    fitted[free] = sf.ridge_solve(gram, rhs, start[free], 1e-9)
    assert np.abs(sf.mean_rows(rows, fitted) - goal).max() < 1e-4 * np.abs(goal).max()


def write_table(folder: Path, table: np.ndarray, sha: str | None = None) -> str:
    import hashlib
    import io

    folder.mkdir(mode=0o700)
    buffer = io.BytesIO()
    np.save(buffer, table.astype("<f4"), allow_pickle=False)
    (folder / "static.npy").write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    manifest = {"name": "fitted", "dim": int(table.shape[1])}
    if sha != "":
        manifest["sha256"] = sha or digest
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    return digest


def test_a_fitted_table_loads_through_model_dir(tmp_path, texts):
    rng = np.random.default_rng(9)
    table = rng.normal(size=(30522, 16)).astype(np.float32)
    digest = write_table(tmp_path / "fitted", table)
    info = resolve_model(EmbedConfig(model_dir=str(tmp_path / "fitted")))
    assert info.source == "static" and info.dim == 16 and info.sha256 == digest
    assert info.id == f"fitted@{digest[:12]}" and info.tokenizer_path == BUNDLED_TOKENIZER
    encoder = load_encoder(info)
    assert isinstance(encoder, StaticEncoder)
    vectors = encoder.encode(texts[:3])
    rows = sf.token_rows(Tokenizer.from_file(str(BUNDLED_TOKENIZER)), texts[:3], 512)
    assert np.allclose(vectors, sf.unit(sf.mean_rows(rows, table.astype(np.float64))), atol=1e-5)


def test_an_altered_or_unpinned_table_is_refused(tmp_path):
    table = np.ones((30522, 4), dtype=np.float32)
    write_table(tmp_path / "altered", table, sha="0" * 64)
    with pytest.raises(ModelError, match="failed verification"):
        resolve_model(EmbedConfig(model_dir=str(tmp_path / "altered")))
    write_table(tmp_path / "unpinned", table, sha="")
    with pytest.raises(ModelError, match="pins no sha256"):
        resolve_model(EmbedConfig(model_dir=str(tmp_path / "unpinned")))
    write_table(tmp_path / "open", table)
    (tmp_path / "open" / "static.npy").chmod(0o666)
    with pytest.raises(ModelError, match="other users"):
        resolve_model(EmbedConfig(model_dir=str(tmp_path / "open")))
    good = tmp_path / "good"
    write_table(good, table)
    info = resolve_model(EmbedConfig(model_dir=str(good)))
    data = bytearray((good / "static.npy").read_bytes())
    data[-1] ^= 0xFF
    (good / "static.npy").write_bytes(bytes(data))
    with pytest.raises(ModelError, match=info.sha256):
        StaticEncoder(info)
