"""Snapshot stores: a shared directory (``file://``) or an S3-compatible bucket (``s3://``).

A store holds immutable objects under string keys (``<repo-id>/<commit>/manifest.json``,
``<repo-id>/<commit>/objects/<sha256>``); cogd builds every key itself from names it has
checked (commit names, hex digests), so nothing read from a store ever becomes a path.

* ``file:///some/dir`` — the embedded default: a directory on this machine or a network
  mount, no service needed. Writes go to a temporary name beside the object and are renamed
  into place, so a reader never sees half an object.
* ``s3://bucket/prefix`` — any S3-compatible service, through ``pyarrow.fs.S3FileSystem``
  (pyarrow is already a dependency, for LanceDB). ``[snapshot] endpoint`` names a service
  other than AWS, ``[snapshot] region`` its region. Credentials come from the AWS SDK's own
  sources — ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` in the
  environment first — and never from cogd's config files.

Every failure to reach or read the store raises :class:`StoreUnavailable` (kind ``snapshot``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

from cogd.errors import CogdError

COPY_CHUNK = 1 << 20
S3_TIMEOUT_S = 10.0  # connect and per-request socket timeouts (an unreachable store must not hang doctor)


class StoreUnavailable(CogdError):
    """The store cannot be reached, listed, read or written (kind ``snapshot``)."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__("snapshot", message, fix)


class TooLarge(StoreUnavailable):
    """An object is larger than the caller allowed: treated like damage, never read to the end."""


