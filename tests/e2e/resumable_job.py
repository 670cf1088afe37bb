"""A danlu.train job for the end-to-end tests: a tiny CPU model stepped on the batches of
``ctx.batches`` (their position is in the checkpoint), a checkpoint every 5 steps, each step's
loss printed as ``step N loss X`` (``repr`` of the float: bit-exact), ``start N`` when a run
begins. It steps until the file named by ``argv[1]`` exists, or until step ``argv[2]`` when
given (the uninterrupted reference run), or 120 s passed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import danlu.train as dt


def loss_fn(model: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    time.sleep(0.05)  # the step a preemption can land in
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def main() -> None:
    stop = Path(sys.argv[1])
    last = int(sys.argv[2]) if len(sys.argv) > 2 else None
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    deadline = time.monotonic() + 120
    with dt.init(
        model,
        optimizer,
        global_batch_size=16,
        dataset_size=len(data),
        checkpoint_every_steps=5,
        metrics_file=False,
        progress=False,
    ) as ctx:
        print(f"start {ctx.step_num}", flush=True)
        for _ in ctx.epochs(1000):
            for batch in ctx.batches(data):
                done = last is not None and ctx.step_num >= last
                if done or stop.exists() or time.monotonic() > deadline:
                    return
                result = ctx.step(batch, loss_fn)
                print(f"step {ctx.step_num} loss {result.loss!r}", flush=True)


if __name__ == "__main__":
    main()
