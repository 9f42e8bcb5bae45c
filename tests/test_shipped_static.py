"""The trained static table shipped in ``cogd/embed/data`` and the first tier that serves it.

Real files throughout: the package's own table (its sha256 pin, its int8 format, its vectors
through the real tokenizer), tampered copies of it, a real index of standard-library code for
the tier in process, and a real daemon on a real socket whose transformer is held by the
``hold_embed`` fault, so the static tier answers first and is dropped once the transformer has
covered every entity.
"""

from __future__ import annotations

import hashlib
import io
import json
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import Daemon, make_repo, run_cogd, wait_for
from cogd.config import EmbedConfig
from cogd.daemon.first_tier import FirstTier
from cogd.embed import static_table
from cogd.embed.encoder import StaticEncoder, load_encoder
from cogd.embed.model import SHIPPED_STATIC_MODEL, ModelError, ModelInfo, resolve_model, shipped_static
from cogd.embed.static_table import (SHIPPED_FILE, SHIPPED_NAME, SHIPPED_SHA256, TableError, load_array, read_table,
                                     table_bytes)
from cogd.embed.text import entity_text
from cogd.index.extract import extract

pytestmark = pytest.mark.timeout(900)

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ("textwrap.py", "shlex.py", "colorsys.py", "fnmatch.py", "base64.py", "bisect.py")
QUERY = "remove common leading whitespace from every line"
EXPECTED = "textwrap.py::dedent"


def stdlib_entities():
    out = []
    for rel in FILES:
        out += [e for e in extract(rel, (STDLIB / rel).read_bytes(), "python").entities
                if e.kind in ("function", "method", "class")]
    return out


def test_the_shipped_table_is_pinned_compact_and_reproduces_its_bytes():
    data = SHIPPED_FILE.read_bytes()
    info = shipped_static()
    assert hashlib.sha256(data).hexdigest() == SHIPPED_SHA256 == info.sha256
    assert info.id == f"{SHIPPED_NAME}@{SHIPPED_SHA256[:12]}" and info.source == "static"
    assert info.path == SHIPPED_FILE and info.dim == static_table.SHIPPED_DIM == 256
    assert resolve_model(EmbedConfig(model=SHIPPED_STATIC_MODEL)) == info
    assert len(data) <= 12 * 2 ** 20  # int8 with a scale per row: 30,522 × (256 + 4) bytes and headers
    codes, scales, cap = read_table(data)
    assert codes.shape == (30522, 256) and codes.dtype == np.int8 and scales.shape == (30522,)
    assert cap == 512  # the encoder averages a text's first 512 tokens (measured better than the fit's 256)
    assert scales[0] == 0 and scales[101] == 0 and not codes[0].any()  # [PAD], [CLS]: never in a text
    assert int(np.abs(codes).max(axis=1)[scales > 0].min()) == static_table.QUANT_LEVELS  # each row's peak
    assert table_bytes(codes, scales, cap) == data  # fixed zip dates: the same table, the same bytes
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["codes.npy", "max_tokens.npy", "scales.npy"]
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
    notice = (SHIPPED_FILE.parent / "NOTICE").read_text(encoding="utf-8")
    assert "static_code.npz" in notice and SHIPPED_SHA256 in notice and "scripts/train_static.py" in notice


