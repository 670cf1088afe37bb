"""One rank of a 2-process gloo job whose checkpoints share a directory with an older run's
(test helper for ``test_checkpoint_runs_ddp_review89b.py``).

``python runs_worker.py RANK WORLD PORT OUT``: checkpoints go to ``OUT.ckpt``; each rank
writes what it saw as JSON to ``OUT.RANK``:

1. ``old``: a first run (run A) checkpoints steps 3 and 6.
2. ``fresh``: a second run started with ``resume=False`` (run B) checkpoints step 2, whose
   checkpoint rank 0 then damages; an anomaly at step 3 must not roll back into run A.
3. ``within``: the same run goes on, checkpoints steps 4 and 6, damages step 6; an anomaly
   at step 7 rolls every rank back to step 4 (run B's), with step 4's parameters.
4. ``restart``: a restart over the directory falls back on every rank past the damaged
   step 6 to run B's step 4 (not run A's step 6).
5. ``flaky``: a restart whose rank 1 fails once to read run B's step 4 (a passing error)
   resumes from it on every rank all the same: every rank takes the checkpoint rank 0 chose
   (before, rank 1 alone started afresh at step 0, rank 0 at step 4).
6. ``lost``: every checkpoint of run B damaged, a restart starts afresh on every rank
   (step 0), never from run A's.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from sync_worker import join, leave, loss  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt
from danlu.train.checkpoint.storage import LocalStorage

LOCAL = 4


def _context(rank: int, world: int, directory: str, **kwargs: Any) -> dt.TrainContext:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=LOCAL * world,
        checkpoint_dir=directory,
        metrics_file=False,
        consistency_check=False,
        progress=False,
        environ={"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"},
        **kwargs,
    )


def _batch(g: torch.Generator, nan: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(LOCAL, 4, generator=g)
    if nan:
        x[0, 0] = float("nan")
    return x, x.sum(1, keepdim=True)


def _damage(directory: str, step: int) -> None:
    """Rank 0 flips a byte of the tensors of the checkpoint(s) of ``step``; every rank
    waits for it."""
    if dist.get_rank() == 0:
        for ckpt in Path(directory).glob(f"ckpt-{step:012d}-*"):
            data = bytearray((ckpt / "tensors.pt").read_bytes())
            data[-100] ^= 0xFF
            (ckpt / "tensors.pt").write_bytes(bytes(data))
    dist.barrier()


@contextlib.contextmanager
def _flaky_once(on: bool, directory: str, step: int) -> Iterator[None]:
    """When ``on``: the first read of the tensors of the checkpoint of ``step`` fails (a
    network filesystem's or an object store's passing error, on this rank alone)."""
    read = LocalStorage.read
    failed: list[str] = []

    def flaky(self: LocalStorage, path: str) -> bytes:
        if on and not failed and f"ckpt-{step:012d}-" in path and path.endswith("tensors.pt"):
            failed.append(path)
            raise OSError(5, "Input/output error", path)
        return read(self, path)

    LocalStorage.read = flaky  # type: ignore[method-assign]
    try:
        yield
    finally:
        LocalStorage.read = read  # type: ignore[method-assign]


def _params(ctx: dt.TrainContext) -> list[list[float]]:
    return [p.detach().flatten().tolist() for p in ctx.model.parameters()]


def main(rank: int, world: int, port: int, out: str) -> int:
    join(rank, world, port)
    directory = f"{out}.ckpt"
    g = torch.Generator().manual_seed(rank)
    seen: dict[str, Any] = {}
    with _context(rank, world, directory, checkpoint_every_steps=3) as old:
        while old.step_num < 6:
            old.step(_batch(g), loss)
        seen["old"] = {"run": old.checkpoints.run_id}
    with _context(
        rank, world, directory, checkpoint_every_steps=2, anomaly="rollback", resume=False
    ) as ctx:
        while ctx.step_num < 2:
            ctx.step(_batch(g), loss)
        _damage(directory, 2)
        ctx.step(_batch(g, nan=True), loss)  # step 3: nothing of this run to go back to
        seen["fresh"] = {
            "step": ctx.step_num,
            "rollbacks": ctx.rollbacks,
            "run": ctx.checkpoints.run_id,
        }
        while ctx.step_num < 6:  # checkpoints of steps 4 and 6
            ctx.step(_batch(g), loss)
            if ctx.step_num == 4:
                at_four = _params(ctx)
        _damage(directory, 6)
        ctx.step(_batch(g, nan=True), loss)  # step 7: back to step 4
        seen["within"] = {
            "step": ctx.step_num,
            "rollbacks": ctx.rollbacks,
            "params_of_step_4": _params(ctx) == at_four,
        }
    with _context(rank, world, directory) as again:
        seen["restart"] = {"step": again.step_num, "run": again.checkpoints.run_id}
    with _flaky_once(rank == 1, directory, 4), _context(rank, world, directory) as flaky:
        seen["flaky"] = {"step": flaky.step_num, "run": flaky.checkpoints.run_id}
    _damage(directory, 4)
    with _context(rank, world, directory) as lost:
        seen["lost"] = {"step": lost.step_num}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(seen, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o))
