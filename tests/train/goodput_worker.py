"""One rank of a 2-process gloo job that trains with the goodput-adaptive batch (test helper).

``python goodput_worker.py RANK WORLD PORT OUT``: trains ``STEPS`` steps with
``AdaptiveBatch("goodput", ...)``, one micro-batch per step (the first steps probe the sync
time with two), and writes ``{"batches": [global batch after each step], "accumulations":
[micro-batches of each step], "choice": the chief's tuner's pick at the end}`` as JSON to
``OUT.RANK``.
"""

from __future__ import annotations

import json
import sys

import torch
from sync_worker import join, leave, loss  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt

LOCAL, STEPS, EVERY = 16, 60, 10


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    environ = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
    environ["LOCAL_WORLD_SIZE"] = str(world)
    batches, accumulations = [], []
    with dt.init(
        model,
        opt,
        global_batch_size=LOCAL * world,
        adaptive_batch=dt.AdaptiveBatch("goodput", LOCAL * world, max_batch=512, every=EVERY),
        lr_scaling="adascale",
        metrics_file=False,
        progress=False,
        environ=environ,
    ) as ctx:
        g = torch.Generator().manual_seed(rank)
        for _ in range(STEPS):
            local = ctx.batch.local_batch
            x = torch.randn(local, 4, generator=g)
            ctx.step((x, x.sum(1, keepdim=True) + torch.randn(local, 1, generator=g)), loss)
            batches.append(ctx.batch.global_batch)
            accumulations.append(ctx.history[-1]["accumulation"])
        assert ctx.goodput is not None
        choice = ctx.goodput.choose((world,))
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"batches": batches, "accumulations": accumulations, "choice": choice}, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o))
