"""One optimizer step: micro-batches, autocast, loss scaling, OOM retry, anomaly checks.

:class:`StepEngine` holds no policy of its own: batch sizes come from
:class:`~danlu.train.batch.BatchController`, the LR from :class:`~danlu.train.lr.LRController`,
the verdict on a bad step from :class:`~danlu.train.anomaly.AnomalyDetector`.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from danlu.core.errors import ConfigError, DanluError
from danlu.train import accumulate
from danlu.train.amp import Precision
from danlu.train.anomaly import KINDS, AnomalyDetector
from danlu.train.batch import BatchController, GradientNoiseScale
from danlu.train.cadence import NormCadence, NormEvery, check_norm_every
from danlu.train.distributed import Distributed
from danlu.train.lr import LRController
from danlu.train.oom import (
    OPTIMIZER_STEP_OOM,
    OOMInjector,
    OptimizerStepOutOfMemoryError,
    RunningStats,
    is_oom,
    release_memory,
)

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
"""``loss_fn(model, micro_batch) -> scalar mean loss over the micro-batch``."""


@dataclass(slots=True)
class StepResult:
    """What one call of :meth:`StepEngine.step` did."""

    # the mean loss over the step's samples: under DDP over every rank's (weighted by their
    # real samples, the same on every rank), not this rank's alone
    loss: float
    grad_norm: float | None
    applied: bool  # the optimizer step happened (not skipped by the scaler or an anomaly)
    anomaly: str | None
    ooms: int  # OOMs recovered from during this step
    step_time: float
    samples: int
    # exposed gradient synchronisation, seconds: 0.0 in one process; under DDP estimated from
    # the micro-step timings (accumulate.exposed_sync_time), None with a single micro-batch
    sync_time: float | None = None
    # the first param group's LR this step's optimizer step used (or would have used, on a
    # skipped step): read before the schedule advanced to the next step's
    lr: float | None = None


_OOM = object()
_PEER_OOM = object()
_NO_LOSS = object()
"""What a micro-batch's ``loss`` holds before ``loss_fn`` returned (see :func:`check_loss`)."""


def check_loss(loss: object, failure: Exception) -> None:
    """Raise a :class:`~danlu.core.errors.ConfigError` naming ``loss_fn`` when ``loss``, what
    it returned (:data:`_NO_LOSS`: nothing yet), is no loss to train on, from ``failure``
    (torch's own error on it: ``'tuple' object has no attribute 'backward'``, "grad can be
    implicitly created only for scalar outputs"); return when it is one (``failure`` has
    another cause). Called only after a step failed, so the step's path pays nothing."""
    if loss is _NO_LOSS:
        return
    if not isinstance(loss, torch.Tensor):
        what = "None" if loss is None else f"a {type(loss).__name__}"
        if isinstance(loss, tuple | list):
            what += " (return the loss alone; report other values with ctx.reporter.report)"
    elif loss.numel() != 1:
        what = (
            f"a tensor of shape {tuple(loss.shape)} (reduce it to the mean, as a loss's "
            "reduction='mean' does)"
        )
    elif not loss.requires_grad:
        what = (
            "a tensor that does not require grad (detached, computed under torch.no_grad(), "
            "or not from the model's trainable parameters)"
        )
    else:
        return
    raise ConfigError(
        "loss_fn(model, micro_batch) must return the mean loss of the micro-batch as a "
        f"one-element tensor that requires grad; it returned {what}"
    ) from failure


_DOT_DTYPES = (torch.float32, torch.float64)
_isfinite = math.isfinite


def _agreed_small_batch(
    dist: Distributed, small: tuple[float, int] | None
) -> tuple[float, int] | None:
    """The small-batch gradient measurement of a distributed step: the mean over the ranks
    that measured one of their ``|g_b|^2`` and of their micro-batch sizes (one small
    all-reduce), or None when no rank did. Each rank measures its own first micro-batch;
    fed to the estimator alone, the ranks' gradient-noise estimates, and the batch sizes and
    learning rates chosen from them, would differ."""
    sq, n = small if small is not None else (0.0, 0)
    total_sq, total_n, ranks = dist.sum_floats([sq, float(n), 1.0 if small is not None else 0.0])
    if ranks == 0:
        return None
    return total_sq / ranks, max(1, round(total_n / ranks))


