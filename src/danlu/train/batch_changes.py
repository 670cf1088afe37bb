"""How a running job's global batch changes: the part of
:class:`~danlu.train.context.TrainContext` (one of its base classes) that adapts the batch.

- an adaptive batch (:class:`~danlu.train.batch.AdaptiveBatch`): a schedule, growth towards
  the gradient noise scale, or the goodput tuner's pick (:mod:`danlu.train.goodput`);
- the probe steps that measure what those need: two micro-batches of half the size where a
  step would be one (the sync time of several GPUs, the gradient noise);
- the scheduler's batch: the launch's ``DANLU_GLOBAL_BATCH_SIZE`` and a ``Rebatch`` received
  while the job runs, at a step boundary.

Each change co-scales the LR by ``lr_scaling`` from the script's batch.
"""

from __future__ import annotations

import math
from typing import Any

from danlu.train.batch import AdaptiveBatch, BatchController, GradientNoiseScale
from danlu.train.distributed import Distributed
from danlu.train.env import JobEnv
from danlu.train.goodput import GoodputTuner, placement_of
from danlu.train.lr import LRController
from danlu.train.report import MetricsReporter
from danlu.train.scaling import lr_factor
from danlu.train.step import StepEngine, StepResult

FOLLOW_EVERY = 20
"""Under DDP, every how many steps the ranks agree on the batch size the scheduler set (a
broadcast from the chief, the only rank that talks to the API)."""
PROBE_PART = 2
"""The fewest samples in each of a probe step's two micro-batches (see
``BatchChanges._probe``): batch normalisation cannot train on one."""


