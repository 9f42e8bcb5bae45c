"""The static token table shipped inside cogd: its compact file format, its pin, and its loading.

Why: the first tier (``cogd.daemon.first_tier``) needs a static model that is good on code
from the first second, offline, with nothing distilled or trained at run time. The table
``cogd/embed/data/static_code.npz`` is one trained by ``scripts/train_static.py``
(:mod:`cogd.embed.static_fit`: a ridge fit of token rows to the default transformer's vectors
of standard-library entity texts; provenance and licences in ``cogd/embed/data/NOTICE``), and
stored here compactly.

Format: an uncompressed ``.npz`` (numpy's zip of ``.npy`` members, read with
``allow_pickle=False``: no pickle can run) holding exactly

* ``codes``: int8 (vocabulary, dim), the row quantised symmetrically: ``round(row / step)``
  with ``step = max |row| / 127``;
* ``scales``: float32 (vocabulary,), the ``step`` of each row (0 for an all-zero row);
* ``max_tokens``: int64 scalar, how many WordPiece tokens of a text the mean covers (the cap
  the table was trained with).

``codes * scales[:, None]`` is the table, each component within half a step of the trained
float value. A row's *size* matters here (an entity's vector is the normalised sum of its
tokens' rows, so a row's norm is its token's weight), which is why the step is kept and not
folded into a unit norm as the KNN index's :func:`cogd.index.vectors.quantize_rows` does.
:func:`write_table` writes the zip with fixed member dates, so the same table gives the same
bytes, and :data:`SHIPPED_SHA256` pins those bytes: the file is hashed on every load and a
mismatch refused (:func:`cogd.embed.model.resolve_model`, :func:`read_table`).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

SHIPPED_FILE = Path(__file__).parent / "data" / "static_code.npz"
SHIPPED_NAME = "all-MiniLM-L6-v2-static-code"
#: sha256 of :data:`SHIPPED_FILE` (written by ``scripts/train_static.py --ship``; see the NOTICE).
SHIPPED_SHA256 = "41d44ddcbb5c4727ca7981167b6064745e42f0912a3e32d777970a15dc9bfee6"
SHIPPED_DIM = 256  # the table's width (its vectors' size)
QUANT_LEVELS = 127
MEMBERS = ("codes", "scales", "max_tokens")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold: fixed, so bytes are reproducible


class TableError(ValueError):
    """The bytes are not a table of this format (wrong members, dtypes, shapes, non-finite scales)."""


def quantize(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``table`` (vocabulary, dim) float → ``(codes int8 (vocabulary, dim), scales float32 (vocabulary,))``.

    Symmetric per-row quantisation: ``step = max |row| / 127``, ``codes = round(row / step)``;
    an all-zero row gets codes 0 and scale 0. Raises TableError for a non-2-D or non-finite table.
    """
    rows = np.asarray(table, dtype=np.float64)
    if rows.ndim != 2 or not np.isfinite(rows).all():
        raise TableError(f"a table must be a finite 2-D array, got shape {rows.shape}")
    peak = np.abs(rows).max(axis=1)
    steps = np.where(peak > 0, peak / QUANT_LEVELS, 0.0)
    codes = np.rint(rows / np.where(steps > 0, steps, 1.0)[:, None]).clip(-QUANT_LEVELS, QUANT_LEVELS)
    return codes.astype(np.int8), steps.astype(np.float32)


