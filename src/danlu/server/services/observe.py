"""What a job reports about itself, as the scheduling policy reads it
(:attr:`danlu.sched.view.JobStatus.observed`).

``danlu.train`` reports one metric record per optimizer step (see ``docs/train.md``):
``step_time_s`` (the whole step: every micro-batch's forward and backward, the gradient
synchronisation, the optimizer), ``micro_batch``, ``accumulation`` (micro-batches per step,
1 = none), ``world_size``, ``global_batch`` and, when known, ``sync_time_s`` (the exposed
all-reduce time), ``grad_sqr`` / ``grad_var`` (the gradient-noise estimator's |G|^2 and
tr(Sigma)), ``progress`` (fraction of the work done, 0..1) and ``adaptive`` = 1 when the job
re-picks its batch in-process (``AdaptiveBatch("goodput", ...)``).

:func:`measurement` turns a batch of records into one measurement of the job's current
configuration, in the units of the policy's model (``danlu.sched.policies.danlu_model``):
``step_time`` is one micro-step (its compute plus the sync), ``sync_time`` the sync,
``accum_steps`` the micro-steps beyond the first. A multi-GPU run that did not measure its
sync time reports no ``step_time``: the model would otherwise read the sync as free.

:func:`merged` decides whether a new measurement replaces the stored one. Step times jitter;
storing every report would rebuild the job's status (and the policy's model) every round, so
a measurement of the same configuration replaces the stored one only when it moved by more
than :data:`TOLERANCE`.

:func:`observed` assembles what the policy sees: the job's limits from its spec and, while
it runs on the GPU count it was measured at, the stored measurement and its node count.
Only elastic jobs (``resources.gpus: MIN..MAX``) with a ``training.global_batch_size`` get
one: for a job with one GPU count the policy has nothing to choose.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from danlu.core.spec import JobSpec

TOLERANCE = 0.05
"""Relative change of the step time (or the sync time, or a gradient statistic) below which
a new measurement of the same configuration does not replace the stored one."""
PROGRESS_STEP = 0.01
"""Change of ``progress`` below which it is not stored again."""
MIN_STEP_TIME = 1e-6
"""Step times below a microsecond are not measurements (a goodput over them overflows)."""
MAX_STEP_TIME = 1e9
"""Step times above it (some 32 years) are not measurements either: the median of two
reports of 1e308 s overflowed to infinity, which PostgreSQL's JSON cannot hold (the whole
batch failed, and danlu.train's reporter sent it again for good)."""
MAX_STATISTIC = 1e100
"""Gradient statistics above it are not kept (their sums would overflow)."""

_SHAPE = ("local_bsz", "accum_steps", "batch_size", "num_replicas")
_KEPT = ("grad_sqr", "grad_var", "progress", "adaptive")
"""What a measurement of a new configuration keeps from the stored one when it lacks it."""


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, strings, NaN and null are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _statistic(value: Any) -> float | None:
    """``value`` as a gradient statistic (positive, below :data:`MAX_STATISTIC`), or None."""
    out = _number(value)
    return out if out is not None and 0 < out < MAX_STATISTIC else None


def _finite(measured: Mapping[str, float]) -> dict[str, float]:
    """``measured`` without the values that are not finite numbers (a JSON column cannot
    hold them on PostgreSQL, and the policy's arithmetic would spread them); ``step_time``
    and ``sync_time`` are kept or dropped together (the policy reads both)."""
    out = {
        k: float(v)
        for k, v in measured.items()
        if not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    }
    if "step_time" not in out or "sync_time" not in out:
        out.pop("step_time", None)
        out.pop("sync_time", None)
    return out