def test_shipped_vectors_find_stdlib_code_and_match_the_float_table(monkeypatch):
    encoder = load_encoder(shipped_static())
    assert isinstance(encoder, StaticEncoder) and encoder.max_tokens == 512 and encoder.dim == 256
    entities = stdlib_entities()
    texts = [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path) for e in entities]
    matrix = encoder.encode(texts)
    assert matrix.shape == (len(texts), 256) and matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    best = entities[int(np.argmax(matrix @ encoder.encode_query(QUERY)))]
    assert f"{best.path}::{best.qualname}" == EXPECTED
    assert not encoder.encode([""]).any()  # no token, no direction
    # The vectors are the normalised sums of the dequantised rows of each text's first 512 tokens ...
    from tokenizers import Tokenizer

    codes, scales, cap = read_table(SHIPPED_FILE.read_bytes())
    tokenizer = Tokenizer.from_file(str(shipped_static().tokenizer_path))
    tokenizer.no_truncation()  # the file's own settings (128 tokens, padded) are not the encoder's
    tokenizer.no_padding()
    for k in (0, len(texts) // 2, len(texts) - 1):
        ids = tokenizer.encode(texts[k], add_special_tokens=False).ids[:cap]
        expected = (codes[ids].astype(np.float64) * scales[ids, None]).sum(0)
        np.testing.assert_allclose(matrix[k], expected / np.linalg.norm(expected), atol=1e-5)
    # ... whatever the gather size (a few texts at a time here: the same vectors).
    monkeypatch.setattr("cogd.embed.encoder.GATHER_TOKENS", 300)
    np.testing.assert_allclose(encoder.encode(texts), matrix, atol=1e-6)


def test_a_tampered_shipped_table_is_refused(tmp_path, monkeypatch):
    data = bytearray(SHIPPED_FILE.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one code
    tampered = tmp_path / "static_code.npz"
    tampered.write_bytes(bytes(data))
    good = shipped_static()
    # Changed after it was resolved: the encoder hashes the bytes it reads and refuses them.
    moved = ModelInfo(good.id, tampered, good.tokenizer_path, good.dim, good.sha256, good.source)
    with pytest.raises(ModelError, match="failed verification: sha256 expected " + SHIPPED_SHA256):
        StaticEncoder(moved)
    # Changed in the package: refused at resolve time, by the first tier as by `embed.model`.
    monkeypatch.setattr(static_table, "SHIPPED_FILE", tampered)
    with pytest.raises(ModelError, match="failed verification.*reinstall cogd"):
        shipped_static()
    with pytest.raises(ModelError, match="failed verification"):
        resolve_model(EmbedConfig(model=SHIPPED_STATIC_MODEL))
    with pytest.raises(ModelError, match="failed verification"):
        FirstTier(EmbedConfig(first_tier_min=1))._load()
    tampered.unlink()
    with pytest.raises(ModelError, match="static table not found"):
        shipped_static()


def test_read_table_refuses_what_is_not_the_format():
    codes, scales, cap = read_table(SHIPPED_FILE.read_bytes())

    def npz(**arrays) -> bytes:
        out = io.BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    small_codes, small_scales = codes[:8], scales[:8]
    assert read_table(table_bytes(small_codes, small_scales, 7))[2] == 7
    with pytest.raises(TableError, match="Object arrays cannot be loaded"):  # a pickle is never run
        read_table(npz(codes=np.array([object()], dtype=object), scales=small_scales, max_tokens=np.int64(5)))
    with pytest.raises(TableError, match="holds codes, scales, max_tokens"):
        read_table(npz(codes=small_codes, scales=small_scales))
    with pytest.raises(TableError, match="codes must be int8"):
        read_table(npz(codes=small_codes.astype(np.float32), scales=small_scales, max_tokens=np.int64(5)))
    with pytest.raises(TableError, match="scales must be finite"):
        read_table(npz(codes=small_codes, scales=-small_scales - 1, max_tokens=np.int64(5)))
    with pytest.raises(TableError, match="max_tokens must be positive"):
        read_table(npz(codes=small_codes, scales=small_scales, max_tokens=np.int64(0)))
    with pytest.raises(TableError, match="not a static table"):
        read_table(b"PK\x03\x04 not a zip")


def _lying_npy(shape: tuple, dtype=np.int8) -> bytes:
    """An .npy file whose header declares ``shape`` but that holds no data at all."""
    from numpy.lib import format as npy

    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                     "shape": shape})
    return out.getvalue()


