"""The training context: one object bundling every part of ``danlu.train``.

``ctx = danlu.train.init(model, optimizer, ...)`` reads the job environment, joins the process
group, wraps the model in DDP, applies the GPU memory limit, picks the batch configuration,
resumes from the newest checkpoint and installs the SIGTERM handler. Inside your loop::

    with danlu.train.init(model, opt, sched, global_batch_size=64) as ctx:
        for epoch in ctx.epochs(10):
            for batch in ctx.batches(dataset):
                ctx.step(batch, loss_fn)   # loss_fn(model, micro_batch) -> mean loss

Off the cluster (no ``DANLU_*`` variables, no torchrun) every part has a do-nothing default:
no process group, no checkpoints unless a directory is given, metrics to a local JSONL file.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from danlu.core.errors import ConfigError, DanluError
from danlu.train.batch import AdaptiveBatch
from danlu.train.batch_changes import FOLLOW_EVERY as FOLLOW_EVERY  # re-exported
from danlu.train.batch_changes import PROBE_PART as PROBE_PART  # re-exported
from danlu.train.batch_changes import BatchChanges
from danlu.train.checks import whole_argument
from danlu.train.ckpt import Checkpoints, state_api
from danlu.train.ckpt_news import CheckpointNews
from danlu.train.data import (
    ElasticSampler,
    LocalBatch,
    default_collate,
    fetch,
    load_data_position,
    to_device,
    waiting_position_problem,
)
from danlu.train.distributed import Distributed, unwrap
from danlu.train.env import JobEnv
from danlu.train.goodput import (
    PROBE_STEPS,
    GoodputTuner,
    probes_state,
    stored_probes,
)
from danlu.train.part_states import Parse, parse_parts
from danlu.train.preempt import Preempted, Preemption
from danlu.train.recovery import Recovery
from danlu.train.report import MetricsReporter, Progress
from danlu.train.step import LossFn, StepEngine, StepResult

log = logging.getLogger("danlu.train")

HISTORY_LIMIT = 1000
"""Metric records kept in memory (and in checkpoints)."""
MEMORY_READ_EVERY_S = 1.0
"""How often (seconds) a CUDA run reads its peak allocated memory for the records' ``memory_bytes``
(the records between reads repeat the last value). ``torch.cuda.max_memory_allocated`` builds
the allocator's whole statistics dictionary in Python, 0.3-0.5 ms on an H200: on every step that
alone cost a millisecond-long step a third of its time."""


class TrainContext(Recovery, BatchChanges):
    """Everything a training loop needs; build it with :func:`danlu.train.init`.

    Public members: ``env`` (:class:`~danlu.train.env.JobEnv`), ``distributed``, ``model`` (DDP
    wrapped when distributed), ``optimizer``, ``scheduler``, ``lr`` (warmup, grad-norm scaling,
    batch co-scaling), ``batch`` (global/micro/accumulation), ``precision`` (autocast and
    GradScaler), ``anomaly``, ``checkpoints``, ``reporter``, ``preemption``, ``sampler``.
    """

    def __init__(
        self,
        *,
        env: JobEnv,
        distributed: Distributed,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        engine: StepEngine,
        checkpoints: Checkpoints,
        reporter: MetricsReporter,
        progress: Progress,
        preemption: Preemption,
        sampler: ElasticSampler | None,
        adaptive: AdaptiveBatch | None,
        lr_scaling: str,
        consistency_check: bool,
        sampler_settings: dict[str, Any] | None = None,
    ) -> None:
        self.env = env
        self.distributed = distributed
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.engine = engine
        self.lr = engine.lr
        self.batch = engine.batch
        self.precision = engine.precision
        self.anomaly = engine.anomaly
        self.checkpoints = checkpoints
        self.reporter = reporter
        self.progress = progress
        self.preemption = preemption
        self.sampler = sampler
        self._sampler_settings: dict[str, Any] = dict(sampler_settings or {})
        """``shuffle``, ``seed`` and ``drop_last`` of the sampler :meth:`batches` builds from
        ``len(dataset)`` when ``init`` had no ``dataset_size``."""
        self._waiting_position: dict[str, Any] | None = None
        """The data position while the run has no sampler (no ``dataset_size``, and no
        :meth:`batches` yet): a restored checkpoint's, then :meth:`epochs`' epoch count. The
        sampler :meth:`batches` builds starts from it (a checkpoint of another dataset size
        refused there); checkpoints keep it until then."""
        self._resumed_without_sampler = False
        """Whether :meth:`restore` loaded a checkpoint while the run had no sampler."""
        self._told_position_unused = False  # a WARNING said a step does not use it
        self.adaptive = adaptive
        self.goodput: GoodputTuner | None = None
        """The goodput tuner of a ``"goodput"`` adaptive batch (None otherwise)."""
        if adaptive is not None and adaptive.mode == "goodput":
            self.goodput = GoodputTuner(adaptive.b0, adaptive.max_batch, engine.batch.micro_cap)
            engine.batch.follows_local = False  # the tuner plans within its micro-batch cap
        self._probes_left = PROBE_STEPS
        self._gns_probe = False
        """Whether the step running now is a gradient-noise probe (see :meth:`_probe`)."""
        self.lr_scaling = lr_scaling
        self.consistency_check = consistency_check
        self.step_num = 0
        self.rollbacks = 0
        self._rolled_back_for: set[int] = set()
        """Steps whose anomaly led to a rollback: met again on the replay (the same batch on
        the same parameters, or the rollback did not help), the step is skipped instead of
        rolling back for good."""
        self._recovered_for: set[int] = set()
        """Steps at which non-finite parameters led to a rollback: found again there on the
        replay (with every gradient since the checkpoint checked), the run stops."""
        self.history: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        self._current: LocalBatch | None = None
        self._closed = False
        self._t_last = time.perf_counter()
        self._memory_read_at = -math.inf  # perf_counter of the last memory_bytes read
        self._memory_bytes = 0
        self._scheduler_batch: int | None = None
        """The global batch the scheduler asked last: the launch's (``DANLU_GLOBAL_BATCH_SIZE``),
        else the first reply's, then each ``Rebatch``; a restored checkpoint's until
        :meth:`adopt_launch_batch` (the same on every rank: set at launch, by broadcasts and
        from the one checkpoint)."""
        self._target_epochs: int | None = None  # set by epochs(n): what progress counts to
        self._target_steps: int | None = None  # set by stop_at_step(n): progress counts to it too
        self._follows_api = env.metrics_url is not None
        self._saved_step: int | None = None
        """The step of the last checkpoint written (or restored): a preemption at it does
        not write it again. None while this run has none: a rollback then has nothing of
        its own to go back to (:meth:`Recovery._rollback`)."""
        self._reported = False
        """Whether this process reported a step (or resent a checkpoint's unshipped records):
        from then on the reporter itself holds every record not shipped yet."""
        self._checkpoint_news = CheckpointNews(checkpoints)
        self._run_shared = False
        """Whether the ranks of a distributed run took the writer's checkpoint run (at the
        first :meth:`save`): a rollback's fallback stays within it on every rank."""
        """Which committed checkpoint the records have not said yet (``checkpoint_step``)."""

    # ------------------------------------------------------------------ data
    @property
    def epoch(self) -> int:
        """The current epoch: the sampler's; before :meth:`batches` built one (no
        ``dataset_size``), :meth:`epochs`' count (a restored checkpoint's epoch at first)."""
        if self.sampler is not None:
            return self.sampler.epoch
        waiting = self._waiting_position
        return int(waiting["epoch"]) if waiting is not None else 0

    def epochs(self, n: int) -> Iterator[int]:
        """Yield the epochs still to run out of ``n`` (resumes mid-epoch after a restart).

        From then on each metric record carries ``progress``: the share of the ``n`` epochs'
        samples done, 0..1 (the scheduler's estimate of the work left reads it). ``n`` is an
        integer >= 0 (a ``"3"`` from a command line was a bare ``TypeError``, ``2.5`` ran 3).
        An epoch ends when the loop's body returns, as a ``range(n)`` loop's does, also one
        the body left before its end: a ``break`` out of :meth:`batches`, or batches of the
        script's own loader (which :meth:`step` does not count as the sampler's). The same
        epoch came again before: with the rest of its batches after a ``break``, and for
        ever with the script's own loader."""
        n = whole_argument("epochs", n, 0)
        self._target_epochs = n if n > 0 else None
        while (epoch := self.epoch) < n:
            yield epoch
            if self.sampler is not None:  # built now, or by batches() in the body
                self.sampler.next_epoch()
            else:  # no dataset yet (the script's own loader): the count, kept in checkpoints
                self._waiting_position = {**(self._waiting_position or {}), "epoch": epoch + 1}
                self._waiting_position["offset"] = 0

    def stop_at_step(self, n: int | None) -> None:
        """Say the loop ends at step ``n`` (``None``: no bound), as ``fit(max_steps=n)`` does:
        from then on ``progress`` is the larger of the epochs' share and ``step / n``, so a
        run that ends at its step bound reports 1 on its last step (what the scheduler's
        estimate of the work left, and a sweep's median rule, read as done)."""
        if n is not None and whole_argument("max_steps", n, None) < 1:  # 2.5: a ConfigError
            raise ConfigError(f"max_steps must be 1 or more, not {n}")
        self._target_steps = n

    def batches(
        self, dataset: Any, collate: Callable[[list[Any]], Any] = default_collate
    ) -> Iterator[Any]:
        """This rank's batches of ``dataset`` for the rest of the current epoch.

        Each step takes exactly :attr:`batch`'s ``global_batch`` samples over the ranks (a
        rank's share is ``global_batch / world_size``, rounded up on the first ranks and down
        on the others when it does not divide), so adaptive growth takes effect at once;
        :meth:`step` commits each batch to the sampler. The batches' tensors are on the model's
        device (a GPU's when the job has one).

        Without ``init``'s ``dataset_size`` the first call builds the sampler from
        ``len(dataset)`` (:meth:`_sampler_for`), at a restored checkpoint's data position.
        A dataset that cannot be indexed (an ``IterableDataset``) is a :class:`ConfigError`
        (with ``dataset_size`` given it was torch's bare ``NotImplementedError``).
        """
        sampler = self.sampler if self.sampler is not None else self._sampler_for(dataset)
        getitem = getattr(type(dataset), "__getitem__", None)
        if getitem is None or getitem is torch.utils.data.Dataset.__getitem__:
            raise ConfigError(
                f"ctx.batches() draws samples by index, and a {type(dataset).__name__} "
                "cannot be indexed (an IterableDataset?): iterate it yourself (a DataLoader "
                "over it) and call ctx.step(batch, loss_fn) on each batch"
            )
        sampler.check_dataset(dataset)  # another size than dataset_size is refused
        d = self.distributed
        on_cpu = d.device.type == "cpu"
        batch = self.batch
        for lb in sampler.batches(
            rank=d.rank,
            world_size=d.world_size,
            follow_commits=True,
            global_batch=lambda: batch.global_batch,
        ):
            self._current = lb
            data = fetch(dataset, lb, collate)
            yield data if on_cpu else to_device(data, d.device)
            if self._current is lb:  # the caller did not train on it: count it as consumed
                self._current = None
                sampler.commit(lb.global_real)

    @property
    def current_batch(self) -> LocalBatch | None:
        """The sampler's record of the batch last yielded by :meth:`batches` (indices, real
        count) until :meth:`step` consumes it."""
        return self._current

    def _sampler_for(self, dataset: Any) -> ElasticSampler:
        """Build the run's sampler for ``dataset`` of ``len(dataset)`` samples, with
        ``init``'s ``shuffle``, ``seed`` and ``drop_last``, at :attr:`_waiting_position`
        (a restored checkpoint's data position: a checkpoint of another dataset size is a
        :class:`ConfigError` naming both sizes, and no sampler is kept). Before, ``ctx.batches``
        without ``init(dataset_size=...)`` was a ConfigError asking for it."""
        try:
            size: int | None = len(dataset)
        except TypeError:
            size = None
        # every rank's, so that all of them raise alike (one alone left the others waiting)
        sizes = self.distributed.all_gather_object(size)
        if size is None or None in sizes:
            raise ConfigError(
                f"ctx.batches() needs the dataset's size, and a {type(dataset).__name__} has "
                "no len() (an IterableDataset?) on rank "
                f"{sizes.index(None) if None in sizes else self.distributed.rank}: pass "
                "dataset_size=N to danlu.train.init(), or iterate it yourself and call "
                "ctx.step(batch, loss_fn)"
            )
        if len(set(sizes)) > 1:
            raise ConfigError(
                f"ctx.batches() got datasets of different sizes on the ranks ({sizes}, in "
                "rank order): the sampler shares one dataset's samples out between the ranks; "
                "give every rank the whole dataset (or pass dataset_size=N to "
                "danlu.train.init())"
            )
        if size == 0:
            raise ConfigError("ctx.batches() got an empty dataset (len(dataset) == 0)")
        sampler = ElasticSampler(size, **self._sampler_settings)
        waiting = self._waiting_position
        if waiting is not None or self._resumed_without_sampler:
            try:
                load_data_position(sampler, waiting)
            except ConfigError as exc:
                raise ConfigError(
                    f"ctx.batches() cannot go on from the checkpoint's data position: {exc}"
                ) from None
        self.sampler, self._waiting_position = sampler, None
        return sampler

    def _say_position_unused(self) -> None:
        """WARN, once, that a resumed run without a sampler trains on batches of its own:
        the rest of the restored checkpoint's epoch (its samples done) goes unused."""
        waiting = self._waiting_position
        if self._told_position_unused or waiting is None or not waiting.get("offset"):
            return
        self._told_position_unused = True
        load_data_position(None, waiting)

    # ------------------------------------------------------------------ step
    def step(self, data: Any, loss_fn: LossFn) -> StepResult:
        """One optimizer step on this rank's batch ``data``; see :class:`StepEngine`.

        Also: commits the data position, reports metrics, applies the anomaly action, grows the
        batch when adaptive, writes periodic checkpoints, and on SIGTERM checkpoints and exits
        with :data:`~danlu.train.env.PREEMPTED_EXIT_CODE`. A batch from elsewhere than
        :meth:`batches` (the script's own loader) is put on the model's device first.
        """
        if self._closed:
            raise self._closed_error("step()")
        self.preemption.forget_other_exit()  # another context's exit was caught: training on
        lb = self._current
        self._current = None
        if lb is None and self.distributed.device.type != "cpu":  # batches() moved its own
            data = to_device(data, self.distributed.device)
        if lb is None and self.sampler is None and self._resumed_without_sampler:
            self._say_position_unused()
        real = lb.real if lb is not None else None
        glob = lb.global_real if lb is not None else None
        # only runs with a goodput tuner or a gradient-noise estimator probe
        probing = (self.goodput is not None or self.engine.gns is not None) and self._probe()
        try:
            result = self.engine.step(data, loss_fn, real=real, global_real=glob)
            if (
                result.anomaly is not None
                and self.anomaly is not None
                and self.anomaly.action == "rollback"
            ):
                anomalous = self.step_num
                if anomalous in self._rolled_back_for:
                    log.warning(
                        "anomaly at step %d again after rolling back for it: step skipped",
                        anomalous,
                    )
                elif self._rollback():
                    self._rolled_back_for.add(anomalous)
                    return result
                # skipped (no checkpoint, or met again): its batch is consumed as by "skip"
            if (
                result.anomaly == "nonfinite_loss"
                and self.anomaly is not None
                and self.anomaly.action == "skip"
                and self._parameters_nonfinite()
            ):
                self._recover_parameters()
                return result
            if lb is not None and self.sampler is not None:
                self.sampler.commit(lb.global_real)
            self.step_num += 1
            self._report(result)
            if self._follows_api:
                self._follow_scheduler()
            if self.adaptive is not None:
                self._adapt(result)
        finally:
            if probing:  # back to one micro-batch: min(cap, local), as before (an OOM may cap it)
                self.batch.micro = min(self.batch.micro_cap, self.batch.local_batch)
        if (
            self.checkpoints.enabled
            and self.checkpoints.should_save(self.step_num)
            and not self._poisoned_checkpoint()
        ):
            self.save()
        # alone, only a signalled rank stops; distributed, every rank asks (they agree)
        preemption = self.preemption
        if (preemption.requested or self.distributed.enabled) and preemption.should_stop(
            self.step_num
        ):
            self._preempt()
        return result

    def _report(self, r: StepResult) -> None:
        now = time.perf_counter()
        wall = now - self._t_last
        self._t_last = now
        batch, precision, anomaly, sampler = self.batch, self.precision, self.anomaly, self.sampler
        record: dict[str, Any] = {
            "step": self.step_num,
            "epoch": self.epoch,
            "loss": r.loss,
            # the LR the step's optimizer step used (StepResult.lr: read before the schedule
            # advanced to the next step's) and Precision.loss_scale, read without a call
            "lr": r.lr if r.lr is not None else float(self.optimizer.param_groups[0]["lr"]),
            "grad_norm": r.grad_norm,
            "loss_scale": precision.loss_scale if precision.scaling else 1.0,
            "samples_per_s": r.samples / wall if wall > 0 else None,
            "step_time_s": r.step_time,
            "global_batch": batch.global_batch,
            "micro_batch": batch.micro,
            "accumulation": batch.accumulation,
            "world_size": self.distributed.world_size,
            "applied": r.applied,
            "skipped_steps": precision.skipped_steps,
            "anomalies": anomaly.total if anomaly is not None else 0,
            "anomaly": r.anomaly,
            "oom_count": batch.oom_count,
            "rollbacks": self.rollbacks,
            "time": time.time(),
        }
        if r.sync_time is not None:
            record["sync_time_s"] = r.sync_time
        if self.goodput is not None:
            record["adaptive"] = 1
        if self._gns_probe:
            record["probe"] = 1  # two half micro-batches to measure the gradient noise
        shares = []
        if self._target_epochs is not None and sampler is not None and sampler.n > 0:
            shares.append((sampler.epoch + sampler.offset / sampler.n) / self._target_epochs)
        if self._target_steps is not None:
            shares.append(self.step_num / self._target_steps)
        if shares:
            record["progress"] = min(1.0, max(shares))
        if (checkpoint := self._checkpoint_news.take()) is not None:
            record["checkpoint_step"] = checkpoint
        if self.adaptive is not None or self.engine.gns is not None:
            self._note_gradient_stats(record)
        if self.distributed.cuda:
            if now - self._memory_read_at >= MEMORY_READ_EVERY_S:
                self._memory_read_at = now
                self._memory_bytes = torch.cuda.max_memory_allocated(self.distributed.device)
            record["memory_bytes"] = self._memory_bytes
        self._reported = True
        self.history.append(record)
        if len(self.history) > 2 * HISTORY_LIMIT:
            del self.history[:HISTORY_LIMIT]
        if self.distributed.is_chief:
            self.reporter.report(record)
            if self.progress.enabled:
                self.progress.update(self.step_num, record)

    # ------------------------------------------------------------------ state
    def data_state(self) -> dict[str, Any]:
        """Everything besides model/optimizer/scheduler/scaler that a resume needs."""
        waiting = self._waiting_position
        return {
            "sampler": (
                self.sampler.state_dict()
                if self.sampler is not None
                else (dict(waiting) if waiting is not None else None)
            ),
            "batch": self.batch.state_dict(),
            "lr": self.lr.state_dict(),
            "anomaly": self.anomaly.state_dict() if self.anomaly is not None else None,
            "skipped_steps": self.precision.skipped_steps,
            "rollbacks": self.rollbacks,
            "engine_steps": self.engine.step_count,
            "norm_cadence": self.engine.cadence.state_dict(),
            "goodput": self.goodput.state_dict() if self.goodput is not None else None,
            # the sync probes left: a resume on the same GPUs does not run them again
            "probes": (
                probes_state(self._probes_left, self._placement())
                if self.goodput is not None
                else None
            ),
            "gns": gns.state_dict() if (gns := self._gradient_noise) is not None else None,
            "scheduler_batch": self._scheduler_batch,
        }

    def save(self, metrics: dict[str, float] | None = None) -> None:
        """Checkpoint now (every rank calls it; rank 0 writes). The checkpoint keeps the
        metric records of its steps that the reporter has not shipped yet
        (:meth:`~danlu.train.report.MetricsReporter.seal`), for a resumed run to send again:
        a process killed before its reporter shipped them leaves no gap. Distributed, every
        rank first takes rank 0's buffers (batch normalisation's running statistics differ
        between ranks; the checkpoint holds rank 0's, and every rank goes on from them as a
        resumed run would: :meth:`~danlu.train.distributed.Distributed.sync_buffers`), then, when
        ``consistency_check`` is on, checks that all ranks hold the same parameters. The
        ranks' RNG states are gathered to rank 0 and the checkpoint holds each rank's (a
        seed per rank, or ranks that draw different amounts, leave them apart), for
        :meth:`restore` to give each rank its own. With anomaly detection on, parameters
        that hold NaN/Inf are not written (a WARNING says so): see
        :meth:`~danlu.train.recovery.Recovery._nonfinite_to_save`. Distributed, a save
        that fails on the writer (a full disk) raises on every rank: the writer's own
        error, the others an error naming it (an ``OSError`` of its errno where it was
        one). After :meth:`close` it is a :class:`~danlu.core.errors.ConfigError` (the
        checkpoint manager is released: before, nothing was written and nothing said so)."""
        if self._closed:
            raise self._closed_error("save()")
        if not self.checkpoints.enabled or self._nonfinite_to_save():
            return
        self._saved_step = self.step_num
        api = state_api()
        rng_ranks = None
        if self.distributed.enabled:
            self.distributed.sync_buffers(self.model)
            if self.consistency_check:
                self.distributed.check_consistency(self.model)
            rng_ranks = self.distributed.gather_object(api.capture_rng_state())
        failure: Exception | None = None
        try:
            self._write_checkpoint(api, rng_ranks, metrics)
        except Exception as exc:
            if not self.distributed.enabled:
                raise
            failure = exc
        if self.distributed.enabled:
            # every rank raises when the writer's save failed (a full disk, say): before, the
            # writer raised alone and the others waited in the next collective until the
            # collective timeout, then failed on a timeout naming nothing
            from danlu.train.checkpoint.sharded import agree  # loaded with the manager

            agree(failure, f"the checkpoint of step {self.step_num}", DanluError)
            if not self._run_shared:  # once: every rank's rollback falls back within it
                self.checkpoints.join_run(
                    self.distributed.broadcast_object(self.checkpoints.run_id)
                )
                self._run_shared = True
            self.distributed.barrier()

    def _write_checkpoint(
        self, api: Any, rng_ranks: list[Any] | None, metrics: dict[str, float] | None
    ) -> None:
        """:meth:`save`'s own part on this rank: the writer (the chief) captures the state
        and saves it, and waits for it when distributed (an asynchronous save's failure
        is raised here then, for every rank to know); the others count the save."""
        if self.distributed.is_chief:
            data_state = self.data_state()
            # the records of the steps this checkpoint covers that the reporter has not
            # shipped yet: a run resumed from it sends them again (see restore)
            data_state["metrics_pending"] = self.reporter.seal()
            state = api.capture_state(
                unwrap(self.model),
                self.optimizer,
                self.scheduler,
                self.precision.scaler if self.precision.scaling else None,
                data_state=data_state,
                step=self.step_num,
                metrics_history=self.history[-HISTORY_LIMIT:],
                extra=dict(self.extra),
                copy=False,  # the manager snapshots live tensors (async: during the next step)
                rng_ranks=rng_ranks,
            )
            if metrics is None and self.history:
                metrics = {"loss": float(self.history[-1]["loss"])}
            self.checkpoints.save(self.step_num, state, metrics)
        else:
            self.checkpoints.note_saved(self.step_num)
        if self.distributed.enabled:
            self.checkpoints.wait()

    def restore(self) -> bool:
        """Load the newest valid checkpoint into the live objects; False when there is none.
        Each rank takes its own RNG states from it, or rank 0's when the checkpoint was
        written at another world size (or before it held every rank's). A process that has
        not reported a step yet (a resume) sends the metric records the checkpoint kept
        unshipped again (:meth:`~danlu.train.report.MetricsReporter.resend`: the API stores
        those that had arrived once); a rollback does not, its reporter still has them.

        All or nothing: a damaged or incompatible checkpoint is refused (an
        :class:`~danlu.train.state.IncompatibleCheckpointError`) before anything is loaded,
        and leaves the model, the optimizer, the scheduler, the scaler, every part and the
        context's own state as they were. What the context reads of it is checked first:
        :func:`~danlu.train.state.stored_run`, each part's state (batch, LR, anomaly, norm
        cadence, goodput, gradient noise: :func:`~danlu.train.part_states.parse_parts`),
        the sampler's position, the model and optimizer states. Then the model, optimizer,
        scheduler and scaler are loaded, the parts after them in that order (the LR's sets
        the optimizer's LRs), and the context's own step, history, ``extra``, counters,
        data position and metric records last."""
        found = self.checkpoints.load_latest()
        if found is None:
            return False
        step, state = found
        api, where = state_api(), self.checkpoints.directory
        try:  # before anything is loaded (a counter of an older checkpoint: the live one)
            run = api.stored_run(
                state, rollbacks=self.rollbacks, scheduler_batch=self._scheduler_batch
            )
            probes = None
            if self.goodput is not None:
                probes = stored_probes(run.data_state.get("probes"), self._placement())
        except ValueError as exc:
            problem = f"{exc} (the checkpoint is damaged)"
            raise api.resume_refused(step, where, problem) from None
        saved_position = run.data_state.get("sampler")
        if self.sampler is None and isinstance(saved_position, dict):  # its size: at batches()
            damage = waiting_position_problem(saved_position, **self._sampler_settings)
            if damage is not None:
                raise api.resume_refused(step, where, damage)
        gns = self._gradient_noise
        parsers: dict[str, Parse | None] = {  # the order they load in
            "batch": self.batch.parse_state_dict,
            "lr": self.lr.parse_state_dict,
            "anomaly": None if self.anomaly is None else self.anomaly.parse_state_dict,
            "norm_cadence": self.engine.cadence.parse_state_dict,
            "goodput": None if self.goodput is None else self.goodput.parse_state_dict,
            "gns": None if gns is None else gns.parse_state_dict,
        }
        # every part's state checked before anything is loaded
        loads = parse_parts(run.data_state, parsers, lambda p: api.resume_refused(step, where, p))
        try:
            api.restore_state(
                state,
                unwrap(self.model),
                self.optimizer,
                self.scheduler,
                self.precision.scaler if self.precision.scaling else None,
                rank=self.distributed.rank,
                world_size=self.distributed.world_size,
                sampler=self.sampler,  # another dataset or order is refused before loading
                global_batch_size=self.batch.base_global_batch,  # another: a WARNING
            )
        except api.IncompatibleCheckpointError as exc:  # another model, optimizer, data
            raise api.IncompatibleCheckpointError(
                f"cannot resume from the checkpoint of step {step} in {where}: {exc}. To train "
                "this script from scratch, give it a new checkpoint_dir (DANLU_CHECKPOINT_DIR) "
                "or pass resume=False; to resume, run the model, optimizer and data that wrote "
                "the checkpoint"
            ) from exc
        for load in loads:  # after the optimizer's state: the LR's sets its LRs
            load()
        ds = run.data_state
        # everything read and checked (the data position by restore_state): the context's own
        if self.sampler is not None:
            load_data_position(self.sampler, ds.get("sampler"))  # none saved: a WARNING
        else:  # the sampler batches() builds starts from it
            self._waiting_position = (
                dict(saved_position) if isinstance(saved_position, dict) else None
            )
            self._resumed_without_sampler = True
        self.step_num = run.step
        self._saved_step = self.step_num  # the checkpoint of this step exists
        self.history, self.extra = run.history, run.extra
        # after a rollback, a Rebatch received since the checkpoint differs from its and
        # _follow_scheduler applies it again
        counters = run.counters
        self.precision.skipped_steps, self.rollbacks = counters.skipped_steps, counters.rollbacks
        self.engine.step_count = counters.engine_steps
        self._scheduler_batch = counters.scheduler_batch
        if probes is not None:  # else (older checkpoint, other GPUs) as before: measured anew
            self._probes_left = probes
        if not self._reported:
            self._reported = True  # sent once: a second restore would write a file's twice
            self.reporter.resend(run.metrics_pending, self.step_num)  # the file cut back too
            self._checkpoint_news.resumed_from = self.step_num  # the first record says it
        else:  # a rollback: the steps it redoes are not in the JSONL file twice
            self.reporter.rewind(self.step_num)
        return True

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> TrainContext:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Close the context (:meth:`close`). Left by anything but a preemption exit (its
        block's end, another exception), an inner context's exit caught inside the block
        writes no checkpoint for this one."""
        if not isinstance(exc, Preempted):
            self.preemption.forget_other_exit()
        self.close()

    def close(self) -> None:
        """Finish the checkpoint in flight, say the last one committed when no record did
        (:meth:`_say_last_checkpoint`), flush metrics, restore the signal handler, leave the
        group. A save in flight that failed raises here, after all that.

        Closed after the preemption exit of another context open inside this one (a second
        ``init`` in this ``with`` block that stopped first after a SIGTERM, which reached
        both, or its ``preemption.request()``), this one writes its preemption checkpoint
        first, at its last step, by its ``with`` or by hand (before, it closed without one
        and its run lost the steps since its last checkpoint; then a ``close()`` by hand
        still did); on every rank, as the ranks agreed on the stop. Closed otherwise (its
        block's end, any other exception) it writes none, nor when the script caught that
        exit and took a step on this context since
        (:meth:`~danlu.train.preempt.Preemption.forget_other_exit`)."""
        if self._closed:
            return
        try:
            if self.preemption.other_exited:
                self._preemption_checkpoint()
        finally:
            self._closed = True
            try:
                self.reporter.flush_soon()  # the records ship while the checkpoint is written
                self.checkpoints.wait()
            finally:
                self._say_last_checkpoint()
                self.progress.close()
                self.reporter.close()
                self.checkpoints.close()
                self.preemption.close()
                self.distributed.close()

    def _closed_error(self, call: str) -> ConfigError:
        """The error of a ``call`` that needs the open context, made after :meth:`close`."""
        return ConfigError(
            f"ctx.{call} needs the open training context, and it was closed (its with block "
            "ended, fit() returned, or ctx.close() ran): call it before the context closes "
            "(inside the with block; with fit(), in its evaluate)"
        )

    def _say_last_checkpoint(self) -> None:
        """Report a record of its own for a checkpoint committed after the last record (see
        :mod:`danlu.train.ckpt_news`), on the chief, before the reporter's last flush: the
        periodic checkpoint of the last step, a final :meth:`save`, a preemption's (said only
        now that it is committed), or the one a run that took no step resumed from. Not part
        of :attr:`history`, which holds the steps' records. A goodput-adaptive run's says
        ``adaptive`` as its every record does (the server reads it from a batch's last)."""
        if not self.distributed.is_chief:
            return
        record = self._checkpoint_news.closing_record(self.step_num)
        if record is None:
            return
        if self.goodput is not None:
            record["adaptive"] = 1
        self.reporter.report(record)
