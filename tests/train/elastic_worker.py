"""Worker of the elastic test, launched by torchrun (one per node agent).

Trains a tiny model with danlu.train, checkpointing every step, and records in the checkpoint's
``extra`` every sample index that went into a committed step, per epoch, and the world sizes it
ran at. Gates (``OUT/phase``) keep it from finishing before the test resized the job.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from train_helpers import exit_now  # the same directory: the script's sys.path[0]

import danlu.train as dt

N, GLOBAL_BATCH, EPOCHS = 48, 8, 3
KILL_AT, REJOIN_AT = 4, 10


def phase(out: Path) -> int:
    try:
        return int((out / "phase").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def main() -> None:
    out = Path(sys.argv[1])
    (out / "workers").mkdir(parents=True, exist_ok=True)
    (out / "workers" / f"{os.getppid()}.{os.getpid()}").touch()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True), torch.arange(N))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=GLOBAL_BATCH,
        dataset_size=N,
        checkpoint_dir=str(out / "ckpt"),
        checkpoint_every_steps=1,
        metrics_file=False,
        collective_timeout_s=90,
        progress=False,
    )
    world = ctx.distributed.world_size
    seen: dict[str, list[int]] = ctx.extra.setdefault("seen", {})
    worlds: list[int] = ctx.extra.setdefault("worlds", [])
    if not worlds or worlds[-1] != world:
        worlds.append(world)

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(m(b[0]), b[1])

    with ctx:
        for epoch in ctx.epochs(EPOCHS):
            for xb, yb, idx in ctx.batches(data):
                lb = ctx.current_batch
                assert lb is not None
                mine = idx[: lb.real].tolist()
                for part in ctx.distributed.all_gather_object(mine):
                    seen.setdefault(str(epoch), []).extend(part)
                ctx.step((xb, yb), loss_fn)
                if ctx.distributed.is_chief:
                    (out / "progress.tmp").write_text(
                        json.dumps({"world": world, "step": ctx.step_num, "pid": os.getpid()})
                    )
                    os.replace(out / "progress.tmp", out / "progress")
                time.sleep(0.02)
                gate = (
                    KILL_AT
                    if world == 2 and phase(out) == 0
                    else (REJOIN_AT if world == 1 else None)
                )
                while (
                    gate is not None
                    and ctx.step_num >= gate
                    and phase(out) < 1 + (world == 1)
                    and not ctx.preemption.requested
                ):
                    time.sleep(0.05)
        if ctx.distributed.is_chief:
            (out / "result.json").write_text(
                json.dumps({"seen": seen, "worlds": worlds, "steps": ctx.step_num})
            )


if __name__ == "__main__":
    main()
    exit_now(0)  # left the group in ctx.close(); skip the finalization (see its docstring)