class BatchChanges:
    """The batch-changing part of :class:`~danlu.train.context.TrainContext` (see the module
    docstring); the context sets the attributes below."""

    env: JobEnv
    distributed: Distributed
    engine: StepEngine
    batch: BatchController
    lr: LRController
    reporter: MetricsReporter
    adaptive: AdaptiveBatch | None
    goodput: GoodputTuner | None
    lr_scaling: str
    step_num: int
    _probes_left: int
    _gns_probe: bool
    _scheduler_batch: int | None

    @property
    def _gradient_noise(self) -> GradientNoiseScale | None:
        """The gradient-noise estimator in use: the adaptive batch's, else the engine's."""
        return self.adaptive.gns if self.adaptive is not None else self.engine.gns

    def _note_gradient_stats(self, record: dict[str, Any]) -> None:
        """Add ``grad_sqr`` (|G|^2) and ``grad_var`` (tr Sigma, the per-sample variance) of the
        gradient-noise estimator to ``record`` once it has measured, both finite and > 0."""
        gns = self._gradient_noise
        if gns is None or gns.count == 0:
            return
        sqr, var = gns.mu2, gns.sigma2
        if math.isfinite(sqr) and math.isfinite(var) and sqr > 0 and var > 0:
            record["grad_sqr"] = sqr
            record["grad_var"] = var

    def _adapt(self, result: StepResult) -> None:
        assert self.adaptive is not None
        if self.goodput is not None:
            self._adapt_goodput(result, self.goodput, self.adaptive.every)
            return
        old = self.batch.global_batch
        new = self.adaptive.target(self.step_num, old)
        if new != old:
            self._set_global(new)

    def _probe(self) -> bool:
        """Whether this step runs as two micro-batches of half the size where it would be one
        (the same gradient, within floating-point reassociation):

        - a *sync probe*: the first :data:`~danlu.train.goodput.PROBE_STEPS` steps of a
          multi-GPU goodput-adaptive run, for the tuner to measure the sync time;
        - a *gradient-noise probe*: every ``gns_every``-th step (by the engine's step count,
          so every rank and a resumed run agree) of a run that estimates the gradient noise
          (``"gns"`` and ``"goodput"`` adaptive batches). The estimate needs two batch sizes
          in one step, so without these a run that never accumulates measured none (a single
          GPU) or only during its sync probes. Its record says ``probe: 1``; its timing is
          not fed to the goodput tuner (a different shape every ``gns_every`` steps would
          restart the tuner's samples).

        Neither runs on a local batch below ``2 *`` :data:`PROBE_PART` (3 samples made parts of
        2 and 1, and batch normalisation cannot train on one).
        """
        self._gns_probe = False
        engine = self.engine
        sync = (
            self.goodput is not None and self._probes_left > 0 and self.distributed.world_size > 1
        )
        noise = (
            engine.gns is not None
            and engine.gns_every > 0
            and engine.step_count % engine.gns_every == 0
        )
        if not (sync or noise):  # the common step: nothing more to look at
            return False
        batch = self.batch
        if batch.accumulation > 1 or batch.local_batch < 2 * PROBE_PART:
            return False
        if sync:
            self._probes_left -= 1
        else:
            self._gns_probe = True
        batch.micro = math.ceil(batch.local_batch / 2)
        return True

    def _placement(self) -> tuple[int, ...]:
        return placement_of(self.distributed.world_size, self.env.local_world_size)

    def _adapt_goodput(self, r: StepResult, tuner: GoodputTuner, every: int) -> None:
        """Feed the step's measurements to the goodput tuner; every ``every`` steps take the
        batch it picks (under DDP the chief's pick, broadcast, so every rank agrees)."""
        batch = self.batch
        tuner.cap_micro(batch.micro_cap)
        gns = self._gradient_noise
        sqr, var = (gns.mu2, gns.sigma2) if gns is not None and gns.count > 0 else (None, None)
        placement = self._placement()
        if self._gns_probe:
            tuner.note_stats(sqr, var)
        elif r.applied and r.step_time is not None:
            tuner.record(
                micro=max(1, round(batch.local_batch / batch.accumulation)),
                accumulation=batch.accumulation,
                placement=placement,
                step_time=r.step_time,
                sync_time=r.sync_time,
                grad_sqr=sqr,
                grad_var=var,
            )
        if self.step_num % every:
            return
        chosen = tuner.choose(placement) if self.distributed.is_chief else None
        if self.distributed.enabled:
            chosen = self.distributed.broadcast_object(chosen)
        if chosen is not None and chosen != batch.global_batch:
            self._set_global(chosen)

    def _follow_scheduler(self) -> None:
        """Adopt a global batch size the scheduler set while the job runs (a ``Rebatch``:
        same GPUs, no restart; it arrives in the reply to a metrics report), at this step
        boundary. Each change from the batch the job was launched with
        (``DANLU_GLOBAL_BATCH_SIZE``; without it, the first value received) is applied.
        Under DDP only the chief talks to the API: every :data:`FOLLOW_EVERY` steps the
        ranks take the chief's value (a broadcast)."""
        wanted = self.reporter.scheduler_batch
        if self.distributed.enabled:
            if self.step_num % FOLLOW_EVERY:
                return
            wanted = self.distributed.broadcast_object(wanted)
        if wanted is None or wanted == self._scheduler_batch:
            return  # nothing new: a batch the job chose itself (adaptive) is not undone
        first = self._scheduler_batch is None
        self._scheduler_batch = wanted
        if not first and wanted != self.batch.global_batch:
            self._set_global(wanted)

    def adopt_launch_batch(self, global_batch: int) -> None:
        """Train at the global batch the scheduler launched this run with
        (``DANLU_GLOBAL_BATCH_SIZE``), also over a restored checkpoint's, unless the scheduler
        asks the batch it had asked when the checkpoint was written: the restored batch
        (with one the job tuned itself, an adaptive batch) then holds, so that the resume is
        exact. A checkpoint written before it held the scheduler's batch, or by a run that
        never had one, takes the launch batch. Later changes arrive through
        :meth:`_follow_scheduler`."""
        before = self._scheduler_batch  # the restored checkpoint's (None: fresh or older)
        self._scheduler_batch = global_batch
        if before == global_batch:
            return  # the scheduler did not change its mind while the job was down
        if global_batch != self.batch.global_batch:
            self._set_global(global_batch, launch=True)

    def _set_global(self, new: int, *, launch: bool = False) -> None:
        """Change the global batch; the LR follows by ``lr_scaling`` from the base batch.
        ``launch``: see :meth:`BatchController.set_global`."""
        self.batch.set_global(new, launch=launch)
        gns = self._gradient_noise
        sigma2, mu2 = (gns.sigma2, gns.mu2) if gns is not None else (0.0, 0.0)
        self.lr.set_scale(
            lr_factor(self.lr_scaling, new, self.batch.base_global_batch, sigma2=sigma2, mu2=mu2)
        )
