"""``fit(evaluate=...)`` returning no metric (None from a function without its ``return``, a
dict of metrics, a word, a tensor of several values) is a ``ConfigError`` naming
``evaluate`` and what it returned; ``float()``'s own error (``float() argument must be a
string or a real number, not 'NoneType'``) named neither."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def _fit(evaluate: Callable[[dt.TrainContext], Any]) -> dt.TrainContext:
    model = tiny_model()
    return dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        tiny_regression(n=16),
        mse_loss,
        epochs=1,
        global_batch_size=8,
        evaluate=evaluate,
        metrics_file=False,
        progress=False,
        environ={},
    )


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (None, "returned None"),
        ({"acc": 0.9}, "returned a dict"),
        ("accuracy", "returned a str"),
        (torch.tensor([0.1, 0.2]), r"returned a tensor of shape \(2,\)"),
    ],
    ids=["none", "dict", "str", "two-values"],
)
def test_an_evaluate_returning_no_metric_is_refused_naming_it(returned: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=rf"fit\(evaluate=\.\.\.\).*{said}"):
        _fit(lambda ctx: returned)


@pytest.mark.parametrize(
    ("returned", "metric"),
    [(0.25, 0.25), (3, 3.0), (torch.tensor(0.5), 0.5), (torch.tensor([0.75]), 0.75)],
    ids=["float", "int", "scalar-tensor", "one-element-tensor"],
)
def test_an_evaluate_returning_a_number_or_one_element_tensor_is_the_metric(
    returned: Any, metric: float
) -> None:
    assert _fit(lambda ctx: returned).extra["eval"] == metric


def test_an_evaluate_that_fails_keeps_the_epochs_training_for_the_restart(tmp_path: Path) -> None:
    """The run closed without a checkpoint and its restart trained the epoch again (without
    periodic checkpoints, from scratch); the epoch's end is checkpointed before the error is
    raised, and the restart evaluates that epoch without training it again."""
    trained: list[int] = []
    evaluated: list[tuple[int, int]] = []

    def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        trained.append(1)
        return mse_loss(model, batch)

    def failing(ctx: dt.TrainContext) -> float:
        raise RuntimeError("a bug in the evaluation")

    def working(ctx: dt.TrainContext) -> float:
        evaluated.append((ctx.epoch, ctx.step_num))
        return 1.0

    def run(evaluate: Callable[[dt.TrainContext], float]) -> dt.TrainContext:
        model = tiny_model()
        return dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.05),
            tiny_regression(n=16),
            loss,
            epochs=2,
            global_batch_size=8,
            evaluate=evaluate,
            checkpoint_dir=str(tmp_path),
            metrics_file=False,
            progress=False,
            environ={},
        )

    with pytest.raises(RuntimeError, match="a bug in the evaluation"):
        run(failing)
    assert len(trained) == 2  # epoch 0: two steps of 8
    assert run(working).step_num == 4
    assert len(trained) == 4  # the restart trained epoch 1 only
    assert evaluated == [(0, 2), (1, 4)]
