"""Derive the int8 per-channel encoder from the bundled model's verified bytes.

Why: the bundled all-MiniLM-L6-v2 file stores int8 weights behind Cast/Mul
dequantise nodes, which onnxruntime folds to float32 at load, so every run
is a float32 transformer. Re-quantising those weights for onnxruntime's
integer kernels (``MatMulInteger`` after ``DynamicQuantizeLinear``) roughly
doubles throughput on AVX2/VNNI CPUs. Measured on the bundled model (two
intra-op threads, standard-library texts): cosine to the float32 vectors
mean 0.995, min 0.989 with one scale per output channel of each weight,
but only 0.95 with one scale per tensor or when the attention's
activation × activation products are quantised too — so both are avoided.
The embedding tables (``Gather``) are stored as int8 as well: the file
shrinks from 58.6 to 22.8 MB and a loaded session from about 140 to 100 MB
of RSS, for a cosine change of 0.0005 (mean 0.9954 → 0.9949 on 160
standard-library functions at 128 tokens).

Recipe (:data:`RECIPE`, version :data:`RECIPE_VERSION`):

1. the bundled ``model.onnx``, as bytes whose sha256 was just checked;
2. onnxruntime's basic graph optimisations (constant folding) written out
   with ``optimized_model_filepath``: the float32 graph, dequantise folded;
3. ``onnxruntime.quantization.quantize_dynamic`` with ``QInt8`` weights,
   ``per_channel=True``, on the ``Gather`` nodes (embedding tables) and on the
   ``MatMul`` nodes whose second input is a weight (an initializer); the
   MatMuls between two activations are excluded.

The work runs in a child process (``python -m cogd.embed.derive SRC OUT``)
so that the ``onnx`` package and the float32 graph (~90 MB as protobuf, a few
hundred MB while quantising) never enter the daemon's memory; it takes
5–15 s once per machine and version of the recipe. The result lives in the
private runtime directory (:func:`cache_dir`: ``<runtime dir>/models``,
folder 0700, file 0600) next to a manifest
holding its sha256. The derivation is deterministic for fixed versions of
onnxruntime and onnx (two derivations give the same bytes), so for the
versions cogd pins the expected sha256 is pinned too
(:data:`PINNED_DERIVED`); for other versions the manifest's hash, written
by this user's derivation, is the reference. Either way the derived file is
hashed on every load and a mismatch is re-derived from the bundled bytes
(a tampered or truncated file is never loaded).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE_VERSION = 2
RECIPE = "ort-basic-fold+quantize_dynamic(QInt8,per_channel,weight-MatMuls+Gather)"
DERIVED_NAME = "all-MiniLM-L6-v2-int8pc"
DERIVED_FILE = "model.onnx"
MANIFEST_FILE = "derived.json"
DERIVE_TIMEOUT_S = 600  # a loaded two-core laptop: the usual 5-15 s can stretch a lot

#: sha256 of the derived file for (source sha256, onnxruntime version, onnx version).
PINNED_DERIVED = {
    ("8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", "1.31.1", "1.23.2"):
        "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454",
}


class DeriveError(RuntimeError):
    """The derivation failed (missing ``onnx`` package, child error, timeout)."""


def cache_dir() -> Path:
    """Where derived models live: ``models/`` in cogd's private per-user runtime directory.

    That is :func:`cogd.paths.runtime_dir` (``$XDG_RUNTIME_DIR/cogd``, ``/tmp/cogd-<uid>`` or
    ``~/.cache/cogd/run``, the first that is a real 0700 directory of this user), the one place
    outside a repository's ``.cogd/`` that cogd writes to. A runtime directory may be emptied at
    reboot; the model is then derived again (5–15 s, in the background). Raises
    :class:`cogd.rpc.locate.RuntimeDirError` when no candidate is usable.
    """
    from cogd.paths import runtime_dir

    return Path(runtime_dir()) / "models"


def tool_versions() -> tuple[str, str | None]:
    """(onnxruntime version, onnx version or None when onnx is not installed), without importing onnx."""
    import onnxruntime
    from importlib import metadata

    try:
        onnx_version: str | None = metadata.version("onnx")
    except metadata.PackageNotFoundError:
        onnx_version = None
    return onnxruntime.__version__, onnx_version


def _quantize(fp32_path: Path, out_path: Path) -> None:
    """Step 3 of the recipe: ``fp32_path`` → int8 per-channel ``out_path`` (needs the onnx package)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(fp32_path))
    weights = {init.name for init in model.graph.initializer}
    # MatMuls of two activations (attention scores and context): keep them float32.
    activation_only = [n.name for n in model.graph.node
                       if n.op_type == "MatMul" and not any(i in weights for i in n.input)]
    del model
    quantize_dynamic(str(fp32_path), str(out_path), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "Gather"], nodes_to_exclude=activation_only, per_channel=True)


def derive_file(source: bytes, out_path: Path) -> None:
    """Run the whole recipe in this process: ``source`` (verified ONNX bytes) → ``out_path``.

    Steps 2 and 3 go through a temporary folder beside ``out_path`` (private,
    like it) that is removed afterwards. Raises whatever onnxruntime/onnx raise; used by the child
    process of :func:`derive`.
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix=".derive-", dir=out_path.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(fp32)
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        _quantize(fp32, out_path)


def _private_dir(path: Path) -> None:
    """Create ``path`` (and parents) as folders only this user can enter; refuse one others can write."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise DeriveError(f"{path} is not a private folder of yours (owner uid {st.st_uid}, "
                          f"mode {st.st_mode & 0o7777:04o}): refused. Fix: chmod 700 {path}.")
    os.chmod(path, 0o700)


