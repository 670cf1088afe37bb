"""``danlu.train.init`` and ``fit`` refuse a model, optimizer, scheduler or loss of the wrong
kind by name, before training: not a bare ``AttributeError`` from deep inside, and not a run
that trains wrong without a word (an optimizer stepped twice as the "scheduler", a model its
optimizer does not hold, a schedule set on another optimizer). A ``pathlib.Path`` is a
checkpoint directory as its string is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError

Objects = tuple[Any, Any, Any]


def _swapped() -> Objects:
    model = tiny_model()
    return torch.optim.SGD(model.parameters(), lr=0.1), model, None


def _optimizer_list() -> Objects:
    model = tiny_model()
    return model, [torch.optim.SGD(model.parameters(), lr=0.1)], None


def _optimizer_of_another_model() -> Objects:
    first = tiny_model()
    opt = torch.optim.SGD(first.parameters(), lr=0.1)
    return tiny_model(), opt, None  # the model made again after its optimizer


def _optimizer_as_scheduler() -> Objects:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, opt


def _scheduler_of_another_optimizer() -> Objects:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, torch.optim.lr_scheduler.StepLR(other, step_size=1, gamma=0.5)


def _fit_two_steps(model: Any, opt: Any, scheduler: Any) -> Any:
    """``fit`` of two steps on a small regression, off the cluster."""
    return dt.fit(
        model,
        opt,
        tiny_regression(32),
        mse_loss,
        scheduler=scheduler,
        global_batch_size=8,
        max_steps=2,
        environ={},
        metrics_file=False,
    )


@pytest.mark.parametrize(
    ("objects", "named"),
    [
        (_swapped, "model and the optimizer are swapped"),
        (_optimizer_list, "optimizer must be a torch.optim.Optimizer"),
        (_optimizer_of_another_model, "optimizer holds none of the model's parameters"),
        (_optimizer_as_scheduler, "scheduler must be an LR scheduler"),
        (_scheduler_of_another_optimizer, "scheduler .StepLR. sets the LRs of another"),
    ],
)
def test_training_objects_of_the_wrong_kind_are_refused_by_name(
    objects: Callable[[], Objects], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        _fit_two_steps(*objects())


def test_a_loss_fn_that_is_no_function_is_refused_by_name() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="loss_fn must be a function"):
        dt.fit(model, opt, tiny_regression(32), "mse", environ={}, metrics_file=False)


def test_an_optimizer_over_part_of_the_model_and_its_scheduler_train() -> None:
    """The checks leave alone what is right: an optimizer over the model's head only (the
    rest frozen by leaving it out) and a scheduler built on that optimizer."""
    model = tiny_model()
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ctx = _fit_two_steps(model, opt, sched)
    assert ctx.step_num == 2
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)


def test_a_pathlib_checkpoint_dir_is_written_and_resumed(tmp_path: Path) -> None:
    directory = tmp_path / "runs" / "first"

    def run(steps: int) -> int:
        model = tiny_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ctx = dt.fit(
            model,
            opt,
            tiny_regression(32),
            mse_loss,
            global_batch_size=8,
            max_steps=steps,
            checkpoint_dir=directory,
            checkpoint_every_steps=1,
            environ={},
            metrics_file=False,
        )
        return ctx.step_num

    assert run(2) == 2
    assert any(p.name.startswith("ckpt-000000000002-") for p in directory.iterdir())
    assert run(3) == 3  # resumed at step 2: one step more


def test_a_checkpoint_dir_that_is_no_path_is_refused_by_name() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="checkpoint_dir must be a path"):
        dt.init(model, opt, global_batch_size=8, checkpoint_dir=5, environ={}, metrics_file=False)


class _Stream(torch.utils.data.IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """A stream of samples: no indexing, no ``len()``."""

    def __iter__(self) -> Any:
        return iter(tiny_regression(8))


def test_batches_of_a_stream_with_a_dataset_size_are_refused_by_name() -> None:
    """With ``dataset_size`` given, ``ctx.batches`` of an ``IterableDataset`` failed at its
    first batch with torch's bare ``NotImplementedError``."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        dt.init(
            model, opt, global_batch_size=4, dataset_size=8, environ={}, metrics_file=False
        ) as ctx,
        pytest.raises(ConfigError, match="_Stream cannot be indexed"),
    ):
        next(iter(ctx.batches(_Stream())))


def test_a_scheduler_of_the_optimizer_a_wrapper_hands_on_is_accepted() -> None:
    """A wrapper optimizer (no subclass of torch's) that lists its inner optimizer's groups
    in a list of its own drives the LRs a scheduler of the inner one sets: accepted."""
    model = tiny_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.1)

    class Wrapper:
        def __init__(self, wrapped: torch.optim.Optimizer) -> None:
            self.wrapped = wrapped

        @property
        def param_groups(self) -> list[dict[str, Any]]:
            return list(self.wrapped.param_groups)  # a new list of the same groups

        def step(self) -> None:
            self.wrapped.step()

        def zero_grad(self, set_to_none: bool = True) -> None:
            self.wrapped.zero_grad(set_to_none=set_to_none)

        def state_dict(self) -> dict[str, Any]:
            return self.wrapped.state_dict()

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.wrapped.load_state_dict(state)

    scheduler = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    dt.checks.check_training_objects(model, Wrapper(inner), scheduler)  # no error