def test_a_table_that_declares_more_than_it_holds_is_refused_before_numpy_allocates_it():
    """A repository's own config can name a model_dir: a few bytes must not claim terabytes."""
    huge = _lying_npy((10 ** 12, 256))
    assert len(huge) < 200
    with pytest.raises(TableError, match="declares 256000000000000 bytes"):
        load_array(huge)
    good = io.BytesIO()
    np.save(good, np.ones((3, 4), dtype=np.float32), allow_pickle=False)
    assert load_array(good.getvalue()).shape == (3, 4)  # an honest array still loads

    codes, scales, _ = read_table(SHIPPED_FILE.read_bytes())
    members = {"codes.npy": _lying_npy((10 ** 9, 256)), "scales.npy": None, "max_tokens.npy": None}
    for name, array in (("scales.npy", scales[:8]), ("max_tokens.npy", np.int64(5))):
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        members[name] = buf.getvalue()

    def zipped(compression) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression) as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        return out.getvalue()

    with pytest.raises(TableError, match="codes.npy declares 256000000000 bytes"):
        read_table(zipped(zipfile.ZIP_STORED))
    members["codes.npy"] = table_bytes(codes[:8], scales[:8], 5)  # any honest bytes: compression is refused first
    with pytest.raises(TableError, match="stored uncompressed"):
        read_table(zipped(zipfile.ZIP_DEFLATED))


def test_the_first_tier_is_on_by_default_and_never_mixes_tiers(stdlib_index):
    from cogd.index import store

    default = EmbedConfig().first_tier_min
    assert default == 5000
    tier = FirstTier(EmbedConfig())
    assert not tier.wanted(default - 1) and tier.wanted(default) and not FirstTier(EmbedConfig(first_tier_min=0)).wanted(10 ** 6)
    assert tier.status()["min"] == default and not tier.status()["active"]
    _root, conn = stdlib_index
    entities = store.entity_states(conn)
    assert tier.pair(QUERY) == (None, None)  # nothing served before the first sync
    assert tier.sync(conn, entities) == len(entities) > 0
    vector, dense = tier.pair(QUERY)
    assert vector.shape == (256,) and dense.dim == 256 and len(dense) == len(entities)
    assert tier.status() == {**tier.status(), "active": True, "model": shipped_static().id, "entities": len(entities)}
    windows, same = tier.pair([QUERY, "parse an email address"])
    assert windows.shape == (2, 256) and same is dense
    assert tier.sync(conn, entities) == 0  # nothing changed: nothing embedded again
    tier.drop()
    assert tier.pair(QUERY) == (None, None) and tier.status()["entities"] == 0 and not tier.active


@pytest.fixture
def held_repo(tmp_path, monkeypatch):
    """A repository of stdlib files whose daemon's transformer is held (``hold_embed``) and whose
    first tier starts at one pending entity; the daemon is stopped at teardown."""
    files = {f"lib/{name}": (STDLIB / name).read_text(encoding="utf-8") for name in FILES}
    root = make_repo(tmp_path / "repo", files)
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text("[embed]\nfirst_tier_min = 1\n", encoding="utf-8")
    faults = tmp_path / "faults"
    faults.write_text("hold_embed\n", encoding="utf-8")
    monkeypatch.setenv("COGD_FAULTS", str(faults))
    monkeypatch.setenv("COLUMNS", "400")  # `cogd status` rows unwrapped
    try:
        yield root, faults
    finally:
        faults.unlink(missing_ok=True)
        Daemon(root).stop()


