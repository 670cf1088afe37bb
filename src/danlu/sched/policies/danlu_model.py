"""The online per-job model of the ``danlu`` policy: throughput and goodput learned from what
each job reports (:attr:`JobStatus.observed`) and what the policy remembered (its marks).

What a job reports (``danlu.train`` in production, the profile in the simulator):
its limits (``init_batch``: the batch its hyper-parameters were tuned at; ``max_batch``;
``min_local_bsz`` / ``max_local_bsz``: the per-GPU micro-batch range the memory model allows),
its ``progress`` (fraction done), and while it runs the measured ``step_time`` / ``sync_time``
of its current placement and micro-batch plus the gradient statistics ``grad_sqr`` /
``grad_var``. Nothing else is known: no duration, no speed-up curve.

History (the policy's choice, documented in ``docs/danlu-policy-details.md``): the engine keeps no
history, the policy keeps it in the job's marks, one entry per *shape*:

- ``danlu.c:<local_bsz>`` -- compute time (step - sync) of one micro-batch of that size;
- ``danlu.s:<i|x>:<replicas>`` -- sync time at that replica count, intra-node (``i``) or
  across nodes (``x``);
- ``danlu.sqr`` / ``danlu.var`` -- the latest gradient statistics;
- ``danlu.maxr`` -- the most replicas ever measured (exploration grows from there).

The model (after Pollux's, simplified to what the marks hold):
``compute(b) = alpha + beta * b`` (least squares over the measured micro-batches),
``sync(N, R) = a_k + b_k * max(R - 2, 0)`` per link kind ``k`` (intra / inter node),
iteration time ``(accum + 1) * compute(b) + sync``, statistical gain
``(var + sqr) / (var / scale + sqr)`` with ``scale = batch / init_batch``, goodput =
gain / iteration time (progress units per second, in the units of ``init_batch``
iterations). Unmeasured link kinds get a pessimistic prior (see :data:`SYNC_PRIOR`), and a
job may only grow to twice the replicas it has been measured at, so the model explores in
steps it can correct.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

COMPUTE = "danlu.c:"
SYNC = "danlu.s:"
SPLIT = "f"
"""The link kind of a sync time measured on a split placement (see :func:`remembered`)."""
SQR = "danlu.sqr"
VAR = "danlu.var"
MAXR = "danlu.maxr"

SYNC_PRIOR = 0.3
"""Prior sync time of an unmeasured intra-node link, as a fraction of the compute time of
the smallest measured micro-batch."""
INTER_PRIOR = 10.0
"""An unmeasured inter-node link costs this many times the intra-node one (measured or
prior): network all-reduce is about an order of magnitude slower than NVLink/PCIe."""
OPTIMISTIC_INTER_PRIOR = 2.0
"""The same factor when the model explores (long jobs, for which trying a bigger size costs
little next to their remaining time)."""

_EPS = 1e-8
LIMIT_KEYS = ("init_batch", "max_batch", "min_local_bsz", "max_local_bsz")


@dataclass(frozen=True, slots=True)
class BatchSplit:
    """How ``danlu.train`` executes a global batch on ``replicas`` GPUs."""

    replicas: int
    atomic: int
    accum: int

    @property
    def batch(self) -> int:
        return self.replicas * self.atomic * (self.accum + 1)


def split_batch(
    replicas: int, batch: float, max_local: int, init_batch: int, max_batch: int
) -> BatchSplit:
    """The micro-batch and accumulation steps for ``batch`` on ``replicas`` GPUs.

    The fewest micro-batches whose size fits memory (``max_local``); a single GPU above the
    tuned batch accumulates at least once (keeps the update-to-step ratio of the tuned run);
    the micro-batch is capped so that the global batch stays within ``max_batch``.
    """
    local = max(math.ceil(batch / replicas - _EPS), 1)
    # at least 0: a local batch below _EPS of max_local (a limit of 2^30) rounded to -1
    accum = max(math.ceil(local / max_local - _EPS) - 1, 0)
    if replicas == 1 and batch > init_batch:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - _EPS)
    atomic = min(atomic, int(max_batch / (replicas * (accum + 1))))
    return BatchSplit(replicas, atomic, accum)


@dataclass(frozen=True)
class JobModel:
    """A job's fitted throughput and efficiency model (immutable; build with :func:`build`)."""

    init_batch: int
    max_batch: int
    min_local: int
    max_local: int
    alpha: float
    beta: float
    sync_fit: Mapping[str, tuple[float, float]]
    grad_sqr: float
    grad_var: float
    max_replicas_seen: int
    sync_span: Mapping[str, int] = field(default_factory=dict, kw_only=True)
    """Per link kind, the replicas beyond which the sync time is held at its value there
    (``build(..., flat_sync=True)``: across nodes, the most replicas measured there); kinds
    not in it follow their line at any count."""

    def compute_time(self, local: float) -> float:
        return self.alpha + self.beta * local

    def sync_time(self, nodes: int, replicas: int) -> float:
        if replicas <= 1:
            return 0.0
        kind = "i" if nodes <= 1 else "x"
        a, b = self.sync_fit[kind]
        span = self.sync_span.get(kind)
        if span is not None and replicas > span:
            replicas = span
        return a + b * max(replicas - 2, 0)

    def gain(self, batch: float) -> float:
        """Progress per iteration at ``batch`` relative to one at ``init_batch``."""
        scale = batch / self.init_batch
        sqr, var = self.grad_sqr, self.grad_var
        if sqr <= 0 and var <= 0:
            return 1.0
        return (var + sqr) / (var / scale + sqr)

    def iteration_time(self, nodes: int, split: BatchSplit) -> float:
        return (split.accum + 1) * self.compute_time(split.atomic) + self.sync_time(
            nodes, split.replicas
        )

    def goodput(self, nodes: int, split: BatchSplit) -> float:
        return self.gain(split.batch) / self.iteration_time(nodes, split)

    def best_batch(
        self, replicas: int, gpus_per_node: int, nodes: int | None = None
    ) -> tuple[float, int]:
        """(goodput, global batch) of the best batch on ``replicas`` GPUs packed on the
        fewest nodes (or on ``nodes`` nodes); (0, 0) when no valid batch exists there."""
        if nodes is None:
            nodes = max(1, math.ceil(replicas / max(gpus_per_node, 1)))
        # goodput inlined (the policy's hottest loop): the same arithmetic in the same order,
        # so the same floats; the splits depend on the limits only (cached)
        sync = self.sync_time(nodes, replicas)
        alpha, beta, sqr, var = self.alpha, self.beta, self.grad_sqr, self.grad_var
        flat = sqr <= 0 and var <= 0
        best_good, best_batch = 0.0, 0
        splits = batch_splits(
            self.min_local, self.max_local, self.init_batch, self.max_batch, replicas
        )
        for steps, atomic, total, scale in splits:
            gain = 1.0 if flat else (var + sqr) / (var / scale + sqr)
            good = gain / (steps * (alpha + beta * atomic) + sync)
            if good > best_good:
                best_good, best_batch = good, total
        return best_good, best_batch

    def _candidates(self, replicas: int) -> tuple[int, ...]:
        return batch_candidates(
            self.min_local, self.max_local, self.init_batch, self.max_batch, replicas
        )


