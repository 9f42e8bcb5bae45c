"""The default encoder: int8 per-channel, derived from the bundled model's verified bytes.

Real onnxruntime and onnx, a real derivation (5–15 s, once per module) into a
runtime folder of the test's own (``XDG_RUNTIME_DIR``), real stdlib code text.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from cogd.config import EmbedConfig
from cogd.embed import derive
from cogd.embed.encoder import Encoder
from cogd.embed.model import BUNDLED_SHA256, ModelError, list_models, resolve_model
from cogd.embed.text import entity_text
from cogd.index.extract import extract

STDLIB = Path(sysconfig.get_paths()["stdlib"])
PINNED = next(iter(derive.PINNED_DERIVED.values()))


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """A private cache root holding one real derivation, shared by the module's tests."""
    root = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", str(root))
        resolve_model(EmbedConfig())
    return root


@pytest.fixture
def cache(cache_root, tmp_path, monkeypatch):
    """A copy of the derived cache for one test (tests that tamper with it do not disturb the others)."""
    mine = tmp_path / "cache"
    shutil.copytree(cache_root, mine)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(mine))
    return mine


@pytest.fixture(scope="module")
def bundled():
    return resolve_model(EmbedConfig(model="minilm"))


def texts_of(relpath: str) -> list[str]:
    parsed = extract(relpath, (STDLIB / relpath).read_bytes(), "python")
    return [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path) for e in parsed.entities
            if e.kind in ("function", "method")]


def no_derivation(monkeypatch) -> list:
    """Make any further derivation fail loudly; returns the list of attempts."""
    calls: list = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise derive.DeriveError("derivation attempted")

    monkeypatch.setattr(derive, "derive", refuse)
    return calls


def test_derived_model_is_pinned_private_and_has_its_own_id(cache, bundled):
    info = resolve_model(EmbedConfig())
    folder = cache / "cogd" / "models" / f"{derive.DERIVED_NAME}-r{derive.RECIPE_VERSION}-{BUNDLED_SHA256[:16]}"
    assert info.source == "derived" and info.path == folder / "model.onnx"
    assert info.sha256 == PINNED == derive.sha256_file(info.path)
    assert info.id == f"all-MiniLM-L6-v2-int8pc@{PINNED[:12]}" and info.id != bundled.id
    assert info.dim == 384 and info.tokenizer_path == bundled.tokenizer_path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(info.path.stat().st_mode) == 0o600
    manifest = json.loads((folder / "derived.json").read_text(encoding="utf-8"))
    assert manifest["source_sha256"] == BUNDLED_SHA256 and manifest["sha256"] == PINNED
    assert manifest["recipe"] == derive.RECIPE_VERSION
    assert sorted(p.name for p in folder.iterdir()) == ["derived.json", "model.onnx"]  # no temporary left
    assert info.path.stat().st_size < 25_000_000  # int8 embedding tables too: 22.8 MB, not 58.6


def test_second_resolve_uses_the_cache(cache, monkeypatch):
    calls = no_derivation(monkeypatch)
    before = (resolve_model(EmbedConfig()).path).stat()
    again = resolve_model(EmbedConfig())
    assert calls == [] and again.sha256 == PINNED and again.path.stat().st_mtime_ns == before.st_mtime_ns
    rows = {r["source"]: r for r in list_models(EmbedConfig())}
    assert rows["derived"]["active"] and rows["derived"]["id"] == again.id and not rows["bundled"]["active"]
    assert rows["derived"]["size"] == again.path.stat().st_size


