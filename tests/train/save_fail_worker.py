"""One rank of a 2-process gloo job whose writer (rank 0) cannot write a checkpoint (test
helper for ``test_save_failure_review90.py``).

``python save_fail_worker.py RANK WORLD PORT DIR OUT``: joins a gloo group whose collectives
time out after 30 s, trains one step with ``danlu.train``, makes rank 0's checkpoint write
fail with ``ENOSPC``, calls ``ctx.save()`` on every rank and writes what it raised as JSON
(``{"error", "errno", "message"}``) to ``OUT.RANK``.
"""

from __future__ import annotations

import datetime
import errno
import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from train_helpers import exit_now

import danlu.train as dt

LOCAL = 4


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def main(rank: int, world: int, port: int, directory: str, out: str) -> int:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=30),
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=LOCAL * world,
        checkpoint_dir=directory,
        metrics_file=False,
        consistency_check=False,
        progress=False,
        environ={"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"},
    )
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(LOCAL, 4, generator=g)
    ctx.step((x, x.sum(1, keepdim=True)), _loss)
    if rank == 0:

        def full(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        ctx.checkpoints._manager.save = full
    seen: dict[str, Any] = {"error": None}
    try:
        ctx.save()
    except Exception as exc:
        code = getattr(exc, "errno", None)
        seen = {"error": type(exc).__name__, "errno": code, "message": str(exc)}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(seen, f)
    ctx.close()
    if seen.get("errno") == errno.ENOSPC:  # both ranks in step: leave together
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]))