def table_bytes(codes: np.ndarray, scales: np.ndarray, max_tokens: int) -> bytes:
    """The file's bytes for ``codes`` (int8 (V, d)), ``scales`` (float32 (V,)) and ``max_tokens``:
    an uncompressed zip of three ``.npy`` members with fixed dates (the same input, the same bytes)."""
    arrays = {"codes": np.ascontiguousarray(codes, dtype=np.int8),
              "scales": np.ascontiguousarray(scales, dtype="<f4"),
              "max_tokens": np.asarray(int(max_tokens), dtype="<i8")}
    check(arrays["codes"], arrays["scales"], int(arrays["max_tokens"]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in MEMBERS:
            member = io.BytesIO()
            np.lib.format.write_array(member, arrays[name], allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE), member.getvalue())
    return out.getvalue()


def check(codes: np.ndarray, scales: np.ndarray, max_tokens: int) -> None:
    """Raise TableError unless ``codes`` is int8 (V, d) with d > 0, ``scales`` finite float32
    (V,) and not negative, and ``max_tokens`` positive."""
    if codes.dtype != np.int8 or codes.ndim != 2 or codes.shape[1] == 0:
        raise TableError(f"codes must be int8 (vocabulary, dim), got {codes.dtype} {codes.shape}")
    if scales.dtype != np.float32 or scales.shape != (codes.shape[0],) or not np.isfinite(scales).all() \
            or (scales < 0).any():
        raise TableError(f"scales must be finite float32 ({codes.shape[0]},) >= 0, got {scales.dtype} {scales.shape}")
    if max_tokens <= 0:
        raise TableError(f"max_tokens must be positive, got {max_tokens}")


def _declared_bytes(fh) -> int:
    """The bytes of data the ``.npy`` header at ``fh``'s position declares (its shape times its
    item size), read from the header alone. Raises TableError when the header cannot be read."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _fortran, dtype = header(fh)
    except (ValueError, OSError, EOFError) as exc:
        raise TableError(f"not an .npy array: {exc}") from exc
    count = 1
    for n in shape:
        count *= int(n)  # Python integers: a crafted shape cannot overflow the product
    return count * dtype.itemsize


def load_array(data: bytes) -> np.ndarray:
    """The one ``.npy`` array in ``data`` (``allow_pickle=False``), refused (TableError) when its
    header declares more data than the bytes hold.

    Why the check: numpy allocates the declared shape before it reads a byte of data, so a
    file of a few bytes whose header claims a terabyte would fail with MemoryError, or succeed and
    take the daemon's memory, instead of being refused as a bad table. A ``model_dir`` may come from
    a repository's own ``.cogd/config.toml``.
    """
    fh = io.BytesIO(data)
    need = _declared_bytes(fh)
    if need > len(data) - fh.tell():
        raise TableError(f"the array declares {need} bytes of data but the file holds {len(data) - fh.tell()}")
    return np.load(io.BytesIO(data), allow_pickle=False)


def _check_members(data: bytes) -> None:
    """Refuse (TableError) a zip whose members are compressed or declare more data than they hold:
    a stored member is at most as large as the file, so reading it can take no more memory than
    the file's own size (a deflated one could expand a few kilobytes into gigabytes)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
                    raise TableError(f"a static table's members are stored uncompressed; {info.filename} is not")
                with archive.open(info) as fh:
                    need = _declared_bytes(fh)
                if need > info.file_size:
                    raise TableError(f"{info.filename} declares {need} bytes of data but holds {info.file_size}")
    except (OSError, zipfile.BadZipFile) as exc:
        raise TableError(f"not a static table: {exc}") from exc


def read_table(data: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    """``(codes, scales, max_tokens)`` from a file's bytes (already verified by the caller's hash).

    Raises TableError when the bytes are not a zip of exactly :data:`MEMBERS`, stored
    uncompressed and no larger than they declare (:func:`_check_members`), that :func:`check`
    accepts; numpy reads them with ``allow_pickle=False``, so an object array is refused too.
    """
    _check_members(data)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            if sorted(archive.files) != sorted(MEMBERS):
                raise TableError(f"a static table holds {', '.join(MEMBERS)}, found {', '.join(archive.files)}")
            codes, scales, max_tokens = archive["codes"], archive["scales"], archive["max_tokens"]
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        if isinstance(exc, TableError):
            raise
        raise TableError(f"not a static table: {exc}") from exc
    if max_tokens.shape != () or max_tokens.dtype.kind != "i":
        raise TableError(f"max_tokens must be an integer scalar, got {max_tokens.dtype} {max_tokens.shape}")
    check(codes, scales, int(max_tokens))
    return codes, scales, int(max_tokens)
