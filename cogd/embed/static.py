"""A static embedding model distilled locally from the bundled transformer, and its encoder.

Why: the transformer embeds 70–200 entities a second on two cores, so a large
repository waits minutes for its first vectors. A *static* model maps every
WordPiece token of the vocabulary to one fixed vector; an entity's vector is
the weighted mean of its tokens' vectors, a few microseconds of numpy per
entity and no onnxruntime at all. This distilled table is ``embed.model =
"minilm-static"`` and the starting point of the trained table
(:mod:`cogd.embed.static_fit`); the first tier of the two-tier design
(``docs/architecture.md``, "Two tiers") serves the trained table shipped in the
package instead (:mod:`cogd.embed.static_table`), which ranks code better.

Recipe (:data:`RECIPE`, version :data:`RECIPE_VERSION`), the approach of
model2vec (Tulkens & van Dongen, 2024) carried out here with onnxruntime and
numpy:

1. the derived int8 per-channel ``model.onnx`` (:mod:`cogd.embed.derive`,
   the default encoder), as bytes whose sha256 was just checked: twice as
   fast as the bundled file for this work, its token vectors at cosine
   0.989 to the bundled file's;
2. every vocabulary token that is not a special or ``[unused…]`` token and
   is spelled in ASCII (code is; 1,900 of the 30,522 tokens are not) is run through the
   transformer alone, as ``[CLS] token [SEP]``, and the three output
   vectors are mean-pooled (the sentence vector of that token); the other
   tokens get a zero row (special tokens never occur in a text: the encoder
   tokenises without them);
3. PCA to :data:`DIM` dimensions: the rows are centred on their mean, the
   eigenvectors of their covariance (``numpy.linalg.eigh``) are taken in
   order of falling eigenvalue, each with the sign that makes its largest
   component positive (eigenvectors have no sign of their own; this makes
   the result reproducible);
4. each row is scaled by its token's SIF weight ``a / (a + p)``
   (Arora et al., 2017, "A simple but tough-to-beat baseline for sentence
   embeddings", with ``a`` = :data:`SIF_A`), where ``p`` is the token's
   probability estimated from its rank in the vocabulary by Zipf's law,
   ``p ∝ 1 / rank`` (BERT's vocabulary lists words roughly from the most
   frequent; model2vec estimates frequencies the same way);
5. the table is stored as float32 ``.npy`` (numpy's format, read back with
   ``allow_pickle=False``).

The work runs in a child process (``python -m cogd.embed.static SRC OUT``),
two intra-op threads and one BLAS thread, 30–60 s on two cores (four
minutes at a load of 11), so that the float32 transformer
session and the intermediate tables never enter the daemon's memory and the
arithmetic is done in one fixed order. On a given CPU two distillations give the
same bytes, but another CPU gives other bytes: unlike the int8 derivation, which
only rewrites the graph, this one runs the model, and onnxruntime picks its int8
kernels by the CPU's SIMD extensions (three AMD EPYC machines, two of them with
AVX-512 VNNI, gave three hashes with the same onnxruntime and numpy). So no hash is
pinned: the table must reproduce a reference geometry shipped with cogd, the cosine
similarities between :data:`PROBE_COUNT` probe tokens' rows (:func:`check_geometry`),
and the manifest then records its sha256. The file lives in the private runtime
directory and is hashed against that manifest on every load; a tampered or truncated file is derived again, never loaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from cogd.embed.derive import load_manifest, manifest_sha256, remove_quietly, write_manifest

RECIPE_VERSION = 2
DIM = 256
SIF_A = 1e-4
DISTILL_BATCH = 1024  # token sequences per inference call in the distillation
DISTILL_THREADS = 2  # measured on 2,048 tokens: 4.5 s with one thread, 2.3 s with two, same bytes
RECIPE = f"int8pc source, ASCII tokens, [CLS] t [SEP] mean-pooled, PCA {DIM} (eigh, signed), SIF a={SIF_A:g} on Zipf rank"
STATIC_NAME = "all-MiniLM-L6-v2-static"
STATIC_FILE = "static.npy"
MANIFEST_FILE = "static.json"
DISTILL_TIMEOUT_S = 900  # measured 30-90 s on a loaded two-core machine; generous

#: The CPU flags (as Linux's /proc/cpuinfo spells them) that decide which of onnxruntime's
#: x86 int8 and float kernels run, in the order :func:`cpu_class` lists them. Recorded in the
#: manifest, so a table can be traced to the kernels that made it.
KERNEL_FLAGS = ("avx2", "avx512bw", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8", "fma")

#: The reference geometry a distilled table must reproduce (:func:`check_geometry`): the ids of
#: :data:`PROBE_COUNT` vocabulary tokens (:func:`probe_ids`) and the cosine similarities between
#: their rows in a table distilled on the machine it names. Written by
#: ``python -m cogd.embed.static --probe TABLE.npy TOKENIZER.json`` when the recipe changes.
PROBE_FILE = Path(__file__).parent / "data" / "static_probe.json"
PROBE_COUNT = 64
#: Smallest Pearson correlation allowed between a table's probe cosines (each pair once) and
#: the reference's. The same recipe gives other bytes on another CPU (onnxruntime picks its int8
#: kernels by the SIMD extensions: AVX2 and AVX-512 VNNI round differently), so bytes cannot be
#: pinned across machines; the geometry can. Measured on this recipe (docs/architecture.md, "Two
#: tiers"): a distillation in batches of 300 instead of 1,024, which moves every activation scale
#: of the dynamic quantisation, correlates 0.982 with the reference, one from the bundled per-tensor
#: int8 model 0.985; the probe rows rolled by one, a random table and a row-permuted table 0.05 or
#: less.
PROBE_MIN_CORRELATION = 0.9


class DistillError(RuntimeError):
    """The distillation failed (child error, timeout, a private folder that is not private)."""


def static_dir(source_sha256: str) -> Path:
    """The cache folder of the static model distilled from the source with this sha256."""
    from cogd.embed.derive import cache_dir

    return cache_dir() / f"{STATIC_NAME}-r{RECIPE_VERSION}-{source_sha256[:16]}"


def tool_versions() -> tuple[str, str]:
    """(onnxruntime version, numpy version), without importing onnxruntime."""
    from importlib import metadata

    return metadata.version("onnxruntime"), np.__version__


def cpu_class(cpuinfo: str | None = None) -> str:
    """The CPU's kernel class: the :data:`KERNEL_FLAGS` it has, joined by ``+`` (e.g. ``avx2+fma``).

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (read when None); its first ``flags`` line
    counts (every core of one machine has the same). ``"unknown"`` when there is no such line
    (another OS, an unreadable file): no pin applies then, and the manifest is the reference.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            return "unknown"
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            have = set(value.split())
            found = [f for f in KERNEL_FLAGS if f in have]
            return "+".join(found) if found else "none"
    return "unknown"


