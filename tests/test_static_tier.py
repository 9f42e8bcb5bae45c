"""The distilled static model (``embed.model = "minilm-static"``): a token table distilled locally
from the derived int8 MiniLM, checked against the reference geometry shipped with cogd, hashed
into its manifest and re-distilled when tampered with. (The first tier serves the trained table
shipped in the package instead: tests/test_shipped_static.py.)

Real onnxruntime for the distillation, once per module (30-90 s on a loaded two-core machine) into
a runtime folder of the module's own, from a tampered table: it must reproduce the reference's
probe cosines within tolerance, private, with a manifest that vouches for its bytes. Every test works on a copy of that folder. Real stdlib code.
"""

from __future__ import annotations

import json
import logging
import shutil
import stat
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from cogd.config import EmbedConfig
from cogd.embed import derive, static
from cogd.embed.encoder import StaticEncoder, load_encoder
from cogd.embed.model import DERIVED_MODEL, STATIC_MODEL, ModelError, resolve_model
from cogd.embed.text import entity_text
from cogd.index.extract import extract

pytestmark = pytest.mark.timeout(900)

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ("textwrap.py", "shlex.py", "colorsys.py", "fnmatch.py", "base64.py", "bisect.py")
QUERY = "remove common leading whitespace from every line"
EXPECTED = "textwrap.py::dedent"
STALE = "0" * 64  # the hash a stale manifest vouches for: no table hashes to it


class _Records(logging.Handler):
    """The messages logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def distillation(tmp_path_factory):
    """A private runtime folder holding the int8 model and the module's one real distillation:
    ``{"root": folder, "log": [messages of cogd.embed.model], "stale_manifest": dict, "expected": sha256}``.

    ``expected`` is the hash of the bytes this distillation wrote, which its manifest then vouches
    for (bytes differ by CPU: the reference is a geometry, see :func:`cogd.embed.static.check_geometry`).

    The int8 model is copied in from this user's runtime folder when one was derived there already
    (it is hashed again on load; a bad copy is derived anew), else derived. The static table is
    always distilled here, from a tampered start: its folder holds a table whose bytes fail
    verification (mode 0644) and a manifest that is not the distillation's, so the one
    distillation is also the re-distillation the tamper test checks, on every machine."""
    root = tmp_path_factory.mktemp("xdg-static")
    records = _Records()
    with pytest.MonkeyPatch.context() as mp:
        mine = root / "cogd" / "models"
        try:
            real = derive.cache_dir()
        except Exception:  # no usable runtime folder of the user's: derive here
            real = None
        mp.setenv("XDG_RUNTIME_DIR", str(root))
        root.chmod(0o700)
        if real is not None and real.is_dir():
            for folder in real.glob(f"{derive.DERIVED_NAME}-r{derive.RECIPE_VERSION}-*"):
                mine.mkdir(parents=True, exist_ok=True, mode=0o700)
                (root / "cogd").chmod(0o700)
                shutil.copytree(folder, mine / folder.name)
        source = resolve_model(EmbedConfig(model=DERIVED_MODEL))
        folder = static.static_dir(source.sha256)
        folder.mkdir(mode=0o700)
        (folder / static.STATIC_FILE).write_bytes(b"\x93NUMPY not the distilled table")
        (folder / static.STATIC_FILE).chmod(0o644)
        stale = {"name": static.STATIC_NAME, "recipe": static.RECIPE_VERSION, "source_sha256": source.sha256,
                 "sha256": STALE, "dim": 0, "onnxruntime": "stale", "numpy": "stale"}
        (folder / static.MANIFEST_FILE).write_text(json.dumps(stale), encoding="utf-8")
        logger = logging.getLogger("cogd.embed.model")
        logger.addHandler(records)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            made = resolve_model(EmbedConfig(model=STATIC_MODEL))
        finally:
            logger.removeHandler(records)
            logger.setLevel(level)
        expected = derive.sha256_file(made.path)
    return {"root": root, "log": records.messages, "stale_manifest": stale, "expected": expected}


@pytest.fixture
def cache(distillation, tmp_path, monkeypatch):
    """A copy of the module's runtime folder for one test (tampering stays in it)."""
    mine = tmp_path / "cache"
    shutil.copytree(distillation["root"], mine)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(mine))
    return mine


def stdlib_entities():
    out = []
    for rel in FILES:
        parsed = extract(rel, (STDLIB / rel).read_bytes(), "python")
        out += [e for e in parsed.entities if e.kind in ("function", "method", "class")]
    return out


def test_static_table_matches_the_reference_is_private_and_has_its_own_id(distillation, cache):
    expected = distillation["expected"]
    info = resolve_model(EmbedConfig(model=STATIC_MODEL))
    source = resolve_model(EmbedConfig(model=DERIVED_MODEL))
    folder = cache / "cogd" / "models" / f"{static.STATIC_NAME}-r{static.RECIPE_VERSION}-{source.sha256[:16]}"
    assert info.source == "static" and info.path == folder / "static.npy" and info.dim == static.DIM == 256
    assert info.sha256 == expected == derive.sha256_file(info.path)
    assert info.id == f"all-MiniLM-L6-v2-static@{expected[:12]}" and info.id != source.id
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(info.path.stat().st_mode) == 0o600
    manifest = json.loads((folder / "static.json").read_text())
    assert manifest["sha256"] == expected and manifest["source_sha256"] == source.sha256
    table = np.load(info.path, allow_pickle=False)
    assert table.shape == (30522, 256) and table.dtype == np.float32
    assert not table[0].any() and not table[101].any()  # [PAD] and [CLS]: special tokens are zero rows
    # The geometry of the reference, and the manifest says how close.
    probe = static.load_probe()
    pairs = np.triu_indices(len(probe["ids"]), 1)
    correlation = np.corrcoef(static.probe_cosines(table, probe["ids"])[pairs], probe["cosines"][pairs])[0, 1]
    assert static.PROBE_MIN_CORRELATION <= correlation <= 1.0
    assert manifest["probe_correlation"] == pytest.approx(correlation, abs=1e-5)


