"""A sweep trial: a small regression trained with danlu.train, with the learning rate, width,
optimizer and batch size the sweep chose (``DANLU_HPARAMS``; the defaults below off a sweep
or for a parameter the sweep does not search).

    PYTHONPATH=src python examples/sweeps/regression.py [--steps 40] [--step-seconds 0.4]

Each step's record carries ``loss``, the metric ``examples/sweeps/lr.yaml`` and
``examples/sweeps/batch.yaml`` minimise.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

import danlu.train as dt


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


Batch = tuple[torch.Tensor, torch.Tensor]


def slowed(step_seconds: float) -> Callable[[nn.Module, Batch], torch.Tensor]:
    """:func:`loss_fn`, sleeping ``step_seconds`` first."""

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        time.sleep(step_seconds)
        return loss_fn(model, batch)

    return loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="sleep this long in each step, standing in for a real model's work",
    )
    args = ap.parse_args()
    hparams = dt.JobEnv.from_environ().hparams
    lr = float(hparams.get("lr", 0.05))
    width = int(hparams.get("width", 16))
    batch_size = int(hparams.get("batch_size", 64))
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = torch.tanh(x @ torch.randn(8, 1))
    model = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 1))
    if hparams.get("optimizer", "sgd") == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    ctx = dt.fit(
        model,
        opt,
        torch.utils.data.TensorDataset(x, y),
        slowed(args.step_seconds) if args.step_seconds > 0 else loss_fn,
        epochs=100,
        global_batch_size=batch_size,
        max_steps=args.steps,
        metrics_file=False,
    )
    last = ctx.history[-1]
    print(f"lr {lr:.4g} width {width} batch {last['global_batch']}: loss {last['loss']:.4f}")


if __name__ == "__main__":
    main()