def expected_sha256(source_sha256: str, manifest: dict | None) -> str | None:
    """The hash the table must have: the one its manifest recorded when it was distilled from
    ``source_sha256`` with this recipe version (None when there is no such manifest)."""
    return manifest_sha256(manifest, source_sha256, RECIPE_VERSION)


def probe_ids(vocab: dict[str, int], count: int = PROBE_COUNT) -> list[int]:
    """``count`` token ids spread evenly over the used (non-skipped) ids in id order."""
    skipped = skipped_ids(vocab)
    used = sorted(i for i in vocab.values() if i not in skipped)
    step = len(used) / count
    return [used[int(k * step)] for k in range(count)]


def probe_cosines(table: np.ndarray, ids: list[int]) -> np.ndarray:
    """(len(ids), len(ids)) float64: cosine similarity between the rows ``ids`` of ``table``."""
    rows = np.asarray(table[ids], dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = rows / np.where(norms == 0, 1.0, norms)
    return rows @ rows.T


def load_probe(path: Path = PROBE_FILE) -> dict:
    """The reference of :data:`PROBE_FILE`: ``{"recipe", "ids", "cosines", "made_on"}``. Raises
    DistillError when it is missing or malformed (a broken install)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        ids, cosines = [int(i) for i in data["ids"]], np.asarray(data["cosines"], dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DistillError(f"the static model's reference {path} cannot be read: {exc}") from exc
    if cosines.shape != (len(ids), len(ids)):
        raise DistillError(f"the static model's reference {path} is malformed: {cosines.shape} cosines for {len(ids)} ids")
    return {**data, "ids": ids, "cosines": cosines}


def check_geometry(path: Path, vocab_size: int, probe: dict | None = None) -> float:
    """Check the distilled table at ``path`` against the reference; returns the Pearson
    correlation between its probe cosines and the reference's (1 = the same geometry).

    Raises DistillError when the file is not a (``vocab_size``, :data:`DIM`) float32 table of
    finite numbers, or when the correlation with ``probe`` (:func:`load_probe` when None) is
    below :data:`PROBE_MIN_CORRELATION`.
    """
    probe = load_probe() if probe is None else probe
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DistillError(f"the distilled table {path} cannot be read: {exc}") from exc
    if table.shape != (vocab_size, DIM) or table.dtype != np.float32 or not np.isfinite(table).all():
        raise DistillError(f"the distilled table {path} is {table.dtype} {table.shape}, not finite float32 "
                           f"({vocab_size}, {DIM})")
    if probe.get("recipe") != RECIPE_VERSION or max(probe["ids"], default=-1) >= vocab_size:
        raise DistillError(f"the static model's reference is for recipe {probe.get('recipe')}, not {RECIPE_VERSION}")
    pairs = np.triu_indices(len(probe["ids"]), 1)
    ours, theirs = probe_cosines(table, probe["ids"])[pairs], probe["cosines"][pairs]
    correlation = float(np.corrcoef(ours, theirs)[0, 1]) if ours.std() > 0 else 0.0
    if not correlation >= PROBE_MIN_CORRELATION:
        raise DistillError(f"the distilled table's geometry differs from the reference: its probe cosines "
                           f"correlate {correlation:.3f} with the reference's (at least {PROBE_MIN_CORRELATION})")
    return correlation


def read_manifest(folder: Path) -> dict | None:
    """The distillation's manifest in ``folder``, or None when absent or unreadable."""
    return load_manifest(folder / MANIFEST_FILE)


def skipped_ids(vocab: dict[str, int]) -> set[int]:
    """Token ids that get a zero row: special tokens (``[...]``) and tokens not spelled in ASCII."""
    return {i for token, i in vocab.items()
            if (token.startswith("[") and token.endswith("]")) or not token.isascii()}


def token_vectors(source: bytes, vocab: dict[str, int], cls_id: int, sep_id: int) -> np.ndarray:
    """Step 2: (len(vocab), 384) float32, row i the mean-pooled output of ``[CLS] i [SEP]``.

    The tokens of :func:`skipped_ids` get zero rows. :data:`DISTILL_THREADS` intra-op threads (one and
    two gave bit-identical rows: onnxruntime's CPU kernels split work across threads without
    changing the order of any sum).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = DISTILL_THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    output = session.get_outputs()[0].name
    size = max(vocab.values()) + 1
    skipped = skipped_ids(vocab)
    wanted = np.array([i for i in range(size) if i not in skipped], dtype=np.int64)
    out = None
    for start in range(0, len(wanted), DISTILL_BATCH):
        ids = wanted[start:start + DISTILL_BATCH]
        seq = np.stack([np.full(len(ids), cls_id), ids, np.full(len(ids), sep_id)], axis=1).astype(np.int64)
        feed = {"input_ids": seq, "attention_mask": np.ones_like(seq)}
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.zeros_like(seq)
        hidden = session.run([output], feed)[0]
        pooled = hidden.mean(axis=1) if hidden.ndim == 3 else hidden
        if out is None:
            out = np.zeros((size, pooled.shape[1]), dtype=np.float32)
        out[ids] = pooled
    assert out is not None
    return out


def reduce(vectors: np.ndarray, used: np.ndarray, dim: int = DIM) -> np.ndarray:
    """Step 3: rows of ``vectors`` (n, d) projected on their top ``dim`` principal axes.

    ``used``: boolean mask of the rows that take part (the others stay zero).
    Float64 throughout; eigenvectors signed so their largest component is positive.
    """
    data = vectors[used].astype(np.float64)
    centred = data - data.mean(axis=0)
    cov = centred.T @ centred / max(len(centred) - 1, 1)
    values, axes = np.linalg.eigh(cov)
    order = np.argsort(-values, kind="stable")[:dim]
    axes = axes[:, order]
    signs = np.sign(axes[np.argmax(np.abs(axes), axis=0), np.arange(axes.shape[1])])
    axes = axes * np.where(signs == 0, 1.0, signs)
    out = np.zeros((len(vectors), axes.shape[1]), dtype=np.float64)
    out[used] = centred @ axes
    return out


def sif_weights(size: int, used: np.ndarray, a: float = SIF_A) -> np.ndarray:
    """Step 4: ``a / (a + p)`` per vocabulary id, ``p ∝ 1 / rank`` over the used ids in id order."""
    ranks = np.zeros(size, dtype=np.float64)
    ranks[used] = np.arange(1, int(used.sum()) + 1)
    prob = np.zeros(size, dtype=np.float64)
    prob[used] = 1.0 / ranks[used]
    prob /= prob.sum()
    return np.where(used, a / (a + prob), 0.0)


def distill_file(source: bytes, tokenizer_path: Path, out_path: Path) -> None:
    """Run the whole recipe in this process: verified ONNX bytes → ``out_path`` (.npy)."""
    vocab = json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))["model"]["vocab"]
    size = max(vocab.values()) + 1
    raw = token_vectors(source, vocab, vocab["[CLS]"], vocab["[SEP]"])
    used = np.zeros(size, dtype=bool)
    skipped = skipped_ids(vocab)
    used[[i for i in range(size) if i not in skipped]] = True
    table = reduce(raw, used) * sif_weights(size, used)[:, None]
    buffer = io.BytesIO()
    np.save(buffer, table.astype("<f4"), allow_pickle=False)
    out_path.write_bytes(buffer.getvalue())


def distill(source: bytes, source_sha256: str, tokenizer_path: Path, folder: Path,
            timeout: float = DISTILL_TIMEOUT_S) -> str:
    """Distil into ``folder``/static.npy in a child process; returns the table's sha256.

    Same discipline as :func:`cogd.embed.derive.derive`: a private folder (0700,
    refused when others can write it), the source bytes re-hashed after they are
    written, the result renamed into place only after it passed :func:`check_geometry`, a
    manifest beside it recording its sha256 (checked on every load). Raises DistillError.
    """
    from cogd.embed.derive import _private_dir, sha256_file, DeriveError

    try:
        _private_dir(folder)
    except DeriveError as exc:
        raise DistillError(str(exc)) from exc
    fd, tmp_src = tempfile.mkstemp(prefix=".src-", suffix=".onnx", dir=folder)
    tmp_out = Path(tempfile.mkstemp(prefix=".out-", suffix=".npy", dir=folder)[1])
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(source)
        if hashlib.sha256(Path(tmp_src).read_bytes()).hexdigest() != source_sha256:
            raise DistillError(f"the source bytes written to {tmp_src} do not hash to {source_sha256}")
        scratch = tempfile.mkdtemp(prefix=".tmp-", dir=folder)
        # One BLAS thread: the covariance product is then summed in one order on every run.
        env = {**os.environ, "TMPDIR": scratch, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        try:
            proc = subprocess.run([sys.executable, "-m", "cogd.embed.static", tmp_src, str(tokenizer_path),
                                   str(tmp_out)], capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as exc:
            raise DistillError(f"distilling the static model took more than {timeout:.0f} s") from exc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise DistillError(f"distilling the static model failed (exit {proc.returncode}): {tail}")
        os.chmod(tmp_out, 0o600)
        vocab_size = max(json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))["model"]["vocab"].values()) + 1
        correlation = check_geometry(tmp_out, vocab_size)
        digest = sha256_file(tmp_out)
        ort_version, np_version = tool_versions()
        os.replace(tmp_out, folder / STATIC_FILE)
        manifest = {"name": STATIC_NAME, "recipe": RECIPE_VERSION, "recipe_text": RECIPE,
                    "source_sha256": source_sha256, "sha256": digest, "dim": DIM,
                    "onnxruntime": ort_version, "numpy": np_version, "cpu": cpu_class(),
                    "probe_correlation": round(correlation, 6)}
        write_manifest(folder / MANIFEST_FILE, manifest)
        return digest
    finally:
        remove_quietly(Path(tmp_src), tmp_out)


def write_probe(table_path: Path, tokenizer_path: Path) -> dict:
    """The reference :data:`PROBE_FILE` holds, computed from the table at ``table_path``."""
    vocab = json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))["model"]["vocab"]
    ids = probe_ids(vocab)
    cosines = probe_cosines(np.load(table_path, allow_pickle=False), ids)
    return {"recipe": RECIPE_VERSION, "made_on": cpu_class(), "onnxruntime": tool_versions()[0],
            "numpy": tool_versions()[1], "ids": ids, "cosines": [[round(float(c), 5) for c in row] for row in cosines]}


def _main(argv: list[str]) -> int:
    """Child entry point: ``python -m cogd.embed.static SOURCE.onnx TOKENIZER.json OUT.npy``;
    ``--probe TABLE.npy TOKENIZER.json`` prints the reference for :data:`PROBE_FILE` instead."""
    if len(argv) == 3 and argv[0] == "--probe":
        print(json.dumps(write_probe(Path(argv[1]), Path(argv[2]))))
        return 0
    if len(argv) != 3:
        print("usage: python -m cogd.embed.static SOURCE.onnx TOKENIZER.json OUT.npy", file=sys.stderr)
        return 2
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    distill_file(Path(argv[0]).read_bytes(), Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
