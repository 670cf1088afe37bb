"""Anomaly recovery and preemption never go through a checkpoint that is not this run's good
state: a run started with ``resume=False`` in a directory holding an older run's
checkpoints never rolls back into them, and a preemption never checkpoints parameters that
hold NaN/Inf (its restart would resume from them and fail for good)."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.anomaly import TrainingAnomalyError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.env import JobEnv
from danlu.train.step import LossFn


def _init(model: torch.nn.Module, **kwargs: Any) -> dt.TrainContext:
    """danlu.train over ``model`` (SGD), 4 samples a step from a 32-sample dataset (unless
    ``dataset_size`` says another), in order."""
    kwargs.setdefault("dataset_size", 32)
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        shuffle=False,
        metrics_file=False,
        progress=False,
        environ={},
        **kwargs,
    )


def _older_run(directory: Path) -> None:
    """A finished run of all 8 steps that checkpointed every 3 steps (steps 3 and 6)."""
    data = tiny_regression(n=32, seed=1)
    with _init(tiny_model(seed=1), checkpoint_dir=str(directory), checkpoint_every_steps=3) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
    assert [i.step for i in CheckpointManager(str(directory)).list_checkpoints()] == [3, 6]


def _nan_input_at(sample: int) -> torch.utils.data.TensorDataset:
    data = tiny_regression(n=32)
    data.tensors[0][sample, 0] = float("nan")  # a non-finite loss on the batch holding it
    return data


def test_a_fresh_run_never_rolls_back_into_an_older_runs_checkpoint(tmp_path: Path) -> None:
    """Before, the fresh run's anomaly at step 2 "rolled back" to the older run's checkpoint
    of step 6: other weights, and the data position jumped past 16 unseen samples."""
    _older_run(tmp_path)
    data = _nan_input_at(5)  # the second batch of 4
    steps: list[int] = []
    with _init(
        tiny_model(),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=5,
        anomaly="rollback",
        resume=False,
    ) as ctx:
        assert ctx.step_num == 0
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                steps.append(ctx.step_num)
        assert ctx.rollbacks == 0
        assert steps == list(range(1, 9))  # the bad batch skipped, every other one trained
        assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_loss": 1}


def test_after_its_own_first_checkpoint_a_fresh_run_rolls_back_to_it(tmp_path: Path) -> None:
    """The control: the checkpoint this run wrote is where a rollback goes."""
    _older_run(tmp_path)
    data = _nan_input_at(4 * 4 + 1)  # the fifth batch: after this run's checkpoint of step 2
    steps: list[int] = []
    with _init(
        tiny_model(),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
        anomaly="rollback",
        resume=False,
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                steps.append(ctx.step_num)
        assert ctx.rollbacks == 1
    # back to this run's checkpoint of step 4, the bad batch met again there and skipped
    assert steps == [1, 2, 3, 4, 4, 5, 6, 7, 8]


def _nan_gradient_on(call: int) -> LossFn:
    """A loss_fn whose gradient is NaN on its ``call``-th call (from 0) while the loss stays
    finite: ``0 * sqrt(w - w)`` is 0, its derivative 0 * inf."""
    calls = [0]

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        loss = mse_loss(m, b)
        if calls[0] == call:
            w = next(m.parameters())
            loss = loss + 0.0 * (w - w.detach()).sum().sqrt()
        calls[0] += 1
        return loss

    return loss_fn


def test_nan_parameters_of_a_fresh_run_stop_it_instead_of_loading_an_older_run(
    tmp_path: Path,
) -> None:
    """Under "skip", parameters a NaN gradient reached off the norm's cadence are mended by a
    rollback. Before this run wrote a checkpoint there is none of its own to go back to:
    before, it went back to the older run's checkpoint of step 6 as if it were its own."""
    _older_run(tmp_path)
    data = tiny_regression(n=32)
    with _init(
        tiny_model(),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=5,
        grad_norm_every=100,
        resume=False,
    ) as ctx:
        batches = ctx.batches(data)
        loss_fn = _nan_gradient_on(1)  # step 2's update is unchecked: NaN parameters
        for _ in range(2):
            ctx.step(next(batches), loss_fn)
        with pytest.raises(TrainingAnomalyError, match="a checkpoint it wrote or resumed from"):
            ctx.step(next(batches), loss_fn)  # a NaN loss from the NaN parameters
        assert ctx.rollbacks == 0 and ctx.step_num == 2


def _preempted_on_a_poisoned_step(directory: Path, **kwargs: Any) -> int:
    """Train with a NaN gradient on the sixth step, whose end SIGTERM reaches (a real
    signal to this process, caught by danlu's handler); the exit code."""
    data = tiny_regression(n=64)
    loss_fn = _nan_gradient_on(5)
    with (
        pytest.raises(SystemExit) as stop,
        _init(tiny_model(), checkpoint_dir=str(directory), dataset_size=64, **kwargs) as ctx,
    ):
        for batch in ctx.batches(data):
            if ctx.step_num == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            ctx.step(batch, loss_fn)
    assert isinstance(stop.value.code, int)
    return stop.value.code


