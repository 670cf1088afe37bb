"""A checkpoint's manifest (``MANIFEST.json``, the commit record written last): the names of
a checkpoint's files, the manifest as JSON (:func:`manifest_json`) and its checks as it is
read back (:func:`parse_manifest`), for :mod:`danlu.train.checkpoint.manager`."""

from __future__ import annotations

import json
import re
from typing import Any

from danlu.core.errors import DataError
from danlu.train.checkpoint.fields import CheckpointInfo, plain_name, whole_number

FORMAT = "danlu.checkpoint/1"
MANIFEST, META, TENSORS = "MANIFEST.json", "meta.json", "tensors.pt"
PREFIX = "ckpt-"
"""The start of every checkpoint directory's name."""
OWN_NAME = re.compile(r"ckpt-(?:[0-9]{12,}|-[0-9]{11,})-[0-9a-f]{8}")
"""The names a save gives its directory (``ckpt-<step:012d>-<8 hex digits>``): retention
removes only these. Another directory of the checkpoint directory that starts with ``ckpt-``
(a ``ckpt-pretrained`` of the user's, another tool's ``ckpt-epoch3``) is not danlu's to
delete: retention removed it with the rest at the first save."""
FORMAT_FAMILY = FORMAT.rsplit("/", 1)[0] + "/"
"""The start every version of the manifest's format shares (``danlu.checkpoint/``)."""


def manifest_json(info: CheckpointInfo) -> bytes:
    """The manifest of ``info`` as the bytes of ``MANIFEST.json``."""
    manifest = {
        "format": FORMAT,
        "name": info.name,
        "step": info.step,
        "kind": info.kind,
        "base": info.base,
        "created_ns": info.created_ns,
        "metrics": info.metrics,
        "files": info.files,
        "run": info.run,
    }
    return json.dumps(manifest).encode()


def parse_manifest(m: Any, name: str, where: str) -> CheckpointInfo:
    """The checkpoint ``name`` that the manifest ``m`` (read from ``where``, its JSON
    parsed; another version of the format already told apart) describes. Anything that is
    not a manifest of :data:`FORMAT` for ``name`` is a :class:`DataError` saying what."""
    try:
        if not isinstance(m, dict):  # JSON, but no manifest: skipped as invalid, not raw
            raise DataError(f"{where}: not a {FORMAT} manifest (a JSON {type(m).__name__})")
        if m.get("format") != FORMAT or m.get("name") != name:
            raise DataError(f"{where}: not a {FORMAT} manifest for {name}")
        if m.get("kind") not in ("full", "incremental", "sharded"):
            raise DataError(f"{where}: unknown kind {m.get('kind')!r}")
        base = m["base"]
        if base is not None and not (plain_name(base) and base.startswith(PREFIX)):
            raise DataError(f"{where}: base {base!r} is not a checkpoint name")
        for fname, spec in dict(m["files"]).items():
            if not plain_name(fname):
                raise DataError(f"{where}: file name {fname!r} is not a plain file name")
            if not (
                isinstance(spec, dict)
                and isinstance(spec.get("size"), int)
                and not isinstance(spec["size"], bool)  # JSON true is no byte count
                and spec["size"] >= 0
                and isinstance(spec.get("sha256"), str)
            ):
                raise DataError(f"{where}: file {fname!r} has no size and checksum")
        run = m.get("run")  # absent from checkpoints written before runs were recorded
        return CheckpointInfo(
            name=name,
            step=whole_number(m, "step", where),
            kind=m["kind"],
            base=base,
            created_ns=whole_number(m, "created_ns", where),
            metrics=dict(m["metrics"]),
            files=dict(m["files"]),
            run=run if isinstance(run, str) and run else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{where}: malformed manifest: {exc}") from exc
