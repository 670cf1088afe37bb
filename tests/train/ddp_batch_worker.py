"""One rank of a 3-process gloo job checking how danlu.train shares batches and buffers
(test helper).

``python ddp_batch_worker.py RANK WORLD PORT OUT``; writes what this rank saw as JSON to
``OUT.RANK``, one key per run:

- ``bn``: a model with batch normalisation, checkpointing every 2 steps with the consistency
  check on, trained 4 steps without a stop and 2 + 2 steps with a resume in between, with
  DDP's ``broadcast_buffers`` on and off; each run's final state;
- ``uneven``: a global batch of 8 (it does not divide by 3), one epoch of 24 samples; each
  step's real and global sample counts and the final parameters;
- ``rng``: a model with dropout, checkpointing every 2 steps, trained 4 steps without a stop
  and 2 + 2 steps with a resume in between, with a seed per rank and with one seed for all
  (the ranks' shares of 8 are 3, 3 and 2: they draw different amounts); each run's final
  state and the next draws of torch's generator.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch
from sync_worker import join, leave  # the same directory: the script's sys.path[0]
from train_helpers import exit_now, mse_loss

import danlu.train as dt


def _environ(rank: int, world: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}


def _state(model: torch.nn.Module) -> dict[str, list[float]]:
    return {k: v.double().flatten().tolist() for k, v in model.state_dict().items()}


def _bn_run(
    rank: int, world: int, directory: str, steps: int, broadcast: bool
) -> dict[str, list[float]]:
    """Train a batch-norm model to ``steps`` (resuming from ``directory``); its state."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        global_batch_size=8,
        dataset_size=len(data),
        checkpoint_dir=directory,
        checkpoint_every_steps=2,
        ddp_kwargs={"broadcast_buffers": broadcast},
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        batches = ctx.batches(data)
        while ctx.step_num < steps:
            ctx.step(next(batches), mse_loss)
        batches.close()
    return _state(model)


def bn(rank: int, world: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for broadcast in (True, False):
        dirs = [tempfile.mkdtemp() if rank == 0 else "" for _ in range(2)]
        torch.distributed.broadcast_object_list(dirs, src=0)  # one directory for all ranks
        straight = _bn_run(rank, world, dirs[0], 4, broadcast)
        _bn_run(rank, world, dirs[1], 2, broadcast)
        resumed = _bn_run(rank, world, dirs[1], 4, broadcast)
        out[str(broadcast)] = {"straight": straight, "resumed": resumed}
    return out


def uneven(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    shares = []
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=8,
        dataset_size=len(data),
        shuffle=False,
        anomaly=None,
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                lb = ctx.current_batch
                assert lb is not None
                shares.append([lb.real, lb.global_real, len(batch[0])])
                ctx.step(batch, mse_loss)
        return {"shares": shares, "steps": ctx.step_num, "state": _state(model)}


def _rng_run(
    rank: int, world: int, directory: str, steps: int, per_rank_seed: bool
) -> dict[str, Any]:
    """Train a dropout model to ``steps`` (resuming from ``directory``); its state and the
    next 4 draws of torch's global generator."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    torch.manual_seed(1000 + (rank if per_rank_seed else 0))  # the dropout masks' stream
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        global_batch_size=8,
        dataset_size=len(data),
        checkpoint_dir=directory,
        checkpoint_every_steps=2,
        metrics_file=False,
        progress=False,
        environ=_environ(rank, world),
    ) as ctx:
        batches = ctx.batches(data)
        while ctx.step_num < steps:
            ctx.step(next(batches), mse_loss)
        batches.close()
    return {"state": _state(model), "draws": torch.rand(4).tolist()}


def rng(rank: int, world: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant, per_rank_seed in (("per_rank_seed", True), ("same_seed", False)):
        dirs = [tempfile.mkdtemp() if rank == 0 else "" for _ in range(2)]
        torch.distributed.broadcast_object_list(dirs, src=0)  # one directory for all ranks
        straight = _rng_run(rank, world, dirs[0], 4, per_rank_seed)
        _rng_run(rank, world, dirs[1], 2, per_rank_seed)
        resumed = _rng_run(rank, world, dirs[1], 4, per_rank_seed)
        out[variant] = {"straight": straight, "resumed": resumed}
    return out


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    result: dict[str, Any] = {}
    for name, run in (("bn", bn), ("uneven", uneven), ("rng", rng)):
        try:
            result[name] = run(rank, world)
        except Exception as exc:  # raised on every rank alike (after a collective): go on
            result[name] = {"error": repr(exc)}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    return leave()


if __name__ == "__main__":
    code = main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    exit_now(code)