def test_tampered_table_is_distilled_again(distillation, cache):
    """The module's distillation started from a table that fails verification (see :func:`distillation`)."""
    expected = distillation["expected"]
    warned = [m for m in distillation["log"] if "failed verification" in m]
    assert len(warned) == 1 and "distilling it again" in warned[0]
    assert any(m.startswith("distilled the static model") and expected in m for m in distillation["log"])
    info = resolve_model(EmbedConfig(model=STATIC_MODEL))
    source = resolve_model(EmbedConfig(model=DERIVED_MODEL))
    folder = info.path.parent
    # A real distillation from the verified int8 bytes, in the distillation's own file (0600, not
    # the tampered 0644 one), and a manifest written anew that names its source and the tools that made it.
    assert info.sha256 == expected == derive.sha256_file(info.path)
    assert stat.S_IMODE(info.path.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    manifest = json.loads((folder / "static.json").read_text())
    assert manifest != distillation["stale_manifest"]
    assert (manifest["sha256"], manifest["source_sha256"], manifest["dim"]) == (expected, source.sha256, static.DIM)
    assert (manifest["onnxruntime"], manifest["numpy"]) == static.tool_versions()
    assert manifest["cpu"] == static.cpu_class()
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no scratch file left


def test_the_cpu_class_names_the_kernel_flags():
    text = ("processor\t: 0\nflags\t\t: fpu sse4_2 fma avx2 avx512f avx512bw avx512_vnni avx_vnni\n"
            "processor\t: 1\nflags\t\t: fpu\n")
    assert static.cpu_class(text) == "avx2+avx512bw+avx512f+avx512_vnni+avx_vnni+fma"  # the first core's line
    assert static.cpu_class("flags : fpu sse4_2 avx2 fma\n") == "avx2+fma"
    assert static.cpu_class("flags : fpu sse2\n") == "none"
    assert static.cpu_class("model name : something\n") == "unknown"
    # No hash is pinned for any CPU: the manifest of the user's own distillation vouches.
    manifest = {"source_sha256": "b" * 64, "recipe": static.RECIPE_VERSION, "sha256": "a" * 64}
    assert static.expected_sha256("b" * 64, manifest) == "a" * 64
    assert static.expected_sha256("c" * 64, manifest) is None
    assert static.expected_sha256("b" * 64, {**manifest, "recipe": -1}) is None


def test_a_table_off_the_reference_geometry_is_refused(distillation, tmp_path):
    """check_geometry passes the real distillation and refuses a table whose probe rows were
    moved, one of the wrong shape, and one with a non-finite number."""
    source = [p for p in (distillation["root"] / "cogd" / "models").glob(f"{static.STATIC_NAME}-*/static.npy")]
    assert len(source) == 1
    table = np.load(source[0], allow_pickle=False)
    assert static.PROBE_MIN_CORRELATION <= static.check_geometry(source[0], len(table)) <= 1.0
    ids = static.load_probe()["ids"]
    moved = table.copy()
    moved[ids] = np.roll(table[ids], 1, axis=0)  # each probe token gets its neighbour's vector
    bad = tmp_path / "moved.npy"
    np.save(bad, moved, allow_pickle=False)
    with pytest.raises(static.DistillError, match="geometry differs from the reference: its probe cosines correlate"):
        static.check_geometry(bad, len(table))
    np.save(bad, table[:, :128], allow_pickle=False)
    with pytest.raises(static.DistillError, match="not finite float32"):
        static.check_geometry(bad, len(table))
    broken = table.copy()
    broken[5, 3] = np.nan
    np.save(bad, broken, allow_pickle=False)
    with pytest.raises(static.DistillError, match="not finite float32"):
        static.check_geometry(bad, len(table))


def test_table_changed_after_resolve_is_refused_at_load(cache):
    info = resolve_model(EmbedConfig(model=STATIC_MODEL))
    info.path.write_bytes(info.path.read_bytes()[:-8])
    with pytest.raises(ModelError, match="failed verification"):
        StaticEncoder(info)


def test_static_vectors_find_stdlib_code_and_tiers_never_meet(cache):
    from cogd.daemon.first_tier import FirstTier

    info = resolve_model(EmbedConfig(model=STATIC_MODEL))
    encoder = load_encoder(info)
    assert isinstance(encoder, StaticEncoder)
    entities = stdlib_entities()
    texts = [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path) for e in entities]
    matrix = encoder.encode(texts)
    assert matrix.shape == (len(texts), 256)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    scores = matrix @ encoder.encode_query(QUERY)
    assert f"{entities[int(np.argmax(scores))].path}::{entities[int(np.argmax(scores))].qualname}" == EXPECTED
    assert not encoder.encode([""]).any()  # no token, no direction

    tier = FirstTier(EmbedConfig(first_tier_min=1))
    assert tier.pair(QUERY) == (None, None) and not tier.wanted(0) and tier.wanted(1)