def test_daemon_serves_the_shipped_table_first_then_drops_it(held_repo):
    root, faults = held_repo
    daemon = Daemon(root).start()

    def static_serving():
        embedding = daemon.status()["embedding"]
        assert embedding["state"] != "error", embedding
        tier = embedding["first_tier"]
        return embedding if tier["active"] and tier["entities"] == embedding["entities"] > 0 else None

    held = wait_for(static_serving, 600, "the static tier covering every entity")
    assert held["embedded_entities"] == 0 and held["coverage"] == 0.0  # the transformer is held
    assert held["first_tier"]["model"] == shipped_static().id and held["first_tier"]["error"] is None
    text = run_cogd(root, "status").stdout
    assert f"active: {held['entities']:,} static vectors ({shipped_static().id}) answer searches" in text
    hits = json.loads(run_cogd(root, "search", QUERY, "--mode", "vector", "--json").stdout)
    assert hits[0]["id"] == f"lib/{EXPECTED}"  # the static vectors answer the KNN search
    assert f"lib/{EXPECTED}" in run_cogd(root, "context", QUERY).stdout

    faults.unlink()
    done = wait_for(lambda: (e := daemon.status()["embedding"])["phase"] == "current"
                    and not e["first_tier"]["active"] and e, 600, "the model's vectors for every entity")
    assert done["coverage"] == 1.0 and done["first_tier"]["entities"] == 0
    assert done["model"] != done["first_tier"]["model"]
    text = run_cogd(root, "status").stdout
    assert "standing by: a pass with 1 or more entities to embed gives every entity a static vector first" in text
    hits = json.loads(run_cogd(root, "search", QUERY, "--mode", "vector", "--json").stdout)
    assert hits[0]["id"] == f"lib/{EXPECTED}"  # now the transformer's vectors


def test_the_first_tier_holds_the_pass_strings_and_stamps_not_copies(stdlib_index):
    """The tier's index keeps the entity map's own id strings (the ones the transformer's index
    and the vector store keep), interned kinds, and the exact content hash of each row as its
    stamp; a changed hash re-embeds that entity alone, a vanished entity leaves the index."""
    import sys

    from cogd.daemon.first_tier import content_stamp
    from cogd.index import store

    _root, conn = stdlib_index
    entities = store.entity_states(conn)
    tier = FirstTier(EmbedConfig())
    assert tier.sync(conn, entities) == len(entities)
    _vector, dense = tier.pair(QUERY)
    keys = {i: i for i in entities}
    held = dense.live_ids()
    assert len(held) == len(entities) and all(keys[i] is i for i in held)  # the same objects, not equal copies
    assert all(k is sys.intern(k) for k in dense._kinds[:len(held)])
    stamps = np.array([content_stamp(entities[i][0]) for i in held], dtype=np.uint64)
    assert dense.changed(held, stamps) == []
    assert content_stamp("00000000000000ff") == 255 and content_stamp("ffffffffffffffff") == 2 ** 64 - 1
    assert content_stamp("not a hex hash!!") != content_stamp("not a hex hash!?")  # any other string: its xxh3
    first, gone = held[0], held[1]
    changed = dict(entities)
    changed[first] = ("0123456789abcdef", *entities[first][1:])
    del changed[gone]
    assert tier.sync(conn, changed) == 1  # only the entity whose hash moved
    assert gone not in dense.live_ids() and len(dense) == len(entities) - 1
    assert tier.sync(conn, changed) == 1  # the row holds the index's real hash again, so it differs once more


def test_static_and_transformer_share_one_tokenizer_and_cut_as_it_would():
    """One tokenizer object for both encoders (same file); each cuts its own token lists exactly
    as the tokenizer's own truncation did, so the vectors are unchanged."""
    from tokenizers import Tokenizer

    from cogd.embed.encoder import Encoder, shared_tokenizer

    static = load_encoder(shipped_static())
    transformer = Encoder(resolve_model(EmbedConfig()), 1, 256, 8, 768)
    assert static._tokenizer is transformer._tokenizer is shared_tokenizer(shipped_static().tokenizer_path)[0]
    entities = stdlib_entities()
    texts = [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path, max_chars=10 ** 6)
             for e in entities] + ["", "x", " ".join(["token"] * 700)]
    for cap, special, encoder in ((512, False, static), (256, True, transformer)):
        reference = Tokenizer.from_file(str(shipped_static().tokenizer_path))
        reference.no_padding()
        reference.enable_truncation(max_length=cap)
        expected = [e.ids for e in reference.encode_batch(texts, add_special_tokens=special)]
        assert encoder.token_ids(texts) == expected
        assert sum(len(ids) == cap for ids in expected) >= 2  # the cap was reached, not only short texts
