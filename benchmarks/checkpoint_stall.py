"""Async checkpoint stall vs a synchronous ``torch.save`` of the same state.

An MLP with AdamW trains for ``--steps`` steps; every ``--every`` steps the loop saves a
checkpoint with ``CheckpointManager(async_save=True)``. The *stall* of a checkpoint is all
the time the training loop is blocked by it: the ``save()`` call (the snapshot to host
memory when it is taken at once, and waiting for a previous save still in flight) plus the
time the next ``opt.step()`` waits for a deferred snapshot to finish (measured by the
manager's step pre-hook: ``snapshot_wait_s``). The baseline is ``torch.save`` of the same
state to a local file, timed in the same run (also with an ``fsync``, as a durable
checkpoint needs). Two ways to hand the state over are measured:

* ``capture_state`` (fresh CPU deep copies, made by the training thread) then ``save``;
* ``capture_state(copy=False)`` (live references) then ``save``: the copy into reused host
  buffers runs in the checkpoint thread during the next forward/backward, and the next
  ``opt.step()`` waits for it (what ``danlu.train``'s context does).

The first checkpoint of each run (buffers being allocated) is excluded from the median.
Stalls are medians; the machine's noise shows in the spread, so run it on an idle box.
For the record the end-to-end cost is printed too: (run time with checkpoints - run time
without) / checkpoints, from runs alternated with checkpoint-free ones. It also counts the
background thread's serialising, hashing and writing competing for the CPU with training,
which is not a stall of the training loop.

    PYTHONPATH=src python benchmarks/checkpoint_stall.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

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
    args: argparse.Namespace, mgr: CheckpointManager | None, owned: bool
) -> tuple[float, list[float], list[float]]:
    """Run time, and per checkpoint: seconds blocked in save() and in the next opt.step()."""
    model, opt = build(args.width, args.depth)
    x = torch.randn(args.batch, args.width)
    in_save: list[float] = []
    in_step: list[float] = []
    waited = 0.0
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if mgr is not None and in_save and len(in_step) < len(in_save):
            in_step.append(mgr.snapshot_wait_s - waited)
        if mgr is not None and step % args.every == 0:
            t = time.perf_counter()
            mgr.save(step, capture_state(model, opt, step=step, copy=owned))
            in_save.append(time.perf_counter() - t)
            waited = mgr.snapshot_wait_s
    if mgr is not None:
        mgr.wait()
    elapsed = time.perf_counter() - t0
    in_step += [0.0] * (len(in_save) - len(in_step))  # the last save: no next step
    return elapsed, in_save, in_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for flag, value in (("--every", args.every), ("--repeats", args.repeats)):
        if value < 1:
            p.error(f"{flag} must be at least 1, got {value}")
    if args.steps < 2 * args.every:
        p.error(
            f"--steps must be at least twice --every (the first checkpoint of a run is not "
            f"counted), got --steps {args.steps} --every {args.every}"
        )
    # The checkpoints (GBs at the default size) are removed at the end, on an error or Ctrl-C.
    with tempfile.TemporaryDirectory(prefix="danlu-stall-", ignore_cleanup_errors=True) as tmp:
        measure(args, tmp)


def measure(args: argparse.Namespace, tmp: str) -> None:
    """The whole benchmark, its files (the sync baseline's, the checkpoints) under ``tmp``."""
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
        f"checkpoint every {args.every}, {args.repeats} repeats, "
        f"{torch.get_num_threads()} torch threads"
    )
    print(
        f"sync torch.save: {base * 1e3:.1f} ms (median of 5); with fsync "
        f"{base_durable * 1e3:.1f} ms"
    )

    configs = (("capture_state + save", True), ("capture_state(copy=False) + save", False))
    stalls: dict[str, list[float]] = {label: [] for label, _ in configs}
    waits: dict[str, list[float]] = {label: [] for label, _ in configs}
    runs: dict[str, list[tuple[float, int]]] = {label: [] for label, _ in configs}
    plain_times: list[float] = []
    for r in range(args.repeats):
        plain_times.append(train(args, None, True)[0])
        for label, owned in configs if r % 2 == 0 else configs[::-1]:
            directory = os.path.join(tmp, f"{'owned' if owned else 'live'}{r}")
            with CheckpointManager(directory, async_save=True, keep_last=2) as mgr:
                elapsed, in_save, in_step = train(args, mgr, owned)  # closed: saves waited for
            stalls[label] += [a + b for a, b in zip(in_save[1:], in_step[1:], strict=True)]
            waits[label] += in_step[1:]
            runs[label].append((elapsed, len(in_save)))
    plain = statistics.median(plain_times)
    print(
        f"{'hand-over':<34} {'stall ms':>9} {'max ms':>7} {'(in step)':>9} {'stall/sync':>11} "
        f"{'stall/(sync+fsync)':>19} {'end-to-end ms':>14}"
    )
    for label, _ in configs:
        stall = statistics.median(stalls[label])
        per_ckpt = statistics.median((elapsed - plain) / n for elapsed, n in runs[label])
        print(
            f"{label:<34} {stall * 1e3:9.1f} {max(stalls[label]) * 1e3:7.1f} "
            f"{statistics.median(waits[label]) * 1e3:9.1f} {stall / base:11.3f} "
            f"{stall / base_durable:19.3f} {per_ckpt * 1e3:14.1f}"
        )
    print(
        "stall = blocked in save() + (in step) waiting in the next opt.step() for the "
        "deferred copy; target stall/sync <= 0.10. end-to-end = (run time - run time "
        f"without checkpoints, median {plain:.2f} s) / checkpoints, for the record."
    )


if __name__ == "__main__":
    main()