class Store:
    """The interface both stores implement; ``uri`` is the configured URI (it holds no secret)."""

    uri: str

    def read(self, key: str, limit: int) -> bytes | None:
        """The object's bytes, None when it does not exist; TooLarge past ``limit`` bytes."""
        raise NotImplementedError

    def download(self, key: str, out: BinaryIO, limit: int) -> int:
        """Copy the object into ``out``; returns the bytes copied. StoreUnavailable when it is
        missing or unreadable, TooLarge past ``limit`` bytes (``out`` then holds a prefix)."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def upload(self, key: str, src: Path) -> None:
        """Write the file ``src`` as the object ``key`` (whole or not at all)."""
        raise NotImplementedError

    def children(self, prefix: str, limit: int) -> set[str]:
        """The names one level below ``prefix`` (at most ``limit``; an absent prefix has none)."""
        raise NotImplementedError


def _copy_bounded(src: BinaryIO, out: BinaryIO, limit: int, key: str) -> int:
    copied = 0
    while True:
        chunk = src.read(COPY_CHUNK)
        if not chunk:
            return copied
        copied += len(chunk)
        if copied > limit:
            raise TooLarge(f"object {key} is larger than the {limit} bytes its manifest allows")
        out.write(chunk)


class FileStore(Store):
    """A store in a local or mounted directory."""

    def __init__(self, uri: str, base: Path):
        self.uri, self.base = uri, base

    def _path(self, key: str) -> Path:
        return self.base.joinpath(*key.split("/"))

    def read(self, key: str, limit: int) -> bytes | None:
        try:
            with open(self._path(key), "rb") as fh:
                data = fh.read(limit + 1)
        except FileNotFoundError:
            if not self.base.is_dir():
                raise StoreUnavailable(f"snapshot store {self.uri}: {self.base} is not a directory",
                                       "check [snapshot] uri (the directory must exist; a network mount must be mounted)")
            return None
        except OSError as exc:
            raise StoreUnavailable(f"snapshot store {self.uri}: cannot read {key}: {exc.strerror}") from exc
        if len(data) > limit:
            raise TooLarge(f"object {key} is larger than {limit} bytes")
        return data

    def download(self, key: str, out: BinaryIO, limit: int) -> int:
        try:
            with open(self._path(key), "rb") as fh:
                return _copy_bounded(fh, out, limit, key)
        except OSError as exc:
            raise StoreUnavailable(f"snapshot store {self.uri}: cannot read {key}: {exc.strerror}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _make_parents(self, dest: Path) -> None:
        """Create the folders between the store's base and ``dest`` readable by the team (0755),
        whatever the umask (cogd's own is 077)."""
        missing = []
        folder = dest.parent
        while folder != self.base and not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        if not self.base.is_dir():
            raise StoreUnavailable(f"snapshot store {self.uri}: {self.base} is not a directory",
                                   "create it (a shared folder or a mounted network share) or fix [snapshot] uri")
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue  # another publisher made it meanwhile
            os.chmod(folder, 0o755)

    def upload(self, key: str, src: Path) -> None:
        dest = self._path(key)
        try:
            self._make_parents(dest)
            fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as out, open(src, "rb") as fh:
                    shutil.copyfileobj(fh, out, COPY_CHUNK)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(tmp, 0o644)  # a shared store: readable by the team (it holds no secret, see README)
                os.replace(tmp, dest)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            raise StoreUnavailable(f"snapshot store {self.uri}: cannot write {key}: {exc.strerror}") from exc

    def children(self, prefix: str, limit: int) -> set[str]:
        folder = self._path(prefix)
        if not self.base.is_dir():
            raise StoreUnavailable(f"snapshot store {self.uri}: {self.base} is not a directory",
                                   "check [snapshot] uri (the directory must exist; a network mount must be mounted)")
        try:
            with os.scandir(folder) as entries:
                names: set[str] = set()
                for entry in entries:
                    names.add(entry.name)
                    if len(names) >= limit:
                        break
                return names
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise StoreUnavailable(f"snapshot store {self.uri}: cannot list {prefix}: {exc.strerror}") from exc


class S3Store(Store):
    """A store in an S3-compatible bucket (``pyarrow.fs.S3FileSystem``)."""

    def __init__(self, uri: str, bucket_path: str, endpoint: str, region: str):
        from pyarrow import fs  # pyarrow's S3 client, loaded only for an s3:// store

        options: dict = {"connect_timeout": S3_TIMEOUT_S, "request_timeout": S3_TIMEOUT_S,
                         "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=3)}
        if endpoint:
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise StoreUnavailable(f"snapshot.endpoint must be an http(s) URL, got {endpoint!r}")
            options.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
        if region:
            options["region"] = region
        self.uri, self.root = uri, bucket_path.strip("/")
        self._fs = fs.S3FileSystem(**options)  # credentials: the SDK's chain (environment first)
        self._fs_module = fs

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _failed(self, what: str, key: str, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"snapshot store {self.uri}: cannot {what} {key}: {str(exc)[:300]}",
                                "check the endpoint, the bucket and the AWS_* credentials in the environment")

    def read(self, key: str, limit: int) -> bytes | None:
        try:
            info = self._fs.get_file_info(self._path(key))
            if info.type == self._fs_module.FileType.NotFound:
                return None
            if info.size is not None and info.size > limit:
                raise TooLarge(f"object {key} is larger than {limit} bytes")
            with self._fs.open_input_stream(self._path(key)) as fh:
                data = fh.read(limit + 1)
        except StoreUnavailable:
            raise
        except (OSError, ValueError) as exc:  # pyarrow raises OSError subclasses for network and S3 errors
            raise self._failed("read", key, exc) from exc
        if len(data) > limit:
            raise TooLarge(f"object {key} is larger than {limit} bytes")
        return data

    def download(self, key: str, out: BinaryIO, limit: int) -> int:
        try:
            with self._fs.open_input_stream(self._path(key)) as fh:
                return _copy_bounded(fh, out, limit, key)
        except StoreUnavailable:
            raise
        except (OSError, ValueError) as exc:
            raise self._failed("read", key, exc) from exc

    def exists(self, key: str) -> bool:
        try:
            return self._fs.get_file_info(self._path(key)).type == self._fs_module.FileType.File
        except (OSError, ValueError) as exc:
            raise self._failed("look up", key, exc) from exc

    def upload(self, key: str, src: Path) -> None:
        try:
            with open(src, "rb") as fh, self._fs.open_output_stream(self._path(key)) as out:
                shutil.copyfileobj(fh, out, COPY_CHUNK)
        except (OSError, ValueError) as exc:
            raise self._failed("write", key, exc) from exc

    def children(self, prefix: str, limit: int) -> set[str]:
        selector = self._fs_module.FileSelector(self._path(prefix), allow_not_found=True, recursive=False)
        try:
            infos = self._fs.get_file_info(selector)
        except (OSError, ValueError) as exc:
            raise self._failed("list", prefix, exc) from exc
        return {info.base_name for info in infos[:limit]}


def open_store(uri: str, *, endpoint: str = "", region: str = "") -> Store:
    """The store ``uri`` names (``file:///dir`` or ``s3://bucket/prefix``).

    Raises StoreUnavailable for another scheme or a malformed URI; the store itself is first
    reached by the first call on it.
    """
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise StoreUnavailable(f"snapshot.uri {uri!r}: a file:// URI needs an absolute path (file:///dir)")
        return FileStore(uri, Path(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreUnavailable(f"snapshot.uri {uri!r}: an s3:// URI needs a bucket (s3://bucket/prefix)")
        if parsed.query or parsed.params or "@" in parsed.netloc:
            raise StoreUnavailable(f"snapshot.uri {uri!r}: options and credentials do not go in the URI",
                                   "use [snapshot] endpoint/region, and AWS_* environment variables for credentials")
        return S3Store(uri, f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/"), endpoint, region)
    raise StoreUnavailable(f"snapshot.uri {uri!r}: the scheme must be file:// or s3://")
