"""One rank of a 2-process gloo job preempted through its other rank (test helper).

``python ckpt_close_worker.py RANK WORLD PORT OUT``: trains until the preemption stops it;
rank 1 alone is signalled, after step 3, so the ranks agree to stop at step 4, where the chief
checkpoints. The chief's metric records go to ``OUT.jsonl``, the checkpoints to ``OUT.ckpt``;
each rank writes how it ended (``{"code": exit code, "step": step}``) as JSON to ``OUT.RANK``.
"""

from __future__ import annotations

import json
import sys

import torch
from sync_worker import join, leave, loss  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt

LOCAL = 4


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    g = torch.Generator().manual_seed(rank)
    code: object = None
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=LOCAL * world,
        checkpoint_dir=f"{out}.ckpt",
        metrics_file=f"{out}.jsonl",
        report_interval_s=3600,
        consistency_check=False,
        progress=False,
        environ={"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"},
    ) as ctx:
        try:
            while ctx.step_num < 100:
                x = torch.randn(LOCAL, 4, generator=g)
                ctx.step((x, x.sum(1, keepdim=True)), loss)
                if rank == 1 and ctx.step_num == 3:
                    ctx.preemption.request()  # as SIGTERM on this rank alone
        except SystemExit as stopped:
            code = stopped.code
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"code": code, "step": ctx.step_num}, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o))