def _agreed_kind(dist: Distributed, anomaly: AnomalyDetector, kind: str | None) -> str | None:
    """The anomaly of this step for every rank of a distributed run: the first kind of
    :data:`KINDS` that any rank found, or None when all found the step healthy (one
    small all-reduce). Each rank checks its own loss, and which steps have the norm can
    differ; acting on one rank's verdict alone would skip or roll back the step there only,
    and the ranks' parameters would part. A rank that found the step healthy counts the
    agreed kind too."""
    found = dist.sum_floats([1.0 if kind == k else 0.0 for k in KINDS])
    agreed = next((k for k, n in zip(KINDS, found, strict=True) if n > 0), None)
    if agreed is not None and kind is None:
        anomaly.count(agreed)
    return agreed


def cpu_norm(grads: list[torch.Tensor]) -> float | None:
    """The global L2 norm of dense, contiguous fp32/fp64 CPU ``grads`` as a float: the sum of
    ``torch.dot(g, g)``, the BLAS routine, which reads each gradient once at memory speed
    (~1.7x faster than ``torch._foreach_norm`` on CPU and no less accurate: both accumulate in
    the gradient's dtype; an fp32 sum of squares past ~3.4e38 reads inf in both). None for any
    other gradients."""
    for g in grads:
        if (
            g.device.type != "cpu"
            or g.dtype not in _DOT_DTYPES
            or g.layout != torch.strided
            or not g.is_contiguous()
        ):
            return None
    total_sq = math.fsum(float(torch.dot(g.view(-1), g.view(-1))) for g in grads)
    return math.sqrt(total_sq)


