"""Where checkpoints live: a local directory or any fsspec URL (``s3://bucket/prefix``).

Local writes are fsynced (file, then its directory) and small files are written through a
temporary name and ``os.replace`` so they appear whole or not at all. Object stores make
each PUT atomic by themselves, so the fsspec backend writes objects directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from typing import Any, Protocol

from danlu.core.errors import ConfigError
from danlu.core.file_url import FileUrlError, local_file_path


class Storage(Protocol):
    """The few operations a checkpoint directory needs."""

    root: str

    def join(self, *parts: str) -> str:
        """The path of ``parts`` under the root."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` durably to ``path`` (whole or not at all where supported)."""
        ...

    def read(self, path: str) -> bytes:
        """Read the whole object at ``path``; raises ``FileNotFoundError`` when absent."""
        ...

    def list_dirs(self) -> list[str]:
        """Names (not paths) of the entries directly under the root."""
        ...

    def remove_dir(self, name: str) -> None:
        """Remove the entry ``name`` under the root and all it holds; absent is fine."""
        ...

    def makedirs(self, path: str) -> None:
        """Create the directory ``path`` (no-op on object stores)."""
        ...

    def sync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` durable (no-op on object stores)."""
        ...


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (hashlib releases the GIL on large buffers)."""
    return hashlib.sha256(data).hexdigest()


HASH_CHUNK = 1 << 20
"""Bytes :func:`file_digest` reads at a time (into one reused buffer)."""


def file_digest(path: str) -> tuple[int, str]:
    """The size and hex SHA-256 of the local file ``path``, read :data:`HASH_CHUNK` bytes at a
    time: a sharded checkpoint's files (each rank's shards, gigabytes each) are checksummed
    without holding one whole in memory, as reading it to hash it did (rank 0 at each
    commit, every rank at each load's verification)."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    size = 0
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(buffer):
            digest.update(view[:count])
            size += count
    return size, digest.hexdigest()


def local_directory(directory: str) -> str | None:
    """The absolute path :func:`open_storage` writes ``directory``'s checkpoints to when it
    is local (a path, ``~`` expanded, or a file URL: ``file:///x``, ``file://localhost/x`` or
    ``file:/x``, its scheme in any case and its ``%`` escapes decoded, as the spec's checks
    and the control plane read it: :mod:`danlu.core.file_url`); ``None`` for any other URL.
    ``FILE:///x`` was passed to fsspec as a remote URL, which knows no protocol ``FILE``: a
    ``ConfigError``. A file URL naming no directory of this machine (another host, a
    relative path, an escape decoding to a NUL or to no UTF-8) is a ``ConfigError`` naming
    the setting: ``file:///tmp/my%20runs`` was written to a folder named ``my%20runs``, and
    ``file://ckpt/run1`` (the host ``ckpt``) to ``./ckpt/run1``."""
    try:
        path = local_file_path(directory)
    except FileUrlError as exc:
        raise ConfigError(
            f"checkpoint directory {exc}; give checkpoint_dir (DANLU_CHECKPOINT_DIR) an "
            "absolute path, a file:///... URL or a path (relative to the working directory, "
            "or ~/...) without the scheme"
        ) from None
    if path is not None:
        return os.path.abspath(path)
    if "://" in directory:
        return None
    return os.path.abspath(os.path.expanduser(directory))


class LocalStorage:
    """A directory on a local (or mounted) filesystem, with fsync."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"checkpoint directory {self.root} cannot be created ({exc.strerror or exc}); "
                "give checkpoint_dir (DANLU_CHECKPOINT_DIR) a directory this job can write"
            ) from None
        self._probe()

    def _probe(self) -> None:
        """Create and remove a file in the root, so that a directory that exists but cannot
        be written (a read-only mount, another user's) is a ``ConfigError`` now, not an
        ``OSError`` at the first save after training up to it. A real file, not
        ``os.access``: root passes that check whatever the mode bits say, and an NFS
        server that maps root to nobody decides only when a file is created."""
        probe = os.path.join(self.root, f".danlu-write-probe-{uuid.uuid4().hex}")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(
                f"checkpoint directory {self.root} cannot be written ({exc.strerror or exc}); "
                "give checkpoint_dir (DANLU_CHECKPOINT_DIR) a directory this job can write"
            ) from None

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:  # a full disk: the part written is not left to fill it further
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def list_dirs(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        except FileNotFoundError:
            return []

    def remove_dir(self, name: str) -> None:
        shutil.rmtree(self.join(name), ignore_errors=True)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class FsspecStorage:
    """A prefix in any fsspec filesystem (S3 via ``s3fs``, GCS, memory, ...). The URL's
    scheme is read in any case (``S3://b/p`` is ``s3://b/p``; fsspec knows only lower case
    names, and refused it as an unknown protocol)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        try:
            import fsspec  # optional dependency: only needed for URLs
        except ImportError:
            raise ConfigError(
                f"checkpoint directory {url!r} is a URL, which needs fsspec: "
                "pip install fsspec (and the package of its scheme, e.g. s3fs), "
                "or give checkpoint_dir (DANLU_CHECKPOINT_DIR) a local path"
            ) from None
        scheme, sep, rest = url.partition("://")
        try:
            fs, root = fsspec.core.url_to_fs(scheme.lower() + sep + rest, **(storage_options or {}))
        except ImportError as exc:  # the scheme's package is not installed
            raise ConfigError(
                f"checkpoint directory {url!r}: the {scheme!r} storage needs a package that "
                f"is not installed ({exc}); install it or give checkpoint_dir "
                "(DANLU_CHECKPOINT_DIR) a local path"
            ) from None
        except ValueError as exc:  # fsspec: "Protocol not known"
            raise ConfigError(
                f"checkpoint directory {url!r}: {exc}; give checkpoint_dir "
                "(DANLU_CHECKPOINT_DIR) a local path or a URL fsspec knows (s3://, gs://, "
                "memory://, ...)"
            ) from None
        self.fs = fs
        self.root = root.rstrip("/")

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def write(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)

    def read(self, path: str) -> bytes:
        data = self.fs.cat_file(path)
        assert isinstance(data, bytes)
        return data

    def list_dirs(self) -> list[str]:
        try:
            self.fs.invalidate_cache(self.root)
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        names = []
        for e in entries:
            if e.get("type") == "directory":
                names.append(str(e["name"]).rstrip("/").rsplit("/", 1)[-1])
        return sorted(names)

    def remove_dir(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.join(name), recursive=True)
        self.fs.invalidate_cache(self.root)

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def sync_dir(self, path: str) -> None:
        return None


def open_storage(directory: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """A :class:`LocalStorage` for plain paths and ``file://``, else :class:`FsspecStorage`."""
    local = local_directory(directory)
    if local is not None:
        return LocalStorage(local)
    return FsspecStorage(directory, storage_options)
