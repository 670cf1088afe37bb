"""One rank of a 2-process torchrun/gloo job for ``test_resize_loss_review67.py``.

``torchrun --nproc-per-node 2 resize_loss_worker.py OUT``: joins torchrun's group itself (so
every ``danlu.train`` context reuses it), then

- ``mean``: :data:`STEPS` steps at global batch :data:`UNEVEN` (3 + 2 samples a rank) in
  micro-batches of 2, rank 1 running out of memory once in its first step (the ranks differ in
  OOM retries); every step's :class:`~danlu.train.step.StepResult` loss and rank 0's records;
- ``follow`` and ``oom``: :data:`SAVED_STEPS` steps at global batch 12 with no micro-batch
  given, checkpointed into ``OUT.follow`` and ``OUT.oom``; in ``oom`` rank 1 runs out of
  memory once at the micro-batch of 6 (both ranks go on at 3). The test resumes them alone.

Writes ``{"mean": {...}}`` as JSON to ``OUT.RANK``.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from train_helpers import exit_now, mse_loss, tiny_model, tiny_regression

import danlu.train as dt

UNEVEN, STEPS, SAVED_STEPS = 5, 4, 2


def train(
    data: torch.utils.data.Dataset[Any],
    global_batch: int,
    steps: int,
    *,
    micro: int | None = None,
    oom_at: int | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """``steps`` steps of the tiny model; this rank's step losses and (rank 0) records."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with dt.init(
        model,
        opt,
        global_batch_size=global_batch,
        micro_batch_size=micro,
        dataset_size=len(data),  # type: ignore[arg-type]
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=steps if checkpoint_dir else None,
        metrics_file=False,
        progress=False,
        resume=False,
        oom_injector=dt.inject_oom_at(oom_at) if oom_at is not None else None,
    ) as ctx:
        batches = ctx.batches(data)
        losses = [ctx.step(next(batches), mse_loss).loss for _ in range(steps)]
        batches.close()
        return {"losses": losses, "records": list(ctx.history)}


def main(out: str) -> int:
    faulthandler.enable()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    data = tiny_regression(64)
    result = {"mean": train(data, UNEVEN, STEPS, micro=2, oom_at=2 if rank == 1 else None)}
    train(data, 12, SAVED_STEPS, checkpoint_dir=f"{out}.follow")
    train(data, 12, SAVED_STEPS, oom_at=6 if rank == 1 else None, checkpoint_dir=f"{out}.oom")
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.pop("DANLU_BATCH_SIZE", None)
    exit_now(main(sys.argv[1]))
