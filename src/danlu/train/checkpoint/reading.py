"""Reading a checkpoint's files against its manifest (their size and SHA-256), for
:mod:`danlu.train.checkpoint.manager`: a file that does not match is a :class:`DataError`,
never loaded."""

from __future__ import annotations

import json
from typing import Any

import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec
from danlu.train.checkpoint.fields import CheckpointInfo
from danlu.train.checkpoint.manifest import META, TENSORS
from danlu.train.checkpoint.storage import LocalStorage, Storage, file_digest, sha256


def read_verified(storage: Storage, info: CheckpointInfo, fname: str) -> bytes:
    """The file ``fname`` of checkpoint ``info`` in ``storage``, read whole: a
    :class:`DataError` when its manifest does not list it, or its size or checksum differs."""
    where = storage.join(info.name, fname)
    spec = info.files.get(fname)
    if spec is None:
        raise DataError(f"{where}: not listed in the manifest")
    data = storage.read(where)
    if len(data) != int(spec["size"]) or sha256(data) != spec["sha256"]:
        raise DataError(f"{where}: size or checksum does not match the manifest")
    return data


def verify_file(storage: Storage, info: CheckpointInfo, fname: str) -> None:
    """:func:`read_verified` for a sharded checkpoint's file (listed in its manifest), hashed
    in chunks instead of read whole on a filesystem."""
    where = storage.join(info.name, fname)
    spec = info.files[fname]
    if not isinstance(storage, LocalStorage):
        read_verified(storage, info, fname)
        return
    if file_digest(where) != (int(spec["size"]), spec["sha256"]):
        raise DataError(f"{where}: size or checksum does not match the manifest")


def load_parts(
    storage: Storage, info: CheckpointInfo
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The ``meta.json`` (parsed) and the stored tensors of the full or incremental
    checkpoint ``info``, each verified (:func:`read_verified`)."""
    try:
        meta = json.loads(read_verified(storage, info, META))
    except ValueError as exc:
        raise DataError(f"{storage.join(info.name, META)}: malformed JSON: {exc}") from exc
    stored = codec.tensors_from_bytes(
        read_verified(storage, info, TENSORS), storage.join(info.name, TENSORS)
    )
    return meta, stored
