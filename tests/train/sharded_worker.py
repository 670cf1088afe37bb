"""One rank of a 2-process gloo job that checkpoints sharded state (test helper).

``python sharded_worker.py RANK WORLD PORT DIR``: every rank saves a replicated model plus
a tensor sharded across ranks (a DTensor) through CheckpointManager (which routes to DCP
when the world size is > 1), then loads the newest checkpoint back and checks it. Rank 0
also writes the expected full tensors to DIR/expected.pt for the test to compare.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from train_helpers import exit_now

from danlu.train.checkpoint import CheckpointManager


def main(rank: int, world: int, port: int, directory: str) -> int:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # same replicated values on every rank
    model = torch.nn.Linear(8, 4)
    full = torch.arange(world * 6, dtype=torch.float32).reshape(world * 3, 2)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    mgr = CheckpointManager(os.path.join(directory, "ckpt"), keep_last=2, sharded=True)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        state = {
            "model": model.state_dict(),
            "emb": sharded * step,
            "step": step,
            "meta": {"world": world},
        }
        mgr.save(step, state, {"loss": 1.0 / step})
    step, loaded = mgr.load_latest()  # type: ignore[misc]
    assert step == 3 and loaded["meta"] == {"world": world}
    assert torch.equal(loaded["model"]["weight"], model.weight.detach())
    assert torch.equal(loaded["emb"], full * 3)
    assert len(mgr.list_checkpoints()) == 2
    if rank == 0:
        torch.save(
            {"weight": model.weight.detach(), "emb": full * 3},
            os.path.join(directory, "expected.pt"),
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    r, w, p, d = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), d))
