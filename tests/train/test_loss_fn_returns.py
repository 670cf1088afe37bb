"""A ``loss_fn`` that returns no loss to train on (a tuple of the loss and other values, an
unreduced per-sample loss, a detached loss, None) is a ``ConfigError`` naming ``loss_fn`` and
what it returned, with one micro-batch and with accumulation. Before, torch's own error
named neither (``'tuple' object has no attribute 'backward'``, "grad can be implicitly
created only for scalar outputs")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError

Batch = tuple[torch.Tensor, torch.Tensor]


def _per_sample(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y, reduction="none")


RETURNS: dict[str, tuple[Callable[[torch.nn.Module, Batch], Any], str]] = {
    "tuple": (lambda m, b: (mse_loss(m, b), {"acc": 1.0}), r"returned a tuple \(return the loss"),
    "per-sample": (_per_sample, r"returned a tensor of shape \(\d, 1\)"),
    "detached": (lambda m, b: mse_loss(m, b).detach(), "does not require grad"),
    "none": (lambda m, b: None, "returned None"),
}


@pytest.mark.parametrize("micro", [None, 2])
@pytest.mark.parametrize("kind", sorted(RETURNS))
def test_a_loss_fn_returning_no_loss_is_refused_naming_it(kind: str, micro: int | None) -> None:
    loss_fn, said = RETURNS[kind]
    model = tiny_model()
    data = tiny_regression(8)
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        micro_batch_size=micro,
        dataset_size=8,
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        batch = next(iter(ctx.batches(data)))
        with pytest.raises(ConfigError, match=rf"loss_fn\(model, micro_batch\).*{said}"):
            ctx.step(batch, loss_fn)


def test_an_error_raised_inside_loss_fn_is_its_own() -> None:
    """A ``loss_fn`` that fails itself (on its second micro-batch, after a good loss) raises
    its own error, not the ``ConfigError``."""
    calls = []

    def failing(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("label")
        return mse_loss(model, batch)

    model = tiny_model()
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        micro_batch_size=2,
        dataset_size=8,
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        batch = next(iter(ctx.batches(tiny_regression(8))))
        with pytest.raises(KeyError, match="label"):
            ctx.step(batch, failing)