@pytest.mark.parametrize(
    ("action", "every"),
    [("skip", 3), ("rollback", 3), ("warn", 1)],  # unchecked; checked, but applied by "warn"
)
def test_a_preemption_never_checkpoints_nan_parameters(
    tmp_path: Path, action: str, every: int
) -> None:
    """Step 6's NaN gradient reaches the parameters (off a cadence of 3, or applied by
    "warn"), and the preemption comes at its end. Before, the preemption's checkpoint was
    written from the NaN parameters: the restart resumed from them, rolled back to that
    same checkpoint (the newest) and stopped with "NaN/Inf at step 6 again" on every
    restart, although the checkpoint of step 4 was good."""
    code = _preempted_on_a_poisoned_step(
        tmp_path, anomaly=action, grad_norm_every=every, checkpoint_every_steps=4
    )
    assert code == dt.PREEMPTED_EXIT_CODE
    found = CheckpointManager(str(tmp_path)).load_latest()
    assert found is not None
    step, state = found
    assert step == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    # the restart resumes from step 4 and trains on
    data = tiny_regression(n=64)
    with _init(
        tiny_model(),
        checkpoint_dir=str(tmp_path),
        dataset_size=64,
        anomaly=action,
        grad_norm_every=every,
    ) as ctx:
        assert ctx.step_num == 4
        batches = ctx.batches(data)
        losses = [ctx.step(next(batches), mse_loss).loss for _ in range(4)]
    assert all(math.isfinite(loss) for loss in losses)


def test_a_preemption_on_healthy_parameters_still_checkpoints(tmp_path: Path) -> None:
    """The control: the same preemption without the NaN gradient writes step 6."""
    data = tiny_regression(n=64)
    with (
        pytest.raises(SystemExit) as stop,
        _init(
            tiny_model(),
            checkpoint_dir=str(tmp_path),
            dataset_size=64,
            grad_norm_every=3,
            checkpoint_every_steps=4,
        ) as ctx,
    ):
        for batch in ctx.batches(data):
            if ctx.step_num == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            ctx.step(batch, mse_loss)
    assert stop.value.code == dt.PREEMPTED_EXIT_CODE
    found = CheckpointManager(str(tmp_path)).load_latest()
    assert found is not None and found[0] == 6


@pytest.mark.parametrize("action", ["skip", "rollback"])
def test_fit_never_writes_its_end_of_epoch_checkpoint_from_nan_parameters(
    tmp_path: Path, action: str
) -> None:
    """The last step of the first epoch (step 8) applies a NaN gradient off the norm's
    cadence. Before, ``fit``'s end-of-epoch checkpoint of step 8 held the NaN parameters:
    the next step's NaN loss rolled back to it (the newest), and the run stopped with
    "NaN/Inf at step 8 again" (under "rollback" it trained on with NaN parameters), as
    would every restart. Now that checkpoint is not written, and the run recovers from
    the periodic checkpoint of step 6 and finishes."""
    model = tiny_model()
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        tiny_regression(n=32),
        _nan_gradient_on(7),
        epochs=3,
        global_batch_size=4,
        shuffle=False,
        evaluate=lambda c: 1.0,
        anomaly=action,
        grad_norm_every=100,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=3,
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert ctx.step_num == 24 and ctx.rollbacks == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    manager = CheckpointManager(str(tmp_path))
    for info in manager.list_checkpoints():
        _, state = manager.load(info.name)
        assert all(torch.isfinite(t).all() for t in state["model"].values()), info.step


def test_warn_leaves_out_a_loops_own_save_of_nan_parameters(tmp_path: Path) -> None:
    """Under "warn" the periodic checkpoint of step 4 is left out for the NaN parameters
    step 4 applied; before, the loop's own ``ctx.save()`` at the same step (an epoch's end)
    wrote them, and a restart resumed from them."""
    data = tiny_regression(n=16)
    with _init(
        tiny_model(),
        dataset_size=16,
        anomaly="warn",
        grad_norm_every=1,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
    ) as ctx:
        loss_fn = _nan_gradient_on(3)
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, loss_fn)
            ctx.save()
        assert ctx.step_num == 4
    found = CheckpointManager(str(tmp_path)).load_latest()
    assert found is not None and found[0] == 2
    assert all(torch.isfinite(t).all() for t in found[1]["model"].values())


def test_deeply_nested_hparams_are_a_config_error_naming_the_variable() -> None:
    """Before, a bare RecursionError from the JSON decoder."""
    with pytest.raises(ConfigError, match="DANLU_HPARAMS"):
        JobEnv.from_environ({"DANLU_HPARAMS": "[" * 100_000})