def norm_tensor(grads: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of ``grads`` as a 0-d tensor on their device (inf/nan propagate).

    On a GPU: ``torch._foreach_norm`` (one fused multi-tensor kernel); dense fp32/fp64 CPU
    gradients: :func:`cpu_norm`."""
    if not grads:
        return torch.tensor(0.0)
    value = cpu_norm(grads)
    if value is not None:
        return torch.tensor(value, dtype=grads[0].dtype)
    return _fused_norm(grads)


def _fused_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """``torch._foreach_norm`` over ``grads``, then the norm of those norms (0-d tensor)."""
    norms = torch._foreach_norm(grads, 2.0)
    total: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    return total


class RandomStates:
    """The random generators a step may draw from, saved before a step's first attempt and
    put back before an OOM retry: torch's CPU generator, the CUDA generator of the training
    device, and (``host``) Python's :mod:`random` and NumPy's global generator when NumPy is
    loaded.

    A failed attempt has drawn from them already (the dropout masks of the micro-batches it
    ran): without :meth:`restore` the retry, at the smaller micro-batch, would draw other
    ones, and the run would part from one that used the smaller micro-batch from the start
    of the step (as :class:`~danlu.train.oom.RunningStats` is for batch normalisation's
    statistics). torch's states cost about a microsecond; Python's and NumPy's about 20 and
    60 (NumPy copies its 624 words one by one), a third of a small model's step on a CPU,
    so the step saves those only where an OOM can really strike (:meth:`StepEngine.step`)."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device if device.type == "cuda" else None
        self._cpu: torch.Tensor | None = None
        self._cuda_state: torch.Tensor | None = None
        self._python: object = None
        self._numpy: object = None

    def save(self, host: bool) -> None:
        """Copy the generators' states as they are now; Python's and NumPy's with ``host``."""
        self._cpu = torch.get_rng_state()
        if self._cuda is not None:
            self._cuda_state = torch.cuda.get_rng_state(self._cuda)
        self._python = random.getstate() if host else None
        numpy = sys.modules.get("numpy") if host else None  # none drew from an unloaded one
        self._numpy = numpy.random.get_state() if numpy is not None else None

    def restore(self) -> None:
        """Put back the states of the last :meth:`save`."""
        if self._cpu is None:
            return
        torch.set_rng_state(self._cpu)
        if self._cuda is not None and self._cuda_state is not None:
            torch.cuda.set_rng_state(self._cuda_state, self._cuda)
        if self._python is not None:
            random.setstate(self._python)  # type: ignore[arg-type]
        if self._numpy is not None:
            sys.modules["numpy"].random.set_state(self._numpy)


class MicroStepTimer:
    """Times the micro-steps (forward + backward) of one optimizer step.

    On CPU, :func:`time.perf_counter` at both ends. On CUDA, a pair of timing events per
    micro-step recorded on the current stream (from a pool reused across steps), so that the
    micro-steps are not synchronised: :meth:`durations` reads them once the step has brought
    its loss to the host, when they are complete.
    """

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._marks: list[float] = []  # CPU: start, end, start, end, ...
        self._events: list[torch.cuda.Event] = []  # CUDA: the pool, in the same order
        self._recorded = 0  # CUDA: events of the pool recorded in this step

    def reset(self) -> None:
        """Forget the previous step's (or the failed attempt's) micro-steps."""
        self._marks.clear()
        self._recorded = 0

    def start(self) -> None:
        """A micro-step begins."""
        self._mark()

    def stop(self) -> None:
        """The micro-step that began last ends (its backward pass has returned)."""
        self._mark()

    def _mark(self) -> None:
        if not self._cuda:
            self._marks.append(time.perf_counter())
            return
        if self._recorded == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
        self._events[self._recorded].record()
        self._recorded += 1

    def durations(self) -> list[float]:
        """The finished micro-steps' durations in seconds, in order."""
        if not self._cuda:
            marks = self._marks
            return [marks[i + 1] - marks[i] for i in range(0, len(marks) - 1, 2)]
        events = self._events[: self._recorded]
        if not events:
            return []
        # Complete already (the step synchronised on its loss after them): a no-op guard.
        events[-1].synchronize()
        return [
            events[i].elapsed_time(events[i + 1]) / 1000.0 for i in range(0, len(events) - 1, 2)
        ]


def grad_norm(params: Sequence[torch.Tensor]) -> float:
    """Global L2 norm of the gradients of ``params`` (inf/nan propagate)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    value = cpu_norm(grads)
    return value if value is not None else float(_fused_norm(grads).item())


class StepEngine:
    """Runs training steps for one model/optimizer pair."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        lr: LRController,
        batch: BatchController,
        precision: Precision,
        dist: Distributed,
        anomaly: AnomalyDetector | None = None,
        *,
        clip_grad_norm: float | None = None,
        compute_grad_norm: bool = True,
        grad_norm_every: NormEvery = 1,
        gns: GradientNoiseScale | None = None,
        gns_every: int = 0,
        oom_injector: OOMInjector | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr = lr
        self.batch = batch
        self.precision = precision
        self.dist = dist
        self.anomaly = anomaly
        self.clip = clip_grad_norm
        needs_norm = clip_grad_norm is not None or lr.uses_grad_norm
        self.compute_norm = compute_grad_norm or needs_norm
        # clipping and norm-adaptive LR act on every step's norm: no cadence for them
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.cadence = NormCadence(
            1 if needs_norm else grad_norm_every,
            measurable=dist.device.type == "cpu",
            elements=sum(p.numel() for p in self.params),
        )
        check_norm_every(grad_norm_every)  # also when clipping overrides it
        self._norm_time: float | None = None  # seconds the norm took on a calibration step
        self.unchecked_update = False
        """A step applied gradients whose norm was not computed since the caller last
        verified the parameters (and reset this)."""
        self.norm_until = 0
        """The norm is computed on every step whose :attr:`step_count` is below this, whatever
        the cadence: set after a rollback for non-finite parameters, so that the replay
        catches the NaN/Inf gradient that reached them off the cadence (applied again, it
        would poison the parameters again, and roll back again, for good)."""
        self.gns = gns
        self.gns_every = gns_every
        self.oom_injector = oom_injector
        self._running_stats = RunningStats(model)
        """Batch norm's running statistics, put back before an OOM retry (a retry runs the
        micro-batches that already moved them again)."""
        self._random = RandomStates(dist.device)
        """The random generators' states, put back before an OOM retry (the failed attempt
        drew from them)."""
        self._oom_error: BaseException | None = None
        """The last attempt's out-of-memory error, its traceback dropped (it held the failed
        attempt's frames and their tensors): the cause of the error at the smallest
        micro-batch."""
        self._lr_per_step = lr.uses_grad_norm
        """The LR is set from each step's gradient norm (fixed at construction, as the norm's
        cadence is)."""
        self.step_count = 0  # optimizer steps taken (applied or skipped)
        self._gns_small: tuple[float, int] | None = None
        self._timer = MicroStepTimer(dist.device)
        # the last micro-batch's size over the others' when this step's micro-steps were
        # timed (DDP with accumulation), else None
        self._timed_last_ratio: float | None = None
        self._mean_loss = math.nan
        """The last distributed attempt's loss over the global batch (:meth:`_agree`)."""

    def step(
        self, data: Any, loss_fn: LossFn, *, real: int | None = None, global_real: int | None = None
    ) -> StepResult:
        """Train on this rank's batch ``data`` (its first ``real`` samples count; ``global_real``
        real samples over all ranks) and take one optimizer step."""
        t0 = time.perf_counter()
        n = accumulate.batch_len(data)
        dist, precision, anomaly = self.dist, self.precision, self.anomaly
        if real is None:
            real = n
        if global_real is None:
            global_real = real * dist.world_size
        # Weight so that DDP's mean over ranks equals the mean over the real samples.
        weight = real * dist.world_size / global_real if global_real > 0 else 0.0
        ooms = 0
        stats = self._running_stats
        if stats.present:
            stats.save()
        # an OOM at the smallest micro-batch is an error, not a retry: nothing to put back.
        # Python's and NumPy's generators (the costly ones) only where an OOM can strike: on a
        # GPU, or injected (a CPU allocation failure is no OOM to is_oom: never retried)
        retry = self.batch.micro > self.batch.min_micro
        if retry:
            self._random.save(dist.cuda or self.oom_injector is not None)
        if n <= self.batch.micro and self.oom_injector is None and not dist.enabled:
            out = self._single(data, loss_fn, weight)
        else:
            out = self._accumulate(data, n, loss_fn, weight)
        while True:
            while out is _OOM or out is _PEER_OOM:
                # Out of the except block now: the failed step's tensors can really be freed.
                release_memory(self.model, self.optimizer)
                if dist.enabled:  # every rank, after the agreement: the same point everywhere
                    accumulate.abandon_sync(self.model)
                if stats.present:
                    stats.restore()
                precision.forget_unscale(self.optimizer)  # the attempt may have unscaled
                cause, self._oom_error = self._oom_error, None
                self.batch.on_oom(cause)
                if retry:
                    self._random.restore()
                ooms += 1
                out = self._accumulate(data, n, loss_fn, weight)
            assert isinstance(out, torch.Tensor)
            if dist.enabled and self.gns is not None and self._gns_due():
                self._gns_small = _agreed_small_batch(dist, self._gns_small)
            measured = self._measure(out)
            if measured is not None:
                break
            # out of memory unscaling, clipping or taking the norm: before any update, so
            # the step is retried from its forward pass as after an OOM there
            out = _OOM
        loss, norm = measured
        scaling = precision.scaling
        # the record's loss: the mean over every rank's samples (the anomaly checks this
        # rank's own, below)
        reported = self._mean_loss if dist.enabled else loss
        # after the step's synchronisation: CUDA events are complete
        sync = self._sync_time() if dist.enabled else 0.0
        small = self._gns_small
        if self.gns is not None and small is not None and norm is not None:
            # the step's samples over all ranks (the ranks' shares may differ by one: every
            # rank must feed the same count, or their estimates, batches and LRs part)
            self.gns.update(small[0], small[1], norm * norm, global_real)
        kind = None
        applied = False
        if anomaly is not None and not (scaling and norm is not None and not _isfinite(norm)):
            # (a non-finite norm under the fp16 scaler is its overflow, not an anomaly)
            kind = anomaly.check(loss, norm)
        if anomaly is not None:
            if dist.enabled:  # every rank takes the same action on the same step
                kind = _agreed_kind(dist, anomaly, kind)
            if kind is not None and anomaly.action == "stop":
                anomaly.raise_for(kind, self.step_count, loss, norm)
        if kind is None or (anomaly is not None and anomaly.action == "warn"):
            if self._lr_per_step:
                self.lr.before_step(norm)
            # An OOM in the optimizer step is not retried (it is raised, saying so): the step
            # may have updated some parameters or optimizer states already (a group, a
            # foreach stage), which a retry would apply twice; snapshotting them first costs
            # the memory that ran out; and the step's memory (parameters, gradients,
            # optimizer state) does not shrink with the micro-batch, so a retry at a smaller
            # one fails again.
            try:
                applied = precision.step(self.optimizer)
            except Exception as exc:
                if is_oom(exc):
                    raise OptimizerStepOutOfMemoryError(OPTIMIZER_STEP_OOM) from exc
                raise
            # a gradient nobody checked, or one found anomalous and applied anyway ("warn"),
            # reached the parameters (the fp16 scaler checks its own)
            if not scaling and (norm is None or kind is not None):
                self.unchecked_update = True
        elif scaling:
            precision.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        used_lr = float(self.optimizer.param_groups[0]["lr"])
        self.lr.after_step(applied)
        self.step_count += 1
        step_time = time.perf_counter() - t0
        if self._norm_time is not None:
            self._calibrate(self._norm_time, step_time)
        return StepResult(
            reported, norm, applied, kind, ooms, step_time, global_real, sync, used_lr
        )

    def _gns_due(self) -> bool:
        """Whether this step measures the gradient noise (by the step count: every rank and
        a resumed run agree)."""
        return self.gns_every > 0 and self.step_count % self.gns_every == 0

    @property
    def norm_every(self) -> int:
        """The gradient norm's cadence now (1 while ``"auto"`` calibrates)."""
        return self.cadence.every

    def _calibrate(self, norm_s: float, step_s: float) -> None:
        """Feed an ``"auto"`` cadence one timed step; once decided, every rank takes rank
        0's choice (all ranks reach this step together), so all check the same steps."""
        self._norm_time = None
        every = self.cadence.observe(norm_s, step_s)
        if every is not None:
            self.cadence.fix(int(self.dist.broadcast_object(every)))

    def _sync_time(self) -> float | None:
        """The step's exposed gradient synchronisation in seconds: 0.0 in one process, the
        estimate of :func:`~danlu.train.accumulate.exposed_sync_time` under DDP with two or
        more micro-batches, None (unknown) under DDP with one."""
        if not self.dist.enabled:
            return 0.0
        if self._timed_last_ratio is None:
            return None
        return accumulate.exposed_sync_time(self._timer.durations(), self._timed_last_ratio)

    def _measure(self, out: torch.Tensor) -> tuple[float, float | None] | None:
        """What happens between the step's backward passes and its optimizer step: the
        gradients unscaled (fp16), the loss and, when wanted, the gradient norm (clipping
        the gradients to it), as ``(loss, norm or None)``.

        None when it ran out of memory (the error kept in :attr:`_oom_error`): no update
        was applied yet and the gradients are dropped, so the step is retried at a smaller
        micro-batch as after an OOM in a forward pass. Under DDP the OOM is raised: the
        peers have passed this attempt's agreement and cannot retry with this rank.

        The norm is wanted for clipping, on the steps of its cadence (NormCadence.due,
        inline: this runs on every step), by a gradient-noise measurement, and on the
        replay after a rollback for non-finite parameters (norm_until)."""
        precision, cadence = self.precision, self.cadence
        try:
            if precision.scaling:
                precision.unscale(self.optimizer)
            if (
                self.clip is not None
                or (
                    self.compute_norm
                    and (
                        cadence.calibrating
                        or self.step_count % cadence.every == 0
                        or self._gns_small is not None
                    )
                )
                or self.step_count < self.norm_until
            ):
                return self._loss_and_norm(out)
            # most steps (item(): the loss of one micro-batch may still require grad)
            return out.item(), None
        except Exception as exc:
            if not is_oom(exc) or self.dist.enabled:
                raise
            self._oom_error = exc.with_traceback(None)  # its frames hold the gradients
        return None

    def _loss_and_norm(self, loss: torch.Tensor) -> tuple[float, float]:
        """The step's loss and gradient norm as floats, on a step whose norm is wanted
        (see :meth:`step`).

        Both come to the host in one transfer: on a GPU, one synchronisation per step.
        ``loss`` may still require grad (its graph is freed): it is read with ``item()``."""
        if self.clip is not None:
            norm_t = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        elif loss.device.type == "cpu":  # no tensor round trip on CPU
            t0 = time.perf_counter()
            value = grad_norm(self.params)
            if self.cadence.calibrating:  # a CPU norm is done when it returns
                self._norm_time = time.perf_counter() - t0
            return loss.item(), value
        else:
            grads = [p.grad for p in self.params if p.grad is not None]
            if not grads:
                return loss.item(), 0.0
            norm_t = _fused_norm(grads)
        if norm_t.device.type == "cpu" and loss.device.type == "cpu":
            return loss.item(), norm_t.item()
        both = torch.stack([loss.detach().to(norm_t.device, torch.float32), norm_t.float()])
        values = both.tolist()
        return float(values[0]), float(values[1])

    def _accumulate(self, data: Any, n: int, loss_fn: LossFn, weight: float) -> object:
        """Forward/backward over the micro-batches; the summed loss (a detached 0-d tensor:
        float32 over several micro-batches, the loss's own dtype from one), or an OOM
        marker. One process with one micro-batch goes through :meth:`_single` instead."""
        chunks = accumulate.split(data, self.batch.micro, self.batch.min_micro)
        last = len(chunks) - 1
        timer = self._start_timing(chunks)
        agreed = False
        total: torch.Tensor | float = 0.0
        self._gns_small = None
        measure_gns = self.gns is not None and last > 0 and self._gns_due()
        failed = False
        loss: object = _NO_LOSS
        try:
            for i, (chunk, share) in enumerate(chunks):
                with accumulate.no_sync(self.model, i == last):
                    if self.oom_injector is not None and self.oom_injector(
                        self.step_count, self.batch.micro
                    ):
                        raise torch.OutOfMemoryError(
                            f"injected OOM at micro-batch {self.batch.micro}"
                        )
                    if timer is not None:
                        timer.start()
                    with self.precision.autocast():
                        loss = loss_fn(self.model, chunk)
                    if i == last and self.dist.enabled:
                        agreed = True
                        # a padding rank (weight 0) adds nothing, also an inf loss
                        mine = (
                            float(total + loss.detach().float() * share) * weight if weight else 0.0
                        )
                        if self._agree(False, mine):
                            return _PEER_OOM  # a peer ran out of memory: retry together
                    self.precision.scale(loss * (share * weight)).backward()  # type: ignore[no-untyped-call]
                    if timer is not None:
                        timer.stop()
                total = total + loss.detach().float() * share
                if measure_gns and i == 0 and weight > 0:
                    denom = share * weight * self.precision.loss_scale
                    sq = grad_norm(self.params) ** 2 / denom**2
                    self._gns_small = (sq, accumulate.batch_len(chunk))
        except Exception as exc:
            if not is_oom(exc):
                check_loss(loss, exc)
                raise
            self._oom_error = exc.with_traceback(None)
            failed = True
        if failed:
            if agreed:
                raise DanluError(
                    "out of memory in the last backward pass, after the ranks agreed to go on; "
                    "the peers are inside DDP's all-reduce and cannot retry. Restart the job: "
                    "lower DANLU_BATCH_SIZE or the micro-batch"
                ) from self._oom_error
            if self.dist.enabled:
                self._agree(True, 0.0)
            return _OOM
        assert isinstance(total, torch.Tensor)  # there is at least one micro-batch
        return total

    def _agree(self, oom: bool, weighted_loss: float) -> bool:
        """The agreement of one attempt of a distributed step, made once by every rank (at the
        last micro-batch, or where its own OOM struck): whether any rank ran out of memory.
        The same all-reduce sums the ranks' losses, each weighted by its real samples
        (``weighted_loss``: the rank's loss times its weight ``real * W / global_real``), into
        :attr:`_mean_loss`, the mean over the step's global batch; a rank that failed adds 0,
        and the attempt is retried by all."""
        flags, summed = self.dist.sum_floats([1.0 if oom else 0.0, weighted_loss])
        self._mean_loss = summed / self.dist.world_size
        return flags > 0

    def _start_timing(self, chunks: list[tuple[Any, float]]) -> MicroStepTimer | None:
        """The timer for this attempt's micro-steps, reset, when the step's exposed
        synchronisation can be estimated (DDP, two or more micro-batches); else None."""
        if not self.dist.enabled or len(chunks) < 2:
            self._timed_last_ratio = None
            return None
        # shares are size / n: the ratio of the last chunk's share to the first's is exactly
        # 1.0 for equal chunks
        self._timed_last_ratio = chunks[-1][1] / chunks[0][1]
        self._timer.reset()
        return self._timer

    def _single(self, data: Any, loss_fn: LossFn, weight: float) -> object:
        """:meth:`_accumulate` for the common case: one micro-batch, one process, no OOM
        injection (the same arithmetic, without the bookkeeping of the general path)."""
        self._gns_small = None
        precision = self.precision
        loss: object = _NO_LOSS
        try:
            if precision.dtype is None:  # fp32: no autocast region to enter
                loss = loss_fn(self.model, data)
            else:
                with precision.autocast():
                    loss = loss_fn(self.model, data)
            # x * 1.0 == x exactly, and so is its gradient: skip the no-op multiply
            scaled = loss if weight == 1.0 else loss * weight
            if precision.scaling:
                scaled = precision.scaler.scale(scaled)
            scaled.backward()  # type: ignore[no-untyped-call]
        except Exception as exc:
            if not is_oom(exc):
                check_loss(loss, exc)
                raise
            self._oom_error = exc.with_traceback(None)
            return _OOM
        # the loss itself, not a detached copy: backward() freed its graph, and the step only
        # reads its value (with item(): float() of a tensor that requires grad warns)
        return loss
