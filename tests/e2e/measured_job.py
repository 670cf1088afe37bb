"""A danlu.train job for the end-to-end tests, run by the server as a real process: trains a
tiny model on CPU (each step sleeps 20 ms, so its step time is known from below), reporting
every step to the danlu API the launch names, until the file named by ``argv[1]`` exists
(or 120 s passed). With ``argv[2] == "goodput"`` its batch is goodput-adaptive (micro-batches
of 8: it accumulates, so it measures its gradient noise)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import danlu.train as dt

STEP_SLEEP_S = 0.02


def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    time.sleep(STEP_SLEEP_S)
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def main() -> None:
    stop = Path(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    goodput = sys.argv[2:3] == ["goodput"]
    adaptive = dt.AdaptiveBatch("goodput", 16, max_batch=64, every=10) if goodput else None
    deadline = time.monotonic() + 120
    with dt.init(
        model,
        optimizer,
        global_batch_size=16,
        micro_batch_size=8 if goodput else None,
        adaptive_batch=adaptive,
        lr_scaling="adascale" if goodput else "linear",
        report_interval_s=0.2,
        progress=False,
    ) as ctx:
        while not stop.exists() and time.monotonic() < deadline:
            n = ctx.batch.local_batch  # follows the job's own batch choice
            ctx.step((torch.randn(n, 8), torch.randn(n, 1)), loss_fn)


if __name__ == "__main__":
    main()
