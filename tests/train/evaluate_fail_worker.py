"""One rank of a 2-process gloo job whose ``fit(evaluate=...)`` fails on one rank only (test
helper for ``test_fit_evaluate_ddp.py``).

``python evaluate_fail_worker.py RANK WORLD PORT DIR OUT``: joins a gloo group whose
collectives time out after 60 s and runs ``danlu.train.fit`` three times on the checkpoint
directory ``DIR`` (16 samples, two steps an epoch), writing what each run did as JSON to
``OUT.RANK`` (a list of ``{"error", "message", "trained", "evaluated", "step", "checkpoints"}``,
``checkpoints`` being ``[step, metric names]`` of the checkpoints listed after the run):

1. two epochs; rank 1's ``evaluate`` raises at epoch 1;
2. three epochs (resumed from the first); rank 0's ``evaluate`` returns None at epoch 2;
3. three epochs (resumed from the second), every ``evaluate`` returning a number.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from sync_worker import join, leave  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt
from danlu.train.checkpoint.manager import CheckpointManager

Evaluate = Callable[[dt.TrainContext], Any]


def _run(rank: int, world: int, directory: str, epochs: int, evaluate: Evaluate) -> dict[str, Any]:
    """One ``fit`` on this rank: what it raised, its steps trained, the epochs it evaluated."""
    trained: list[int] = []
    evaluated: list[int] = []

    def loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        trained.append(1)
        return torch.nn.functional.mse_loss(model(batch[0]), batch[1])

    def counted(ctx: dt.TrainContext) -> Any:
        evaluated.append(ctx.epoch)
        return evaluate(ctx)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=g)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    seen: dict[str, Any] = {"error": None, "message": None, "step": None}
    try:
        ctx = dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
            loss,
            epochs=epochs,
            global_batch_size=8,
            evaluate=counted,
            checkpoint_dir=directory,
            consistency_check=False,
            metrics_file=False,
            progress=False,
            environ={"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"},
        )
        seen["step"] = ctx.step_num
    except Exception as exc:
        seen.update(error=type(exc).__name__, message=str(exc))
    listed = CheckpointManager(directory).list_checkpoints()
    seen.update(
        trained=len(trained),
        evaluated=evaluated,
        checkpoints=[[info.step, sorted(info.metrics)] for info in listed],
    )
    return seen


def main(rank: int, world: int, port: int, directory: str, out: str) -> int:
    join(rank, world, port)

    def raising_on_rank_1(ctx: dt.TrainContext) -> float:
        if rank == 1 and ctx.epoch == 1:
            raise RuntimeError("the evaluation broke")
        return 1.0

    def none_on_rank_0(ctx: dt.TrainContext) -> float | None:
        return None if rank == 0 and ctx.epoch == 2 else 1.0

    runs = [
        _run(rank, world, directory, 2, raising_on_rank_1),
        _run(rank, world, directory, 3, none_on_rank_0),
        _run(rank, world, directory, 3, lambda ctx: 1.0),
    ]
    with open(f"{out}.{rank}", "w") as f:
        json.dump(runs, f)
    return leave()


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]))