def sha256_file(path: Path) -> str:
    """64 hex digits of ``path``'s content (raises OSError)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def derived_dir(source_sha256: str) -> Path:
    """The cache folder of the model derived from the source with this sha256, for this recipe."""
    return cache_dir() / f"{DERIVED_NAME}-r{RECIPE_VERSION}-{source_sha256[:16]}"


def expected_sha256(source_sha256: str, manifest: dict | None) -> str | None:
    """The hash a derived file must have: the pinned one for these tool versions, else the manifest's."""
    ort_version, onnx_version = tool_versions()
    pinned = PINNED_DERIVED.get((source_sha256, ort_version, onnx_version or ""))
    if pinned:
        return pinned
    return manifest_sha256(manifest, source_sha256, RECIPE_VERSION)


def read_manifest(folder: Path) -> dict | None:
    """The derivation's manifest in ``folder``, or None when absent or unreadable."""
    return load_manifest(folder / MANIFEST_FILE)


def manifest_sha256(manifest: dict | None, source_sha256: str, recipe: int) -> str | None:
    """The output hash ``manifest`` records (64 hex characters) when it was made from
    ``source_sha256`` by ``recipe``; None otherwise (a manifest of another source or recipe,
    or a malformed one, vouches for nothing)."""
    if manifest and manifest.get("source_sha256") == source_sha256 and manifest.get("recipe") == recipe:
        value = manifest.get("sha256")
        return value if isinstance(value, str) and len(value) == 64 else None
    return None


def load_manifest(path: Path) -> dict | None:
    """The JSON object at ``path`` (a manifest :func:`write_manifest` wrote), or None when the
    file is absent, unreadable, not JSON or not an object. Raises nothing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def derive(source: bytes, source_sha256: str, folder: Path, timeout: float = DERIVE_TIMEOUT_S) -> str:
    """Derive into ``folder``/model.onnx from ``source``; returns the derived file's sha256.

    The child process writes a temporary file in ``folder`` that is renamed
    into place only after it hashed to the pinned value (when one is pinned
    for these versions), so a concurrent reader never sees a partial file and
    two daemons deriving at once both end with the same bytes. Raises
    DeriveError with the child's last error lines.
    """
    ort_version, onnx_version = tool_versions()
    if onnx_version is None:
        raise DeriveError("the onnx package is needed once to derive the int8 model "
                          "(pip install onnx==1.23.2), or set embed.model = \"minilm\"")
    _private_dir(folder)
    fd, tmp_src = tempfile.mkstemp(prefix=".src-", suffix=".onnx", dir=folder)
    tmp_out = Path(tempfile.mkstemp(prefix=".out-", suffix=".onnx", dir=folder)[1])
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(source)
        if hashlib.sha256(Path(tmp_src).read_bytes()).hexdigest() != source_sha256:
            raise DeriveError(f"the source bytes written to {tmp_src} do not hash to {source_sha256}")
        try:
            # TMPDIR: onnxruntime.quantization and its helpers write scratch files through
            # tempfile (one leaves a small session file behind); they go to a private folder
            # that is removed afterwards, not to a world-visible /tmp.
            scratch = tempfile.mkdtemp(prefix=".tmp-", dir=folder)
            try:
                proc = subprocess.run([sys.executable, "-m", "cogd.embed.derive", tmp_src, str(tmp_out)],
                                      capture_output=True, text=True, timeout=timeout,
                                      env={**os.environ, "TMPDIR": scratch})
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        except subprocess.TimeoutExpired as exc:
            raise DeriveError(f"deriving the int8 model took more than {timeout:.0f} s") from exc
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise DeriveError(f"deriving the int8 model failed (exit {proc.returncode}): {tail}")
        os.chmod(tmp_out, 0o600)
        digest = sha256_file(tmp_out)
        pinned = PINNED_DERIVED.get((source_sha256, ort_version, onnx_version))
        if pinned and digest != pinned:
            raise DeriveError(f"the derived int8 model hashes to {digest}, not the pinned {pinned} "
                              f"(onnxruntime {ort_version}, onnx {onnx_version})")
        os.replace(tmp_out, folder / DERIVED_FILE)
        manifest = {"name": DERIVED_NAME, "recipe": RECIPE_VERSION, "recipe_text": RECIPE,
                    "source_sha256": source_sha256, "sha256": digest,
                    "onnxruntime": ort_version, "onnx": onnx_version}
        write_manifest(folder / MANIFEST_FILE, manifest)
        return digest
    finally:
        remove_quietly(Path(tmp_src), tmp_out)


def write_manifest(path: Path, manifest: dict) -> None:
    """Write ``manifest`` as JSON to ``path`` (0600), atomically: a temporary file beside it, then
    ``os.replace``, so a reader never sees half a manifest. Raises OSError."""
    tmp_manifest = path.with_name(f".{path.name}.{os.getpid()}")
    tmp_manifest.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    os.chmod(tmp_manifest, 0o600)
    os.replace(tmp_manifest, path)


def remove_quietly(*paths: Path) -> None:
    """Unlink each of ``paths``; one already gone is no error (other OSErrors propagate)."""
    for leftover in paths:
        try:
            leftover.unlink()
        except FileNotFoundError:
            pass


def _main(argv: list[str]) -> int:
    """Child entry point: ``python -m cogd.embed.derive SOURCE.onnx OUT.onnx``."""
    if len(argv) != 2:
        print("usage: python -m cogd.embed.derive SOURCE.onnx OUT.onnx", file=sys.stderr)
        return 2
    derive_file(Path(argv[0]).read_bytes(), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