@functools.lru_cache(maxsize=4096)
def batch_splits(
    min_local: int, max_local: int, init_batch: int, max_batch: int, replicas: int
) -> tuple[tuple[int, int, int, float], ...]:
    """How ``danlu.train`` would run each valid candidate of :func:`batch_candidates`
    (:func:`split_batch`): (micro-batches per step, micro-batch, global batch, global batch /
    ``init_batch``), in the candidates' order; candidates whose micro-batch falls below
    ``min_local`` or whose batch falls below ``init_batch`` once split are left out. A
    function of the limits only, so it is cached."""
    out: list[tuple[int, int, int, float]] = []
    for batch in batch_candidates(min_local, max_local, init_batch, max_batch, replicas):
        split = split_batch(replicas, batch, max_local, init_batch, max_batch)
        total = split.batch
        if split.atomic < min_local or total < init_batch:
            continue
        out.append((split.accum + 1, split.atomic, total, total / init_batch))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def batch_candidates(
    min_local: int, max_local: int, init_batch: int, max_batch: int, replicas: int
) -> tuple[int, ...]:
    """The global batches :meth:`JobModel.best_batch` tries on ``replicas`` GPUs, ascending:
    five micro-batches spread geometrically over ``[min_local, max_local]``, each with 0, 1
    or 3 accumulation steps, within ``[init_batch, max_batch]``, plus the smallest and the
    largest batch those limits allow. A function of the job's limits only, so it is cached
    (jobs keep their limits, and the jobs of one application share them)."""
    lo, hi = min_local, max_local
    points = {lo, hi}
    ratio = (hi / lo) ** 0.25 if lo > 0 else 2.0
    value = float(lo)
    for _ in range(3):
        value *= ratio
        points.add(round(value))
    out: set[int] = set()
    for local in points:
        for accum in (0, 1, 3):
            batch = replicas * local * (accum + 1)
            if init_batch <= batch <= max_batch:
                out.add(batch)
    if replicas * lo <= max_batch:
        out.add(max(init_batch, replicas * lo))
    out.add(min(max_batch, max(init_batch, replicas * hi)))
    return tuple(sorted(out))


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` with ``a, b >= 0``; one point gives a 20 % fixed part."""
    if len(points) == 1:
        x, y = points[0]
        return 0.2 * y, 0.8 * y / x if x > 0 else 0.0
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx <= 0:
        return my, 0.0
    b = max(0.0, sum((p[0] - mx) * (p[1] - my) for p in points) / sxx)
    a = my - b * mx
    if a < 0:  # through the origin instead
        b = sum(p[0] * p[1] for p in points) / sum(p[0] ** 2 for p in points)
        a = 0.0
    return a, b


def _fit_sync(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``sync = a + b * max(R - 2, 0)`` from (R, sync) points."""
    xs = [(max(r - 2.0, 0.0), s) for r, s in points]
    if len({x for x, _ in xs}) == 1:
        return sum(s for _, s in xs) / len(xs), 0.0
    return _fit_line(xs)


def remembered(
    marks: Mapping[str, float], observed: Mapping[str, float], gpus_per_node: int = 0
) -> dict[str, float]:
    """New marks recording the measurement in ``observed`` (only entries that changed).

    The sync time goes in ``danlu.s:i:<replicas>`` (one node) or ``danlu.s:x:<replicas>``
    (several); with ``gpus_per_node`` given, a placement on more nodes than
    ``ceil(replicas / gpus_per_node)`` goes in ``danlu.s:f:<replicas>`` instead, which
    :func:`build` leaves out: the options are predicted for packed placements, and a split
    one is slower (YOLOv3's profile: 0.81-0.96 s on 3-4 GPUs over two nodes, 0.77-0.79 s
    packed on 12-16 GPUs)."""
    step = observed.get("step_time")
    if step is None:
        return {}
    out: dict[str, float] = {}
    local = int(observed["local_bsz"])
    replicas = int(observed["num_replicas"])
    nodes = int(observed["num_nodes"])
    sync = observed["sync_time"]
    entries = {
        f"{COMPUTE}{local}": max(step - sync, 1e-9),
        SQR: observed.get("grad_sqr", 0.0),
        VAR: observed.get("grad_var", 0.0),
        MAXR: float(max(replicas, int(marks.get(MAXR, 0)))),
    }
    if replicas > 1:
        kind = "i" if nodes <= 1 else "x"
        if kind == "x" and gpus_per_node > 0 and nodes > math.ceil(replicas / gpus_per_node):
            kind = SPLIT  # on more nodes than it needs: not the packed line
        entries[f"{SYNC}{kind}:{replicas}"] = sync
    for key, value in entries.items():
        if marks.get(key) != value:
            out[key] = value
    return out


STAT_STEP = 1.05
"""Gradient statistics enter the model rounded to powers of this factor (5 % steps): they
drift every epoch, and a model (and its table of best batches) is rebuilt only when they
moved by a step."""


def quantized(value: float) -> float:
    """``value`` rounded to the nearest power of :data:`STAT_STEP` (0 stays 0)."""
    if value <= 0:
        return 0.0
    return float(STAT_STEP ** round(math.log(value) / math.log(STAT_STEP)))


def model_key(marks: Mapping[str, float], observed: Mapping[str, float]) -> tuple[object, ...]:
    """What the model depends on (a cache key): limits, the history marks and the rounded
    gradient statistics."""
    limits = tuple(observed.get(k, 0.0) for k in LIMIT_KEYS)
    hist = tuple(sorted((k, v) for k, v in marks.items() if k.startswith(("danlu.c", "danlu.s"))))
    stats = quantized(marks.get(SQR, 0.0)), quantized(marks.get(VAR, 0.0))
    return limits, hist, stats, marks.get(MAXR, 0.0)


def build(
    marks: Mapping[str, float],
    observed: Mapping[str, float],
    optimistic: bool = False,
    flat_sync: bool = False,
    *,
    sync_prior: float = SYNC_PRIOR,
    inter_prior: float | None = None,
) -> JobModel | None:
    """The job's model from its history marks and limits; ``None`` before any measurement
    or when the job reports no batch limits (a rigid job). ``flat_sync``: a measured
    inter-node sync time is not extrapolated beyond the most replicas measured across nodes
    (it stays at its value there: all-reduce time grows little with the replicas once it
    is bandwidth-bound, and a line through two small, fragmented placements can climb
    steeply). ``sync_prior`` and ``inter_prior`` replace :data:`SYNC_PRIOR` and the
    inter-node factor (:data:`INTER_PRIOR`, or :data:`OPTIMISTIC_INTER_PRIOR` when
    ``optimistic``) for link kinds not measured yet."""
    if any(observed.get(k, 0.0) <= 0 for k in LIMIT_KEYS):
        return None
    compute: list[tuple[float, float]] = []
    syncs: dict[str, list[tuple[float, float]]] = {"i": [], "x": []}
    for key, value in marks.items():
        if key.startswith(COMPUTE):
            compute.append((float(key[len(COMPUTE) :]), value))
        elif key.startswith(SYNC):
            kind, replicas = key[len(SYNC) :].split(":")
            if kind != SPLIT:
                syncs[kind].append((float(replicas), value))
    if not compute:
        return None
    compute.sort()
    alpha, beta = _fit_line(compute)
    base = alpha + beta * compute[0][0]
    inter = inter_prior
    if inter is None:
        inter = OPTIMISTIC_INTER_PRIOR if optimistic else INTER_PRIOR
    fits: dict[str, tuple[float, float]] = {}
    for kind, points in syncs.items():
        if points:
            fits[kind] = _fit_sync(sorted(points))
    if "i" not in fits:
        fits["i"] = (
            (fits["x"][0] / 2, fits["x"][1] / 2)
            if "x" in fits
            else (
                sync_prior * base,
                0.0,
            )
        )
    if "x" not in fits:
        a, b = fits["i"]
        fits["x"] = (inter * max(a, sync_prior * base), inter * b)
    return JobModel(
        init_batch=int(observed["init_batch"]),
        max_batch=int(observed["max_batch"]),
        min_local=int(observed["min_local_bsz"]),
        max_local=int(observed["max_local_bsz"]),
        alpha=alpha,
        beta=beta,
        sync_fit=fits,
        grad_sqr=quantized(marks.get(SQR, 0.0)),
        grad_var=quantized(marks.get(VAR, 0.0)),
        max_replicas_seen=int(marks.get(MAXR, 1)),
        sync_span=({"x": int(max(r for r, _ in syncs["x"]))} if flat_sync and syncs["x"] else {}),
    )


def observed_goodput(seen: Mapping[str, float]) -> float:
    """The goodput a job's last measurement (``JobStatus.observed``) shows: the gain of its
    batch over one iteration's seconds (0 when it measured nothing)."""
    step = seen.get("step_time")
    if step is None:
        return 0.0
    iteration = step + (step - seen["sync_time"]) * seen.get("accum_steps", 0.0)
    scale = seen["batch_size"] / seen["init_batch"]
    sqr, var = seen.get("grad_sqr", 0.0), seen.get("grad_var", 0.0)
    gain = (var + sqr) / (var / scale + sqr) if sqr > 0 or var > 0 else 1.0
    return gain / iteration


def lr_factor(seen: Mapping[str, float], marks: Mapping[str, float], batch: int) -> float:
    """AdaScale's learning-rate multiplier at ``batch`` relative to the job's ``init_batch``
    (from ``seen``), with the gradient statistics in its ``marks``; linear scaling when it
    has none."""
    init = seen.get("init_batch", 0.0)
    sqr, var = marks.get(SQR, 0.0), marks.get(VAR, 0.0)
    if init <= 0 or (sqr <= 0 and var <= 0):
        return batch / init if init > 0 else 1.0
    scale = batch / init
    return (var + sqr) / (var / scale + sqr)
