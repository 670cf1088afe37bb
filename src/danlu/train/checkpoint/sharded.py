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


def agree(failure: BaseException | None, what: str, other: type[Exception] = RuntimeError) -> None:
    """Collective: raise on every rank when ``what`` failed on any rank.

    A rank whose own step failed re-raises its ``failure``; the others raise an error naming
    the first rank that failed and its message: an :class:`OSError` with the same errno
    when it was one (so a full disk reads the same on every rank), else ``other``. Without
    it a rank whose step failed leaves the others waiting in the next collective until the
    process group's timeout, or going on alone.
    """
    dist = torch.distributed
    _, world = distributed_world()
    outcome = None if failure is None else (str(failure), getattr(failure, "errno", None))
    outcomes: list[tuple[str, int | None] | None] = [None] * world
    dist.all_gather_object(outcomes, outcome)
    if failure is not None:
        raise failure
    for rank, outcome_of_rank in enumerate(outcomes):
        if outcome_of_rank is not None:
            message, code = outcome_of_rank
            text = f"{what} failed on rank {rank}: {message}"
            raise OSError(code, text) if isinstance(code, int) else other(text)


def save_sharded(state: dict[str, Any], path: str) -> list[str]:
    """Collective: every rank writes its shards of ``state`` under the local ``path``.

    Returns the names of the files written (rank 0 only; other ranks get ``[]``), once
    every rank's shards are written, so rank 0 can checksum them all. A failure on any rank
    raises on every rank (DCP gathers its own; :func:`agree` the rest).
    """
    from torch.distributed.checkpoint import state_dict_saver

    rank, _ = distributed_world()
    skeleton, tensors = codec.encode(state)
    failure: BaseException | None = None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        failure = exc
    agree(failure, f"creating {path}")
    state_dict_saver.save(tensors, checkpoint_id=path)
    names: list[str] = []
    if rank == 0:
        try:
            with open(os.path.join(path, SKELETON), "wb") as f:
                f.write(json.dumps(skeleton).encode())
                f.flush()
                os.fsync(f.fileno())
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


def load_sharded(path: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a state written by :func:`save_sharded`.

    With a ``template`` (a state of the same structure whose tensors may be DTensors or
    sharded), DCP fills it in place, resharding as needed. Without one, every tensor is
    loaded whole on this rank, shaped as the checkpoint's metadata says. Works with or
    without an initialised process group.
    """
    from torch.distributed.checkpoint import filesystem, metadata, state_dict_loader
    from torch.distributed.checkpoint.api import CheckpointException

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
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        raise DataError(f"{path}: cannot load sharded checkpoint: {exc}") from exc
    return codec.decode(skeleton, tensors)  # type: ignore[no-any-return]
