"""Sharded / distributed state through ``torch.distributed.checkpoint`` (DCP).

Only tensors go through DCP (every rank writes its own shards; DTensor/ShardedTensor are
written shard by shard, replicated tensors once); the structure of the state goes to a JSON
skeleton written by rank 0, so nothing is pickled. :class:`CheckpointManager` uses these
when ``torch.distributed`` is initialised with a world size above one.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec

SKELETON = "skeleton.json"


def distributed_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, ``(0, 1)`` without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def save_sharded(state: dict[str, Any], path: str) -> list[str]:
    """Collective: every rank writes its shards of ``state`` under the local ``path``.

    Returns the names of the files written (rank 0 only; other ranks get ``[]``), after a
    barrier, so rank 0 can checksum them all.
    """
    from torch.distributed.checkpoint import state_dict_saver

    rank, _ = distributed_world()
    skeleton, tensors = codec.encode(state)
    os.makedirs(path, exist_ok=True)
    state_dict_saver.save(tensors, checkpoint_id=path)
    if rank == 0:
        with open(os.path.join(path, SKELETON), "wb") as f:
            f.write(json.dumps(skeleton).encode())
            f.flush()
            os.fsync(f.fileno())
    torch.distributed.barrier()
    if rank != 0:
        return []
    for name in os.listdir(path):  # DCP does not fsync: make every shard durable
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return sorted(os.listdir(path))


def load_sharded(path: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a state written by :func:`save_sharded`.

    With a ``template`` (a state of the same structure whose tensors may be DTensors or
    sharded), DCP fills it in place, resharding as needed. Without one, every tensor is
    loaded whole on this rank, shaped as the checkpoint's metadata says. Works with or
    without an initialised process group.
    """
    from torch.distributed.checkpoint import filesystem, metadata, state_dict_loader

    try:
        with open(os.path.join(path, SKELETON), "rb") as f:
            skeleton = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable sharded-checkpoint skeleton: {exc}") from exc
    if template is not None:
        _, tensors = codec.encode(template)
    else:
        meta = filesystem.FileSystemReader(path).read_metadata()
        tensors = {}
        for key, md in meta.state_dict_metadata.items():
            if not isinstance(md, metadata.TensorStorageMetadata):
                raise DataError(f"{path}: entry {key!r} is not a tensor")
            tensors[key] = torch.empty(md.size, dtype=md.properties.dtype)
    _, world = distributed_world()
    try:
        with warnings.catch_warnings():  # DCP warns that it loads in a single process
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            state_dict_loader.load(tensors, checkpoint_id=path, no_dist=world == 1)
    except Exception as exc:  # DCP wraps per-rank failures in CheckpointException
        raise DataError(f"{path}: cannot load sharded checkpoint: {exc}") from exc
    return codec.decode(skeleton, tensors)  # type: ignore[no-any-return]
