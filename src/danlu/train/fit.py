"""``fit()``: the common training loop on top of :func:`danlu.train.init`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from danlu.core.errors import ConfigError, DanluError
from danlu.train.build import init
from danlu.train.checks import whole_argument
from danlu.train.context import TrainContext
from danlu.train.step import LossFn

log = logging.getLogger("danlu.train")

EVALUATED = "evaluated_epoch"
"""Key of ``ctx.extra`` (saved in the checkpoints) naming the last epoch ``fit`` evaluated: a
run resumed from that epoch's end-of-epoch checkpoint neither evaluates it again nor steps
``ReduceLROnPlateau`` twice for it."""


def _evaluated(value: Any) -> float:
    """``fit``'s ``evaluate`` result as the epoch's metric: a real number or a one-element
    tensor. Anything else (None from an ``evaluate`` without its ``return``, a dict of
    metrics, a word) is a :class:`~danlu.core.errors.ConfigError` naming ``evaluate`` and
    what it returned; ``float()``'s own error named neither. What ``float()`` reads is
    taken as before (a number's string too)."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        pass
    what = "None" if value is None else f"a {type(value).__name__}"
    if isinstance(value, torch.Tensor):
        what = f"a tensor of shape {tuple(value.shape)}"
    raise ConfigError(
        "fit(evaluate=...) must return the epoch's metric as a number (a float or a "
        f"one-element tensor); it returned {what}"
    )


def _evaluated_or_saved(ctx: TrainContext, evaluate: Callable[[TrainContext], Any]) -> float:
    """The epoch's metric from ``evaluate``; when ``evaluate`` fails (a bug in it, an
    out-of-memory error while evaluating, no number returned), the epoch's training is
    checkpointed first (without a metric, where a checkpoint directory is set) and the error
    raised: before, the run closed without a checkpoint and its restart trained the epoch
    again (from scratch without periodic checkpoints). The restart resumes at the epoch's end
    and evaluates it. A failed checkpoint is logged, and ``evaluate``'s error raised.

    Distributed, the ranks agree on the outcome first (one collective on every rank, success
    or not: :func:`~danlu.train.checkpoint.sharded.agree`): when ``evaluate`` failed on any
    rank, every rank checkpoints without a metric and raises, the failing ranks their own
    error and the others a :class:`~danlu.core.errors.DanluError` naming the failing ranks
    (an ``OSError`` of the first failing rank's errno where it had one). Before, the failing
    ranks raised alone while the others checkpointed the epoch with their metric and trained
    on, waiting in the next collective until its timeout. Without a process group nothing
    is exchanged."""
    failure: Exception | None = None
    metric = 0.0
    try:
        metric = _evaluated(evaluate(ctx))
    except Exception as exc:
        failure = exc
    try:
        if ctx.distributed.enabled:
            from danlu.train.checkpoint.sharded import agree

            what = f"fit(evaluate=...) at the end of epoch {ctx.epoch} (step {ctx.step_num})"
            agree(failure, what, DanluError)
        elif failure is not None:
            raise failure
    except Exception:
        try:
            ctx.save()
        except Exception:
            log.exception("the checkpoint of step %d, after evaluate failed, failed", ctx.step_num)
        raise
    finally:
        failure = None  # no reference cycle through the raised error's traceback
    return metric


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    dataset: Any,
    loss_fn: LossFn,
    *,
    epochs: int = 1,
    scheduler: Any = None,
    global_batch_size: int = 32,
    max_steps: int | None = None,
    evaluate: Callable[[TrainContext], float] | None = None,
    **init_kwargs: Any,
) -> TrainContext:
    """Train ``model`` on an indexable ``dataset`` for ``epochs`` epochs (or ``max_steps``).

    ``loss_fn(model, micro_batch)`` returns the mean loss of a micro-batch; ``evaluate(ctx)``,
    when given, runs after every epoch and its value feeds ``ReduceLROnPlateau`` and, with a
    checkpoint directory, a checkpoint of that epoch's end whose metric ``"eval"`` ranks it
    for ``keep_best`` (``best_metric`` defaults to ``"eval"``; ``best_mode`` to the plateau
    scheduler's mode, else ``"min"``). Each epoch is evaluated once across restarts (a run
    resumed from an end-of-epoch checkpoint goes on with the next epoch), and a run resumed at
    ``max_steps`` or beyond trains no more. An ``evaluate`` that raises (or returns no
    number: a :class:`~danlu.core.errors.ConfigError` naming it) has the epoch's end
    checkpointed first, so that its restart evaluates the epoch without training it
    again; distributed, an ``evaluate`` failing on some ranks only fails every rank alike
    (the others with a :class:`~danlu.core.errors.DanluError` naming the failing ranks),
    each having checkpointed the epoch's end without a metric. ``max_steps`` is an integer
    >= 1 or None (no step bound): 0, which trained nothing and said nothing, is a
    :class:`~danlu.core.errors.ConfigError` naming it. Every other keyword goes to
    :func:`danlu.train.init` but ``dataset_size`` (it is ``len(dataset)``: a
    :class:`~danlu.core.errors.ConfigError`, as is a ``dataset`` without ``len()``). Returns
    the (closed) context, whose ``history`` holds the per-step metrics. A ``loss_fn`` or
    ``evaluate`` that is no function is a :class:`~danlu.core.errors.ConfigError` naming it
    before anything is built (the first failed at the first step with a bare ``TypeError``).
    """
    for name, function in (("loss_fn", loss_fn), ("evaluate", evaluate)):
        if function is not None and not callable(function):  # failed at the first step
            raise ConfigError(
                f"fit()'s {name} must be a function, got a {type(function).__name__} "
                f"({function!r}); the loss is loss_fn(model, micro_batch), returning the "
                "micro-batch's mean loss"
            )
    if "dataset_size" in init_kwargs:  # a bare TypeError ("multiple values") from init
        raise ConfigError(
            "fit() takes no dataset_size: it is len(dataset); to train on a part of the "
            "data, pass that part (torch.utils.data.Subset(dataset, range(n)))"
        )
    try:
        dataset_size = len(dataset)
    except TypeError:  # an IterableDataset, a generator: a bare TypeError before
        raise ConfigError(
            f"fit() needs a dataset with len() and indexing (a map-style dataset, such as a "
            f"TensorDataset), not a {type(dataset).__name__}; for a stream, write the loop "
            "with danlu.train.init() and ctx.step()"
        ) from None
    whole_argument("epochs", epochs, 0)  # before the context is built (and resumes)
    if max_steps is not None:  # an integer (2.5 ran 3 steps; "3" failed after the start)
        max_steps = whole_argument("max_steps", max_steps, None)
        if max_steps < 1:  # 0 or -1 returned at once, having trained nothing, silently
            raise ConfigError(
                f"fit(max_steps={max_steps}) would train no step: give max_steps >= 1, or "
                "None (the default) to train the epochs without a step bound"
            )
    if evaluate is not None:
        init_kwargs.setdefault("best_metric", "eval")
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            init_kwargs.setdefault("best_mode", scheduler.mode)
    with init(
        model,
        optimizer,
        scheduler,
        global_batch_size=global_batch_size,
        dataset_size=dataset_size,
        **init_kwargs,
    ) as ctx:
        ctx.stop_at_step(max_steps)
        if max_steps is not None and ctx.step_num >= max_steps:
            return ctx  # resumed from the checkpoint of the last step (e.g. preempted on it)
        for _ in ctx.epochs(epochs):
            for batch in ctx.batches(dataset):
                ctx.step(batch, loss_fn)
                if max_steps is not None and ctx.step_num >= max_steps:
                    return ctx
            if evaluate is not None and ctx.extra.get(EVALUATED) != ctx.epoch:
                metric = _evaluated_or_saved(ctx, evaluate)
                ctx.lr.plateau_step(metric)
                ctx.extra["eval"] = metric
                ctx.extra[EVALUATED] = ctx.epoch
                ctx.save({"eval": metric})
    return ctx
