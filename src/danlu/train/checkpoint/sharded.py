"""Sharded / distributed state through ``torch.distributed.checkpoint`` (DCP).

Only tensors go through DCP (every rank writes its own shards; DTensor/ShardedTensor are
written shard by shard, replicated tensors once); the structure of the state goes to a JSON
skeleton written by rank 0, so nothing is pickled. :class:`CheckpointManager` uses these
when ``torch.distributed`` is initialised with a world size above one.

DCP's own ``.metadata`` file is a pickle (``FileSystemReader.read_metadata`` is
``pickle.load``). It is read here with a restricted unpickler instead, which resolves only
the classes DCP's metadata is made of (:data:`_ALLOWED`), and checked before DCP sees it: every
entry a tensor, every data file a plain name listed in the checkpoint's manifest.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import warnings
from typing import Any

import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec
from danlu.train.checkpoint.fields import passing_os_error

SKELETON = "skeleton.json"
METADATA = ".metadata"
"""DCP's metadata file (a pickle; read only through :func:`read_metadata`)."""

_ALLOWED: dict[str, tuple[str, ...]] = {
    "torch.distributed.checkpoint.metadata": (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",  # resolved, then rejected by the check with a clear error
        "TensorProperties",
        "ChunkStorageMetadata",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    ),
    "torch.distributed.checkpoint.filesystem": ("_StorageInfo",),
    "torch.serialization": ("_get_layout",),
    "torch": ("Size",),  # and the dtypes, see _MetadataUnpickler.find_class
    "pathlib": ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"),
    "builtins": ("set", "frozenset"),
    "collections": ("OrderedDict",),
}
"""The only globals a DCP ``.metadata`` pickle may name: data classes and constructors
without side effects."""


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`_ALLOWED` globals and torch dtypes."""

    def find_class(self, module: str, name: str) -> Any:
        dtype = vars(torch).get(name) if module == "torch" else None  # no lazy imports
        if isinstance(dtype, torch.dtype):
            return dtype
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed")


def distributed_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, ``(0, 1)`` without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def agree(failure: BaseException | None, what: str, other: type[Exception] = RuntimeError) -> None:
    """Collective: raise on every rank when ``what`` failed on any rank.

    A rank whose own step failed re-raises its ``failure``; the others raise an error naming
    every rank that failed and its message (``"<what> failed on rank 1: ...; on rank 3:
    ..."``): an :class:`OSError` with the first one's errno when it was one (so a full disk
    reads the same on every rank), else ``other``. Without it a rank whose step failed
    leaves the others waiting in the next collective until the process group's timeout, or
    going on alone.
    """
    dist = torch.distributed
    _, world = distributed_world()
    outcome = None if failure is None else (str(failure), getattr(failure, "errno", None))
    outcomes: list[tuple[str, int | None] | None] = [None] * world
    dist.all_gather_object(outcomes, outcome)
    if failure is not None:
        raise failure
    failed = [(rank, said) for rank, said in enumerate(outcomes) if said is not None]
    if failed:
        code = failed[0][1][1]
        ranks = "; on ".join(f"rank {rank}: {message}" for rank, (message, _) in failed)
        text = f"{what} failed on {ranks}"
        raise OSError(code, text) if isinstance(code, int) else other(text)


def _write_synced(path: str, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_sharded(
    state: dict[str, Any], path: str, first: tuple[str, bytes] | None = None
) -> list[str]:
    """Collective: every rank writes its shards of ``state`` under the local ``path``.

    Returns the names of the files written (rank 0 only; other ranks get ``[]``), once
    every rank's shards are written, so rank 0 can checksum them all. A failure on any rank
    raises on every rank (DCP gathers its own; :func:`agree` the rest). ``first``: a file
    ``(name, data)`` rank 0 writes before any shard (the checkpoint's ``meta.json``, naming
    its run), so that a save that dies part way still tells whose it was.
    """
    from torch.distributed.checkpoint import state_dict_saver

    rank, _ = distributed_world()
    skeleton, tensors = codec.encode(state)
    failure: BaseException | None = None
    try:
        os.makedirs(path, exist_ok=True)
        if rank == 0 and first is not None:
            _write_synced(os.path.join(path, first[0]), first[1])
    except OSError as exc:
        failure = exc
    agree(failure, f"creating {path}")
    state_dict_saver.save(tensors, checkpoint_id=path)
    names: list[str] = []
    if rank == 0:
        try:
            _write_synced(os.path.join(path, SKELETON), json.dumps(skeleton).encode())
            names = sorted(os.listdir(path))
            for name in names:  # DCP does not fsync: make every shard durable
                fd = os.open(os.path.join(path, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException as exc:
            failure = exc
    agree(failure, f"writing {path}")
    return names


def read_metadata(path: str, files: set[str] | None = None) -> Any:
    """DCP's metadata of the checkpoint at ``path``, unpickled with only :data:`_ALLOWED`
    classes and checked: every entry a tensor, every data file a plain name (in ``files``
    when given). Raises :class:`DataError` for anything else, but the ``OSError`` of a read
    that failed for a passing reason (``EIO``, a permission: not a missing file), which
    says nothing of the checkpoint: as a :class:`DataError` it marked a sound checkpoint
    damaged, and retention deleted it."""
    from torch.distributed.checkpoint import filesystem, metadata

    where = os.path.join(path, METADATA)
    try:
        with open(where, "rb") as f:
            data = f.read()
        md = _MetadataUnpickler(io.BytesIO(data)).load()
    except FileNotFoundError as exc:
        raise DataError(f"{where}: unreadable: {exc}") from exc
    except OSError:
        raise  # a passing failure (EIO, a permission): not damaged, kept (fields.damaged)
    except Exception as exc:  # UnpicklingError, and what a malformed stream raises
        raise DataError(f"{where}: not a DCP metadata file: {exc}") from exc
    if not (
        isinstance(md, metadata.Metadata)
        and isinstance(md.state_dict_metadata, dict)
        and isinstance(md.storage_data, dict)
    ):
        raise DataError(f"{where}: not a DCP metadata file")
    for key, entry in md.state_dict_metadata.items():
        if not (
            isinstance(key, str)
            and isinstance(entry, metadata.TensorStorageMetadata)
            and isinstance(entry.properties, metadata.TensorProperties)
            and isinstance(entry.properties.dtype, torch.dtype)
            and isinstance(entry.size, torch.Size)
            and isinstance(entry.chunks, list)
            and all(isinstance(c, metadata.ChunkStorageMetadata) for c in entry.chunks)
        ):
            raise DataError(f"{path}: entry {key!r} is not a tensor")
    for index, info in md.storage_data.items():
        if not (
            isinstance(index, metadata.MetadataIndex)
            and isinstance(info, filesystem._StorageInfo)
            and isinstance(info.offset, int)
            and isinstance(info.length, int)
            and info.offset >= 0
            and info.length >= 0
        ):
            raise DataError(f"{where}: malformed storage entry {index!r}")
        name = info.relative_path
        if not (
            isinstance(name, str)
            and name not in ("", ".", "..")
            and not any(c in name for c in ("/", "\\", "\0"))
            and (files is None or name in files)
        ):
            raise DataError(f"{where}: data file {name!r} is not a file of the checkpoint")
    return md


def _reader(path: str, md: Any) -> Any:
    """A DCP ``FileSystemReader`` of ``path`` that hands DCP the already checked ``md``
    instead of unpickling the metadata file itself."""
    from torch.distributed.checkpoint import filesystem, metadata

    class _CheckedReader(filesystem.FileSystemReader):
        def read_metadata(self) -> Any:  # no **kwargs: DCP then never asks per rank
            if md.storage_meta is None:
                md.storage_meta = metadata.StorageMeta()
            md.storage_meta.load_id = self.load_id
            return md

    return _CheckedReader(path)


def load_sharded(
    path: str, template: dict[str, Any] | None = None, files: set[str] | None = None
) -> dict[str, Any]:
    """Load a state written by :func:`save_sharded`.

    With a ``template`` (a state of the same structure whose tensors may be DTensors or
    sharded), DCP fills it in place, resharding as needed. Without one, every tensor is
    loaded whole on this rank, shaped as the checkpoint's metadata says. Works with or
    without an initialised process group. ``files``: the names of the checkpoint's files
    (its manifest's); DCP may read no other. Nothing is unpickled but the metadata, through
    :func:`read_metadata`; whatever is wrong raises :class:`DataError` (a read of the
    skeleton, the metadata or a shard that failed for a passing reason, an ``OSError`` with
    its errno).
    """
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with open(os.path.join(path, SKELETON), "rb") as f:
            skeleton = json.loads(f.read())
    except (FileNotFoundError, ValueError) as exc:
        raise DataError(f"{path}: unreadable sharded-checkpoint skeleton: {exc}") from exc
    md = read_metadata(path, files)
    if template is not None:
        _, tensors = codec.encode(template)
    else:
        tensors = {}
        for key, entry in md.state_dict_metadata.items():
            try:
                tensors[key] = torch.empty(entry.size, dtype=entry.properties.dtype)
            except (RuntimeError, TypeError, ValueError) as exc:
                raise DataError(f"{path}: entry {key!r}: {exc}") from exc
    _, world = distributed_world()
    try:
        with warnings.catch_warnings():  # DCP warns that it loads in a single process
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            state_dict_loader.load(tensors, storage_reader=_reader(path, md), no_dist=world == 1)
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        passing = passing_os_error(exc)
        if passing is not None:  # an EIO reading a shard: not damaged, kept (fields.damaged)
            raise OSError(
                passing.errno, f"{path}: cannot read sharded checkpoint: {passing}"
            ) from exc
        raise DataError(f"{path}: cannot load sharded checkpoint: {exc}") from exc
    try:
        return codec.decode(skeleton, tensors)  # type: ignore[no-any-return]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: skeleton does not match the tensors: {exc}") from exc
