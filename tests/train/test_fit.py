"""``fit()`` across restarts: an epoch is evaluated once, and ``max_steps`` is a ceiling that
a resumed run respects."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


class Crash(Exception):
    """The job dies (a node fails) in the middle of a step."""


def _fit_with_plateau(
    directory: Path, crash_at_call: int | None = None
) -> tuple[list[tuple[int, int]], torch.optim.lr_scheduler.ReduceLROnPlateau]:
    """Three epochs of 2 steps with a constant evaluation (each after the first is "no
    improvement"), until the ``crash_at_call``-th call of the loss; the evaluations
    (epoch, step) and the scheduler."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    evaluations: list[tuple[int, int]] = []
    calls = [0]

    def evaluate(ctx: dt.TrainContext) -> float:
        evaluations.append((ctx.epoch, ctx.step_num))
        return 1.0

    def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == crash_at_call:
            raise Crash
        return mse_loss(model, batch)

    with contextlib.suppress(Crash):  # the first run dies; the next resumes
        dt.fit(
            model,
            opt,
            tiny_regression(n=16),
            loss,
            epochs=3,
            scheduler=plateau,
            global_batch_size=8,
            evaluate=evaluate,
            checkpoint_dir=str(directory),
            metrics_file=False,
            progress=False,
            environ={},
        )
    return evaluations, plateau


def test_an_epoch_is_evaluated_once_across_a_restart(tmp_path: Path) -> None:
    """Resumed from the checkpoint written after epoch 0's evaluation, ``fit`` evaluated
    epoch 0 again and stepped ``ReduceLROnPlateau`` a second time for it (the LR halved once
    more than in the run that was not interrupted)."""
    straight, plateau = _fit_with_plateau(tmp_path / "straight")
    assert straight == [(0, 2), (1, 4), (2, 6)]
    first, _ = _fit_with_plateau(tmp_path / "restarted", crash_at_call=3)  # epoch 1's first
    assert first == [(0, 2)]
    rest, resumed = _fit_with_plateau(tmp_path / "restarted")
    assert rest == [(1, 4), (2, 6)]
    assert resumed.state_dict() == plateau.state_dict()


def test_a_run_resumed_at_max_steps_trains_no_more(tmp_path: Path) -> None:
    """Preempted on its last step (the checkpoint is of step ``max_steps``), the resumed
    ``fit`` trained one step past ``max_steps`` before it looked."""
    calls = [0]

    def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        calls[0] += 1
        return mse_loss(model, batch)

    def run(max_steps: int) -> dt.TrainContext:
        model = tiny_model()
        return dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            tiny_regression(n=64),
            loss,
            global_batch_size=4,
            max_steps=max_steps,
            checkpoint_dir=str(tmp_path),
            checkpoint_every_steps=1,
            metrics_file=False,
            progress=False,
            environ={},
        )

    assert run(5).step_num == 5 and calls[0] == 5
    for max_steps in (5, 3):  # resumed at step 5: at or past the ceiling
        ctx = run(max_steps)
        assert ctx.step_num == 5 and calls[0] == 5
    assert run(7).step_num == 7 and calls[0] == 7


@pytest.mark.parametrize("epochs", [1, 2])
def test_fit_without_restarts_still_evaluates_every_epoch(epochs: int) -> None:
    seen: list[int] = []
    model = tiny_model()
    dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        tiny_regression(n=16),
        mse_loss,
        epochs=epochs,
        global_batch_size=8,
        evaluate=lambda ctx: float(seen.append(ctx.epoch) or 0.0),
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert seen == list(range(epochs))


@pytest.mark.parametrize(("epochs", "max_steps"), [(100, 10), (1, 40)])
def test_progress_reaches_one_on_the_last_step_whichever_bound_ends_the_run(
    epochs: int, max_steps: int
) -> None:
    """64 samples at batch 4 are 16 steps an epoch: 100 epochs bounded at step 10 end on
    the step bound, one epoch within 40 steps on the epoch; either way the last record says
    1, and the records before it say less, rising."""
    model = tiny_model()
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        tiny_regression(n=64),
        mse_loss,
        epochs=epochs,
        global_batch_size=4,
        max_steps=max_steps,
        metrics_file=False,
        progress=False,
        environ={},
    )
    progress = [record["progress"] for record in ctx.history]
    assert len(progress) == min(max_steps, 16 * epochs)
    assert progress[-1] == 1.0
    assert all(a < b for a, b in itertools.pairwise(progress))
    assert progress[0] == pytest.approx(max(1 / max_steps, 1 / (16 * epochs)))


def test_stop_at_step_refuses_a_bound_below_one() -> None:
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        dt.init(model, optimizer, global_batch_size=4, metrics_file=False, environ={}) as ctx,
        pytest.raises(ConfigError, match="max_steps must be 1 or more"),
    ):
        ctx.stop_at_step(0)
