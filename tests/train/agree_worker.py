"""One rank of a 2-process gloo job whose ranks must take the same decisions (test helper).

``python agree_worker.py RANK WORLD PORT OUT``: three short runs, each deciding something
from what one rank sees, and writes for each what this rank did as JSON to ``OUT.RANK``:

- ``anomaly``: one mislabelled sample (no features, a huge target) lands on one rank; with
  ``anomaly="skip"`` that rank's loss spikes;
- ``gns``: the gradient-noise adaptive batch, each rank measuring its own first micro-batch;
- ``seconds``: ``checkpoint_every_seconds`` with rank 1 slower than rank 0, so that their
  clocks find a save due at different steps.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
from sync_worker import join, leave, loss  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt


def _environ(rank: int, world: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}


def _weights(ctx: dt.TrainContext) -> list[float]:
    module = getattr(ctx.model, "module", ctx.model)
    return [float(v) for p in module.parameters() for v in p.detach().flatten()]


def anomaly(rank: int, world: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 1, generator=g)
    y = 2 * x
    bad = torch.randperm(200, generator=torch.Generator().manual_seed(0))[150]
    x[bad], y[bad] = 0.0, 1000.0  # a big loss on one rank, and no gradient from it
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    steps = []
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=200,
        shuffle=True,
        seed=0,
        anomaly="skip",
        grad_norm_every=1,
        consistency_check=False,
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        for batch in ctx.batches(torch.utils.data.TensorDataset(x, y)):
            steps.append([ctx.step(batch, loss).anomaly, ctx.step_num])
        return {"steps": steps, "weights": _weights(ctx)}


def gns(rank: int, world: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 8, generator=g)
    y = x.sum(1, keepdim=True) + 3.0 * torch.randn(2000, 1, generator=g)  # noisy labels
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    trace = []
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=8,
        micro_batch_size=4,
        adaptive_batch=dt.AdaptiveBatch("gns", 8, max_batch=256),
        lr_scaling="adascale",
        gns_every=1,
        dataset_size=2000,
        consistency_check=False,
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        for batch in ctx.batches(torch.utils.data.TensorDataset(x, y)):
            ctx.step(batch, loss)
            trace.append([ctx.batch.global_batch, ctx.lr.lr])
            if ctx.step_num >= 30:
                break
        return {"trace": trace, "weights": _weights(ctx)}


def seconds(rank: int, world: int, directory: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    saved = []
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=64,
        checkpoint_dir=directory,
        checkpoint_every_seconds=0.2,
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        manager = ctx.checkpoints._manager
        for batch in ctx.batches(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))):
            ctx.step(batch, loss)
            if manager._last_step == ctx.step_num:
                saved.append(ctx.step_num)
            time.sleep(0.03 + 0.05 * rank)
        return {"saved": saved, "steps": ctx.step_num}


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    result = {
        "anomaly": anomaly(rank, world),
        "gns": gns(rank, world),
        "seconds": seconds(rank, world, f"{out}.ckpt"),
    }
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o))
