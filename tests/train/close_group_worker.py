"""One rank of a gloo job whose process group still has a collective finishing as the
training context is closed and dropped (test helper for ``test_close_group.py``).

``python close_group_worker.py RANK WORLD PORT``: trains two steps through
``danlu.train.init``, then starts an all-reduce of a tensor the script keeps: rank 1
asynchronously, rank 0 two seconds later. Rank 1 closes the context and leaves ``main`` (its
model, the DDP wrapper, goes) while its group's worker thread still waits in that
all-reduce; the worker then frees the tensor, which needs the GIL. A rank that ran a
collective moments before the context went is in the same state (rank 0 here, and any rank
descheduled on a busy machine). Prints ``left main`` to stderr once ``main`` returned.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
from train_helpers import exit_now, join_as_rank, mse_loss, tiny_model, tiny_regression

import danlu.train as dt

KEPT: list[torch.Tensor] = []
"""The all-reduced tensor, still held by Python when the group's worker lets go of it."""


def main(rank: int, world: int, port: int) -> None:
    environ = join_as_rank(rank, world, port)
    model = tiny_model()
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=8,
        metrics_file=False,
        progress=False,
        collective_timeout_s=60,
        environ=environ,
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(tiny_regression(8)):
                ctx.step(batch, mse_loss)
        KEPT.append(torch.ones(3))
        if rank == 1:
            dist.all_reduce(KEPT[-1], async_op=True)  # still running as the context goes
        else:
            time.sleep(2)
            dist.all_reduce(KEPT[-1])


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    print("left main", file=sys.stderr, flush=True)
    exit_now(0)
