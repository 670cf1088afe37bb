"""What a checkpoint's manifest holds (:class:`CheckpointInfo`), the checks and conversions
of its values (names, whole numbers, metrics) and of a save's failure, for
:mod:`danlu.train.checkpoint.manager`."""

from __future__ import annotations

import errno
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from danlu.core.errors import ConfigError, DataError


@dataclass
class CheckpointInfo:
    """One complete checkpoint as its manifest describes it."""

    name: str
    step: int
    kind: Literal["full", "incremental", "sharded"]
    base: str | None
    created_ns: int
    metrics: dict[str, float] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: str | None = None
    """The run that wrote it (the manifest's ``run``, the same through every resume of a
    run: see :attr:`CheckpointManager.run_id`); None in a checkpoint written before runs
    were recorded."""

    @property
    def size(self) -> int:
        """Bytes of this checkpoint's own files (a base is not counted)."""
        return sum(int(f["size"]) for f in self.files.values())


def plain_name(name: object) -> bool:
    """True for a single path component read from a manifest: no separator, not ``.`` or
    ``..``, not absolute, no NUL (so joining it to a directory stays in that directory)."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in ("/", "\\", "\0"))
    )


def manifest_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metrics`` (of :meth:`CheckpointManager.save`) as the manifest stores them, in JSON:
    a one-element tensor or NumPy value as its Python number (a loss passed as a tensor, an
    accuracy as ``np.float32``). A name that is not a string, or a value JSON cannot write,
    is a :class:`ConfigError` naming the metric, before anything is written: it was a bare
    ``TypeError`` from the manifest once every file was written (an async save's, at the
    next save: the run went on without that checkpoint)."""
    out: dict[str, Any] = {}
    for key, value in dict(metrics or {}).items():
        if not isinstance(key, str):
            raise ConfigError(f"checkpoint metric name {key!r} must be a string")
        if isinstance(value, torch.Tensor | np.ndarray | np.generic) and _elements(value) == 1:
            value = value.item()
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:  # a list tensor, an object, a cycle
            raise ConfigError(
                f"checkpoint metric {key!r} cannot be stored ({exc}); give a number, such as "
                "float(value)"
            ) from None
        out[key] = value
    return out


def _elements(value: torch.Tensor | np.ndarray | np.generic) -> int:
    """How many elements a tensor or NumPy value holds."""
    return value.numel() if isinstance(value, torch.Tensor) else int(np.size(value))


def whole_number(manifest: dict[str, Any], key: str, where: str) -> int:
    """The manifest's ``key``, an integer as danlu writes it (or a float of one, ``3.0``).
    Anything else makes the manifest invalid: ``int()`` read a step of ``1.5`` as step 1 (the
    run resumed as if from a checkpoint of step 1), and a string or ``true`` as a number."""
    value = manifest[key]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"{where}: {key} {value!r} is not a whole number")
    return value


def finite_metric(info: CheckpointInfo, key: str) -> float | None:
    """``info``'s metric ``key`` as a float when it is a finite number, else None (a NaN
    or infinite loss, an integer too large for a float, or a value that is no number, never
    ranks as the best)."""
    value = info.metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past the float range (10**400): no finite value
        return None
    return number if math.isfinite(number) else None


def os_errors(exc: BaseException) -> list[OSError]:
    """The ``OSError`` instances ``exc`` is or holds: itself, or those of the ranks inside DCP's
    ``CheckpointException`` (its ``failures``: ``{rank: (exception, traceback)}``)."""
    if isinstance(exc, OSError):
        return [exc]
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return []
    return [
        found
        for pair in failures.values()
        if isinstance(pair, tuple) and pair and isinstance(pair[0], BaseException)
        for found in os_errors(pair[0])
    ]


def no_space(exc: BaseException) -> bool:
    """True for a full disk or quota, also inside DCP's per-rank ``CheckpointException``."""
    return any(e.errno in (errno.ENOSPC, errno.EDQUOT) for e in os_errors(exc))


def not_writable(exc: BaseException) -> OSError | None:
    """The ``OSError`` of a write refused by the filesystem for good (read-only, no
    permission) that ``exc`` is or holds (see :func:`os_errors`), else None."""
    refused = (errno.EROFS, errno.EACCES, errno.EPERM)
    return next((e for e in os_errors(exc) if e.errno in refused), None)


def passing_os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` of a read that failed for a passing reason (``EIO``, a permission:
    not a missing file) that ``exc`` is or holds (see :func:`os_errors`), else None: such a
    failure says nothing of the checkpoint (:func:`damaged`)."""
    return next((e for e in os_errors(exc) if not isinstance(e, FileNotFoundError)), None)


def damaged(exc: BaseException) -> bool:
    """Whether a checkpoint that failed to load with ``exc`` is damaged for good (retention
    may remove it): a :class:`DataError` (a checksum, a manifest, a layout) or a file that
    is not there. Another ``OSError`` (``EIO``, a network filesystem's or an object store's
    passing failure, a permission) says nothing about the checkpoint: it is skipped, but
    kept. Before, a restart whose read of the newest checkpoint failed once fell back past
    it and its first save's retention deleted it, the run's newest progress."""
    return isinstance(exc, DataError | FileNotFoundError)