def _count(value: Any) -> int | None:
    """``value`` as an integer >= 1, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def _shape(record: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """(micro_batch, accumulation, global_batch, world_size) of a usable record."""
    step = _number(record.get("step_time_s"))
    if step is None or not MIN_STEP_TIME <= step <= MAX_STEP_TIME:
        return None
    parts = tuple(
        _count(record.get(k)) for k in ("micro_batch", "accumulation", "global_batch", "world_size")
    )
    if any(p is None for p in parts):
        return None
    micro, accumulation, batch, world = (int(p or 0) for p in parts)
    return micro, accumulation, batch, world


def measurement(records: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """One measurement of the configuration of the last usable record in ``records`` (the
    median over the records of that configuration), or None when no record is usable.

    A record is usable when ``step_time_s`` is a number from :data:`MIN_STEP_TIME` to
    :data:`MAX_STEP_TIME` and ``micro_batch``, ``accumulation``, ``global_batch`` and
    ``world_size`` are integers >= 1, and it is not a gradient-noise probe (``probe: 1``: a
    step run as two half micro-batches now and then, whose shape is not the run's).
    Gradient statistics (each below :data:`MAX_STATISTIC`) and progress come from the last
    record that has them, probes included. Within those bounds what is derived is finite."""
    shaped = [
        (s, r) for r in records if r.get("probe") not in (1, True) and (s := _shape(r)) is not None
    ]
    out: dict[str, float] = {}
    if shaped:
        shape = shaped[-1][0]
        same = [r for s, r in shaped if s == shape]
        micro, accumulation, batch, world = shape
        out.update(
            local_bsz=float(micro),
            accum_steps=float(accumulation - 1),
            batch_size=float(batch),
            num_replicas=float(world),
        )
        step = statistics.median(float(r["step_time_s"]) for r in same)
        sync: float | None = 0.0
        if world > 1:
            syncs = [v for r in same if (v := _number(r.get("sync_time_s"))) is not None]
            sync = statistics.median(syncs) if syncs else None
        if sync is not None:
            sync = min(max(sync, 0.0), step)
            compute = (step - sync) / accumulation
            out.update(step_time=compute + sync, sync_time=sync)
    for record in reversed(records):
        sqr, var = _statistic(record.get("grad_sqr")), _statistic(record.get("grad_var"))
        if sqr is not None and var is not None:
            out.update(grad_sqr=sqr, grad_var=var)
            break
    if any(record.get("adaptive") in (1, True) for record in records[-1:]):
        out["adaptive"] = 1.0  # it re-picks its batch in-process (goodput-adaptive)
    for record in reversed(records):
        progress = _number(record.get("progress"))
        if progress is not None and 0.0 <= progress <= 1.0:
            out["progress"] = progress
            break
    return out or None


def _moved(old: Mapping[str, float], new: Mapping[str, float], key: str, scale: float) -> bool:
    a, b = old.get(key), new.get(key)
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(a - b) > TOLERANCE * scale


def merged(stored: Mapping[str, float] | None, new: Mapping[str, float]) -> dict[str, float] | None:
    """The measurement to store after ``new`` arrived, or None to keep ``stored``.

    Keys ``new`` lacks keep their stored values (a batch without gradient statistics does
    not erase them) unless the configuration changed, which replaces the measurement.
    Stored values that are not finite are dropped (:func:`_finite`; SQLite once stored an
    infinite step time); ``new``, from :func:`measurement`, is finite by its bounds."""
    clean = _finite(stored) if stored else {}
    if not clean:
        return dict(new) or None
    dropped = len(clean) != len(stored or {})  # a value not finite: store the rest anew
    stored = clean
    if any(k in new and new[k] != stored.get(k) for k in _SHAPE):
        kept = {k: v for k, v in stored.items() if k in _KEPT}
        return {**kept, **new}
    out = {**stored, **new}
    step = max(stored.get("step_time", 0.0), new.get("step_time", 0.0))
    changed = (
        dropped
        or _moved(stored, out, "step_time", step)
        or _moved(stored, out, "sync_time", step)
        or _moved(stored, out, "grad_sqr", abs(stored.get("grad_sqr", 0.0)))
        or _moved(stored, out, "grad_var", abs(stored.get("grad_var", 0.0)))
        or abs(out.get("progress", 0.0) - stored.get("progress", 0.0)) >= PROGRESS_STEP
        or out.get("adaptive") != stored.get("adaptive")
    )
    return out if changed else None


def limits(spec: JobSpec, micro_batch_limit: int | None = None) -> dict[str, float]:
    """What the policy may choose for the job, from its spec; empty when it may choose
    nothing (one GPU count, or no global batch size to scale).

    ``init_batch`` is ``training.global_batch_size`` (the batch its hyper-parameters were
    tuned at), ``max_batch`` is ``training.max_batch_size`` (default: the global batch: the
    GPU count changes, the batch does not); the per-GPU micro-batch may range from 1 to
    ``micro_batch_limit`` (what the memory model predicts to fit, estimated at submission)
    or, without one, to ``max_batch`` (danlu.train halves a micro-batch that runs out of
    memory)."""
    gpus, hints = spec.resources.gpus, spec.training
    if not gpus.elastic or hints.global_batch_size is None:
        return {}
    init = hints.global_batch_size
    top = max(hints.max_batch_size or init, init)
    local = (
        top if micro_batch_limit is None or micro_batch_limit < 1 else min(top, micro_batch_limit)
    )
    return {
        "init_batch": float(init),
        "max_batch": float(top),
        "min_local_bsz": 1.0,
        "max_local_bsz": float(local),
        "target_batch": float(init),
    }


def observed(
    spec: JobSpec,
    stored: Mapping[str, float] | None,
    allocation: Sequence[Mapping[str, Any]] | None,
    *,
    micro_batch_limit: int | None = None,
) -> dict[str, float]:
    """The job's :attr:`~danlu.sched.view.JobStatus.observed`: its :func:`limits`, its
    progress, and, when it runs on as many GPUs as ``stored`` was measured at (a measurement
    from before a resize is stale), the measurement with ``num_nodes`` from ``allocation``.

    ``grad_var`` is converted to the policy's units. ``danlu.train`` reports ``tr(Sigma)``,
    the variance of a one-sample gradient; the policy's gain ``(var + sqr) / (var / scale +
    sqr)``, ``scale = batch / init_batch`` (Pollux's convention, also that of the simulated
    profiles) needs the variance of an ``init_batch`` gradient, ``tr(Sigma) / init_batch``.
    Passed on raw, the noise was read ``init_batch`` times too large, and large batches as
    nearly free."""
    out = limits(spec, micro_batch_limit)
    stored = _finite(stored) if stored else None
    if not out or not stored:
        return out
    for key in ("progress", "adaptive"):  # not tied to the GPUs it was measured on
        if key in stored:
            out[key] = stored[key]
    if allocation and stored.get("num_replicas") == float(len(allocation)):
        out.update(stored)
        out["num_nodes"] = float(len({str(s["node"]) for s in allocation}))
        if "grad_var" in stored:  # per sample -> the variance of one init_batch gradient
            out["grad_var"] = stored["grad_var"] / out["init_batch"]
    return out
