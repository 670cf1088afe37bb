"""Building the training context: :func:`init` reads the job environment, joins the process
group, wraps the model in DDP, applies the GPU memory limit, picks the batch configuration,
opens the checkpoints, resumes from the newest one and installs the SIGTERM handler; see
:mod:`danlu.train.context` for the object it returns.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import torch

from danlu.core.spec_training import PRECISION_SPELLINGS
from danlu.train.amp import Precision
from danlu.train.anomaly import AnomalyDetector
from danlu.train.batch import (
    AdaptiveBatch,
    BatchController,
    estimated_micro_batch,
)
from danlu.train.cadence import NormEvery
from danlu.train.checks import check_init_args, check_training_objects, checkpoint_directory
from danlu.train.ckpt import Checkpoints
from danlu.train.context import TrainContext
from danlu.train.data import ElasticSampler
from danlu.train.distributed import Distributed
from danlu.train.env import JobEnv
from danlu.train.lr import LRController
from danlu.train.memory_cap import apply_memory_limit
from danlu.train.oom import OOMInjector, memory_budget, smallest_micro_batch
from danlu.train.preempt import Preemption
from danlu.train.report import MetricsReporter, Progress
from danlu.train.scaling import normalised_rule
from danlu.train.step import StepEngine
from danlu.train.stop_cause import StopCause

log = logging.getLogger("danlu.train")


def _metrics_path(
    env: JobEnv, metrics_file: str | Path | bool | None, checkpoint_dir: str | None
) -> Path | None:
    """Where the metrics JSONL file goes: ``metrics_file``, else ``DANLU_METRICS_FILE``, else
    ``metrics.jsonl`` in a local checkpoint directory (the directory the checkpoints go to:
    ``~`` expanded, a ``file://`` URL's path), else ``danlu-metrics.jsonl`` here; ``None``
    with ``metrics_file=False``. An empty ``metrics_file`` is none given, as an empty
    ``DANLU_METRICS_FILE`` is (``Path("")`` is the working directory, no file)."""
    if metrics_file is False:
        return None
    if isinstance(metrics_file, Path) or (isinstance(metrics_file, str) and metrics_file):
        return Path(metrics_file)
    if env.metrics_file:
        return Path(env.metrics_file)
    if checkpoint_dir:
        # the checkpoint engine's own module (imported by Checkpoints already): a path is
        # resolved once, the same way for both
        from danlu.train.checkpoint.storage import local_directory

        local = local_directory(checkpoint_dir)
        if local is not None:
            return Path(local) / "metrics.jsonl"
    return Path("danlu-metrics.jsonl")


def _chosen_precision(asked: str | None, env: JobEnv) -> str:
    """The precision to train in: ``asked`` (``init``'s argument) when given, else the job
    spec's (``DANLU_PRECISION``), else ``"fp32"``. A WARNING, on the chief, when ``asked``
    names another precision than the spec's: the memory the control plane reserved for the
    job was estimated for the spec's (``fp32`` needs more activation memory than ``bf16``).
    An ``asked`` that is no precision is left to :class:`Precision` to refuse."""
    if asked is None:
        return env.precision or "fp32"
    name = PRECISION_SPELLINGS.get(asked.strip().lower()) if isinstance(asked, str) else None
    if env.precision is not None and name is not None and name != env.precision and env.is_chief:
        log.warning(
            "init(precision=%r) trains in %s, but the job spec's training.precision is %s "
            "(DANLU_PRECISION): the job's GPU memory was estimated for %s; leave precision "
            "out to train in the spec's, or set training.precision: %s in the spec",
            asked,
            name,
            env.precision,
            env.precision,
            name,
        )
    return asked


def init(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    *,
    global_batch_size: int,
    micro_batch_size: int | None = None,
    precision: str | None = None,
    warmup_steps: int = 0,
    grad_norm_tau: float | None = None,
    clip_grad_norm: float | None = None,
    compute_grad_norm: bool = True,
    grad_norm_every: NormEvery = "auto",
    anomaly: str | None = "skip",
    anomaly_k: float = 6.0,
    anomaly_window: int = 100,
    adaptive_batch: AdaptiveBatch | None = None,
    lr_scaling: str = "linear",
    gns_every: int = 0,
    dataset_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every_steps: int | None = None,
    checkpoint_every_seconds: float | None = None,
    keep_last: int = 3,
    keep_best: int = 1,
    best_metric: str | None = None,
    best_mode: str = "min",
    async_checkpoint: bool = False,
    incremental_checkpoint: bool = False,
    resume: bool = True,
    metrics_file: str | Path | bool | None = None,
    report_interval_s: float = 2.0,
    progress: bool | None = None,
    oom_injector: OOMInjector | None = None,
    consistency_check: bool = True,
    collective_timeout_s: float = 300.0,
    ddp_kwargs: dict[str, Any] | None = None,
    memory_model: Any = None,
    environ: dict[str, str] | None = None,
) -> TrainContext:
    """Build the :class:`TrainContext` for this process.

    ``global_batch_size`` is the number of samples per optimizer step over all ranks (the LR
    is tuned for it; ``DANLU_GLOBAL_BATCH_SIZE``, the scheduler's choice, replaces it and the
    LR follows by ``lr_scaling``); the per-GPU micro-batch is ``micro_batch_size``, else
    ``DANLU_BATCH_SIZE``, else, given a ``memory_model`` (``danlu.estimate``'s
    ``MemoryModel`` of this training step, e.g. from ``fit_memory_model``), the largest
    micro-batch it predicts to fit ``DANLU_GPU_MEMORY_LIMIT`` (on a GPU without one: the
    device's memory) with 5 % to spare, else the whole local batch.
    ``drop_last``: each epoch of ``ctx.batches()`` ends once fewer samples are left than one
    global batch (for batch normalisation; see :mod:`danlu.train.data`).
    ``dataset_size``: the length of the dataset that ``ctx.batches()`` draws from (0, an empty
    dataset, is refused).
    ``checkpoint_dir`` (a path, ``pathlib.Path`` or URL) defaults to
    ``DANLU_CHECKPOINT_DIR``; ``anomaly`` is one of
    ``"skip"``, ``"rollback"``, ``"stop"``, ``"warn"`` or None; spikes are judged against the
    last ``anomaly_window`` healthy values (at least 20, the values a limit needs) as
    ``mu + anomaly_k * sigma``; ``precision`` is ``"fp32"``,
    ``"fp16"`` or ``"bf16"``, by default the job spec's ``training.precision``
    (``DANLU_PRECISION``), else ``"fp32"``: one given that differs from the spec's wins, with a
    WARNING naming both (the control plane reserved the memory the spec's needs).
    ``environ`` replaces ``os.environ`` (tests).
    Checkpoints: the newest ``keep_last`` are kept, and besides them the ``keep_best`` best by
    ``best_metric`` (a key of the metrics given to :meth:`TrainContext.save`; ``fit`` saves
    its evaluation as ``"eval"``), lowest first with ``best_mode`` ``"min"``, highest with
    ``"max"``.
    ``grad_norm_every``: compute the gradient norm (a metric, and what anomaly detection
    checks for NaN/Inf gradients and spikes) on every N-th step only; the loss is still
    checked every step. ``"auto"`` (the default) is every step on a GPU, and on a CPU every
    step unless that costs more than a tenth of a percent of the step (a memory-bound model),
    else every N-th step with the smallest N that keeps it within that budget, measured over
    the first steps and kept in the checkpoint (:mod:`danlu.train.cadence`); 1 is every
    step. Clipping and ``grad_norm_tau`` need the norm every step and ignore it.
    ``model`` is a ``torch.nn.Module``, ``optimizer`` an optimizer holding some of its
    parameters and ``scheduler`` an LR scheduler of that optimizer, else a
    :class:`~danlu.core.errors.ConfigError` naming the argument
    (:func:`~danlu.train.checks.check_training_objects`).
    """
    check_training_objects(model, optimizer, scheduler)
    checkpoint_dir = checkpoint_directory(checkpoint_dir)
    check_init_args(
        micro_batch_size=micro_batch_size,
        warmup_steps=warmup_steps,
        grad_norm_tau=grad_norm_tau,
        clip_grad_norm=clip_grad_norm,
        anomaly_k=anomaly_k,
        anomaly_window=anomaly_window,
        lr_scaling=lr_scaling,
        gns_every=gns_every,
        checkpoint_every_steps=checkpoint_every_steps,
        checkpoint_every_seconds=checkpoint_every_seconds,
        keep_last=keep_last,
        keep_best=keep_best,
        best_mode=best_mode,
        report_interval_s=report_interval_s,
        collective_timeout_s=collective_timeout_s,
        dataset_size=dataset_size,
        global_batch_size=global_batch_size,
        checkpoint_dir=checkpoint_dir,
        metrics_file=metrics_file,
        shuffle=shuffle,
        drop_last=drop_last,
        seed=seed,
        async_checkpoint=async_checkpoint,
        incremental_checkpoint=incremental_checkpoint,
        resume=resume,
    )
    lr_scaling = normalised_rule(lr_scaling)  # "AdaScale" passed the check: compare it once
    env = JobEnv.from_environ(environ)
    # what is set up before the context exists goes again if a later step fails (the
    # caller never gets a context to close): the process group, the reporter's thread, the
    # progress bar's thread, the SIGTERM handler
    with contextlib.ExitStack() as undo:
        dist = Distributed.from_env(env, timeout_s=collective_timeout_s)
        undo.callback(dist.close)
        apply_memory_limit(env.gpu_memory_limit, dist.device, env.gpu_context_bytes)
        wrapped = dist.wrap(model, **(ddp_kwargs or {}))
        micro = micro_batch_size or env.batch_size
        if micro is None and memory_model is not None:  # BatchController caps it at the local batch
            budget = memory_budget(env.gpu_memory_limit, dist.device)
            micro = estimated_micro_batch(memory_model, budget)
        batch = BatchController(
            global_batch_size, dist.world_size, micro, min_micro=smallest_micro_batch(model)
        )
        lr = LRController(
            optimizer, scheduler, warmup_steps=warmup_steps, grad_norm_tau=grad_norm_tau
        )
        detector = (
            AnomalyDetector(anomaly, window=anomaly_window, k=anomaly_k)
            if anomaly is not None
            else None
        )
        gns = adaptive_batch.gns if adaptive_batch is not None else None
        if adaptive_batch is not None and adaptive_batch.mode != "schedule" and gns_every <= 0:
            gns_every = 10
        engine = StepEngine(
            wrapped,
            optimizer,
            lr,
            batch,
            Precision(_chosen_precision(precision, env), dist.device),
            dist,
            detector,
            clip_grad_norm=clip_grad_norm,
            compute_grad_norm=compute_grad_norm,
            grad_norm_every=grad_norm_every,
            gns=gns,
            gns_every=gns_every,
            oom_injector=oom_injector,
        )
        ckpt_dir = checkpoint_dir or env.checkpoint_dir
        checkpoints = Checkpoints(
            ckpt_dir,
            every_steps=checkpoint_every_steps,
            every_seconds=checkpoint_every_seconds,
            keep_last=keep_last,
            keep_best=keep_best,
            best_metric=best_metric,
            mode=best_mode,
            async_save=async_checkpoint,
            incremental=incremental_checkpoint,
            writer=dist.is_chief,
            agree=dist.any if dist.enabled else None,
            gather=dist.all_gather_object if dist.enabled else None,
        )
        path = _metrics_path(env, metrics_file, ckpt_dir) if dist.is_chief else None
        reporter = MetricsReporter(
            url=env.metrics_url if dist.is_chief else None,
            token=env.token,
            path=path,
            interval_s=report_interval_s,
        )
        reporter.start()
        undo.callback(reporter.close)
        sampler = (
            ElasticSampler(dataset_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
            if dataset_size is not None
            else None
        )
        # the bar's refresh thread and the SIGTERM handler go too when the context cannot
        # be made (its own checks, the goodput tuner's, raise after these exist)
        bar = Progress(None, progress if dist.is_chief else False)
        undo.callback(bar.close)
        preemption = Preemption(dist, cause=StopCause.from_env(env))
        undo.callback(preemption.close)
        ctx = TrainContext(
            env=env,
            distributed=dist,
            model=wrapped,
            optimizer=optimizer,
            scheduler=scheduler,
            engine=engine,
            checkpoints=checkpoints,
            reporter=reporter,
            progress=bar,
            preemption=preemption,
            sampler=sampler,
            adaptive=adaptive_batch,
            lr_scaling=lr_scaling,
            consistency_check=consistency_check,
            sampler_settings={"shuffle": shuffle, "seed": seed, "drop_last": drop_last},
        )
        undo.pop_all()  # the context owns them now: ctx.close() ends them

    try:
        checkpoints.claim_directory()  # a WARNING when another open context has it
        if resume and ctx.restore():
            log.info("resumed from the checkpoint of step %d", ctx.step_num)
        if env.global_batch_size is not None:
            ctx.adopt_launch_batch(env.global_batch_size)
    except BaseException:
        # an incompatible checkpoint, say: the caller never gets the context to close, so
        # its reporter thread, SIGTERM handler and process group go now
        ctx.close()
        raise
    return ctx
