"""One rank of a gloo job resumed at another world size (test helper for
``test_resize_resume.py``).

``python resize_resume_worker.py RANK WORLD PORT MODE DIR OUT``: joins the group through
``danlu.train.init`` (torchrun's variables, a 20 s collective timeout) and trains a tiny model
with Adam, a decaying LR schedule and warmup over :data:`EPOCHS` epochs of :data:`N` samples
at a global batch of :data:`GLOBAL`, checkpointing every 2 steps into ``DIR`` (resuming from
it) with the chief's metric records in ``DIR/metrics.jsonl``. ``MODE`` is

- ``run``: train to the end;
- ``stop:K``: train to step K, ``ctx.save()`` and leave (a resize's checkpoint);
- ``crash:K[:R]``: rank R (the last one unless given) dies (``os._exit(3)``) inside its
  loss at step K.

Writes, as JSON to ``OUT.RANK``: the step it started at, every committed step's
``[epoch, step, indices of all ranks' samples]``, the optimizer state right after ``init``
(what it resumed) and at the end, the final parameters and (chief) the records.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from train_helpers import exit_now, join_as_rank

import danlu.train as dt

N, GLOBAL, EPOCHS = 30, 6, 2  # 5 steps an epoch


def _tensors(value: Any) -> Any:
    """``value`` (an optimizer state) with every tensor a list of floats, for JSON."""
    if isinstance(value, torch.Tensor):
        return value.double().flatten().tolist()
    if isinstance(value, dict):
        return {str(k): _tensors(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_tensors(v) for v in value]
    return value


def main(rank: int, world: int, port: int, mode: str, directory: str, out: str) -> int:
    environ = join_as_rank(rank, world, port)
    kind, *numbers = mode.split(":")
    at = int(numbers[0]) if numbers else 0
    victim = int(numbers[1]) if len(numbers) > 1 else world - 1
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True), torch.arange(N))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9**s)
    ctx = dt.init(
        model,
        opt,
        sched,
        global_batch_size=GLOBAL,
        dataset_size=N,
        warmup_steps=3,
        checkpoint_dir=directory,
        checkpoint_every_steps=2,
        metrics_file=os.path.join(directory, "metrics.jsonl"),
        collective_timeout_s=20,
        progress=False,
        environ=environ,
    )
    result: dict[str, Any] = {
        "start": ctx.step_num,
        "opt_at_start": _tensors(opt.state_dict()),
        "seen": [],
    }

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(m(b[0]), b[1])
        if kind == "crash" and ctx.step_num + 1 == at and rank == victim:
            exit_now(3)  # dies mid-step, after its forward: the others wait in a collective
        return loss

    with ctx:
        for epoch in ctx.epochs(EPOCHS):
            for xb, yb, idx in ctx.batches(data):
                lb = ctx.current_batch
                assert lb is not None
                mine = idx[: lb.real].tolist()
                ctx.step((xb, yb), loss_fn)
                parts = ctx.distributed.all_gather_object(mine)
                result["seen"].append([epoch, ctx.step_num, [i for p in parts for i in p]])
                if kind == "stop" and ctx.step_num == at:
                    break
            if kind == "stop" and ctx.step_num == at:
                ctx.save()
                break
        result["opt_at_end"] = _tensors(opt.state_dict())
        result["params"] = [p.detach().double().flatten().tolist() for p in model.parameters()]
        result["records"] = list(ctx.history)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7]))
