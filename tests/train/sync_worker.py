"""One rank of a 2-process gloo job that trains a few DDP steps with danlu.train at several
micro-batch sizes and writes the chief's metric records (test helper).

``python sync_worker.py RANK WORLD PORT OUT``: joins the group itself (so ``danlu.train``
reuses it for every context and does not tear it down), then for each micro-batch of
``MICROS`` trains ``STEPS`` steps on this rank's ``LOCAL`` samples. Rank 0 writes
``{micro: [records]}`` as JSON to ``OUT``. The model runs on a GPU when one is visible
(both ranks may share it: gloo does not mind).
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from train_helpers import exit_now

import danlu.train as dt

LOCAL, STEPS = 8, 3
MICROS = (4, 3, 8)  # 2 equal micro-batches; 3, 3, 2; one micro-batch


def train(rank: int, world: int, micro: int) -> list[dict[str, Any]]:
    """``STEPS`` steps at ``micro``; this rank's metric records."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    local_rank = rank % max(1, torch.cuda.device_count())
    environ = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank)}
    with dt.init(
        model,
        opt,
        global_batch_size=LOCAL * world,
        micro_batch_size=micro,
        metrics_file=False,
        progress=False,
        environ=environ,
    ) as ctx:
        g = torch.Generator().manual_seed(rank)
        for _ in range(STEPS):
            x = torch.randn(LOCAL, 4, generator=g).to(ctx.distributed.device)
            ctx.step((x, x.sum(1, keepdim=True)), loss)
        return list(ctx.history)


def loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def join(rank: int, world: int, port: int) -> None:
    """Join the 2-process gloo group on localhost (danlu.train then reuses it)."""
    faulthandler.enable()  # a native abort prints where Python was
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),  # a dead peer fails the job, not hangs it
    )


def leave() -> int:
    """Wait for the peer, leave the group; the exit code."""
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    records = {micro: train(rank, world, micro) for micro in MICROS}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(records, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o))
