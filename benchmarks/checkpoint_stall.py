"""Async checkpoint stall vs a synchronous ``torch.save`` of the same state.

An MLP with AdamW trains for ``--steps`` steps; every ``--every`` steps the loop saves a
checkpoint with ``CheckpointManager(async_save=True)``. The *stall* of a checkpoint is the
time the training loop is blocked by it: the snapshot to host memory (and, if the previous
save is still in flight, waiting for it). The baseline is ``torch.save`` of the same state
to a local file, timed in the same run (also with an ``fsync``, as a durable checkpoint
needs). Two ways to hand the state over are measured:

* ``capture_state`` (fresh CPU deep copies) then ``save`` (takes them over, no copy);
* ``capture_state(copy=False)`` (live references) then ``save``: copied into reused
  host buffers (no page faults after the first checkpoint).

The first checkpoint of each run (buffers being allocated) is excluded from the median.
Stalls are medians; the machine's noise shows in the spread, so run it on an idle box.

    PYTHONPATH=src python benchmarks/checkpoint_stall.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from danlu.train.checkpoint import CheckpointManager
from danlu.train.state import capture_state


def build(width: int, depth: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train(
    args: argparse.Namespace,
    checkpoint: Callable[[int, torch.nn.Module, torch.optim.Optimizer], None] | None,
) -> tuple[float, list[float]]:
    model, opt = build(args.width, args.depth)
    x = torch.randn(args.batch, args.width)
    stalls: list[float] = []
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if checkpoint is not None and step % args.every == 0:
            t = time.perf_counter()
            checkpoint(step, model, opt)
            stalls.append(time.perf_counter() - t)
    return time.perf_counter() - t0, stalls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="danlu-stall-")

    model, opt = build(args.width, args.depth)
    model(torch.randn(2, args.width)).sum().backward()
    opt.step()
    state = capture_state(model, opt)
    nbytes = sum(t.numel() * t.element_size() for t in (*state["model"].values(),)) + sum(
        t.numel() * t.element_size()
        for s in state["optimizer"]["state"].values()
        for t in s.values()
    )
    sync, sync_fsync = [], []
    for i in range(5):
        path = os.path.join(tmp, f"sync{i}.pt")
        t = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
        sync.append(time.perf_counter() - t)
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        sync_fsync.append(time.perf_counter() - t)
        os.remove(path)
    base = statistics.median(sync)
    base_durable = statistics.median(sync_fsync)
    print(
        f"state: {nbytes / 1e6:.1f} MB (model + AdamW), {args.steps} steps, "
        f"checkpoint every {args.every}"
    )
    print(
        f"sync torch.save: {base * 1e3:.1f} ms (median of 5); with fsync "
        f"{base_durable * 1e3:.1f} ms"
    )

    rows = []
    for label, owned in (
        ("capture_state + save", True),
        ("capture_state(copy=False) + save", False),
    ):
        mgr = CheckpointManager(os.path.join(tmp, label.split()[0]), async_save=True, keep_last=2)

        def ckpt(
            step: int,
            m: torch.nn.Module,
            o: torch.optim.Optimizer,
            mgr: CheckpointManager = mgr,
            owned: bool = owned,
        ) -> None:
            mgr.save(step, capture_state(m, o, step=step, copy=owned))

        _, stalls = train(args, ckpt)
        mgr.close()
        rows.append((label, statistics.median(stalls[1:]), max(stalls[1:])))
    print(
        f"{'hand-over':<34} {'stall ms':>9} {'max ms':>7} {'stall/sync':>11} "
        f"{'stall/(sync+fsync)':>19}"
    )
    for label, stall, worst in rows:
        print(
            f"{label:<34} {stall * 1e3:9.1f} {worst * 1e3:7.1f} {stall / base:11.3f} "
            f"{stall / base_durable:19.3f}"
        )


if __name__ == "__main__":
    main()