def test_tampered_derived_file_is_derived_again(cache, caplog):
    info = resolve_model(EmbedConfig())
    data = bytearray(info.path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, same folder: only the hash tells
    info.path.write_bytes(bytes(data))
    rows = {r["source"]: r for r in list_models(EmbedConfig())}
    assert rows["derived"]["id"] is None and "failed verification" in rows["derived"]["error"]
    with caplog.at_level(logging.WARNING, logger="cogd.embed.model"):
        again = resolve_model(EmbedConfig())
    assert "failed verification" in caplog.text and "deriving it again" in caplog.text
    assert again.sha256 == PINNED == derive.sha256_file(again.path)


def test_tampered_file_is_refused_when_it_cannot_be_derived_again(cache, monkeypatch):
    info = resolve_model(EmbedConfig())
    info.path.write_bytes(info.path.read_bytes()[:-1000])  # truncated
    no_derivation(monkeypatch)
    with pytest.raises(ModelError, match="cannot derive the int8 model") as caught:
        resolve_model(EmbedConfig())
    assert caught.value.fix and 'model = "minilm"' in caught.value.fix


def test_file_changed_after_resolve_is_refused_at_load(cache):
    info = resolve_model(EmbedConfig())
    data = bytearray(info.path.read_bytes())
    data[-10] ^= 0xFF
    info.path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=PINNED):
        Encoder(info)


def test_a_folder_others_can_write_is_refused(cache):
    info = resolve_model(EmbedConfig())
    os.chmod(info.path.parent, 0o777)
    try:
        with pytest.raises(ModelError, match="can be changed by other users"):
            resolve_model(EmbedConfig())
    finally:
        os.chmod(info.path.parent, 0o700)


def test_without_onnx_the_error_says_what_to_do(cache, monkeypatch):
    info = resolve_model(EmbedConfig())
    info.path.unlink()
    monkeypatch.setattr(derive, "tool_versions", lambda: ("1.31.1", None))
    with pytest.raises(ModelError, match="pip install onnx"):
        resolve_model(EmbedConfig())


def test_unknown_model_name_is_refused():
    with pytest.raises(ModelError, match="minilm-int8pc, minilm"):
        resolve_model(EmbedConfig(model="gpt"))


def test_derived_vectors_agree_with_the_bundled_model(cache, bundled):
    texts = texts_of("json/decoder.py") + texts_of("shutil.py")[:20]
    derived = Encoder(resolve_model(EmbedConfig()), max_tokens=128).encode(texts)
    reference = Encoder(bundled, max_tokens=128).encode(texts)
    cosines = (derived * reference).sum(axis=1)
    assert len(texts) >= 25 and cosines.mean() > 0.99 and cosines.min() > 0.97, cosines


def test_light_mode_gives_the_same_vectors(cache):
    encoder = Encoder(resolve_model(EmbedConfig()), threads=2, max_tokens=128)
    texts = texts_of("json/decoder.py")
    main = encoder.encode(texts)
    light = encoder.encode(texts, threads=1)
    asked: list[int] = []

    def switching() -> int | None:
        asked.append(1)
        return 1 if len(asked) % 2 else None

    mixed = encoder.encode(texts, threads=switching)
    assert set(encoder._sessions) == {1, 2}
    assert len(asked) == len(encoder._batches([len(e) for e in encoder.token_ids(texts)]))
    assert np.abs(main - light).max() < 1e-4 and np.abs(main - mixed).max() < 1e-4
    assert np.allclose(encoder.encode_query(texts[0], threads=1), encoder.encode([texts[0]])[0], atol=1e-4)
    with pytest.raises(ValueError):
        encoder.encode(texts, threads=-1)


def test_token_budget_groups_short_texts_and_keeps_long_ones_alone(cache):
    encoder = Encoder(resolve_model(EmbedConfig()), max_tokens=128, batch_size=32, batch_tokens=256)
    lengths = [10] * 40 + [100, 120, 128]
    batches = encoder._batches(lengths)
    assert [len(b) for b in batches] == [25, 15, 2, 1]  # 25 × 10 ≤ 256 < 26 × 10; 2 × 120; 128 alone
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    plain = Encoder(resolve_model(EmbedConfig()), max_tokens=128, batch_size=8)
    assert [len(b) for b in plain._batches(lengths)] == [8, 8, 8, 8, 8, 3]
