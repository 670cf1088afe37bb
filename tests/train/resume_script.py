"""A tiny deterministic training run that checkpoints and resumes (test helper).

Run as ``python resume_script.py --ckpt DIR --steps N --out FINAL.pt [--progress FILE]``.
It resumes from the newest valid checkpoint in DIR, trains to step N and writes the final
model parameters to FINAL.pt. Every source of randomness is exercised and checkpointed:
dropout (torch), input noise (numpy), a coin flip (python ``random``), the shuffling
sampler (its own seeded generator; its position is part of the state).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback

import numpy as np
import torch

from danlu.train.checkpoint import CheckpointManager
from danlu.train.state import capture_state, restore_state

N_SAMPLES, BATCH, SEED = 200, 16, 1234


class Sampler:
    """Shuffles each epoch with a generator seeded by (seed, epoch); resumable by position."""

    def __init__(self, n: int, batch: int, seed: int) -> None:
        self.n, self.batch, self.seed = n, batch, seed
        self.epoch, self.offset = 0, 0

    def next_batch(self) -> torch.Tensor:
        if self.offset + self.batch > self.n:
            self.epoch, self.offset = self.epoch + 1, 0
        g = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        idx = torch.randperm(self.n, generator=g)[self.offset : self.offset + self.batch]
        self.offset += self.batch
        return idx

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.offset, self.seed = state["epoch"], state["offset"], state["seed"]


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(32, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=25, gamma=0.9)
    return model, opt, sched


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--progress")
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--no-async", action="store_true")
    p.add_argument("--full-every", type=int, default=4)
    p.add_argument("--keep-last", type=int, default=2)
    p.add_argument("--go", help="wait for this file to exist before starting")
    a = p.parse_args(argv)

    if a.go:  # pre-spawned by the test: imports are done, wait for the previous run to die
        while not os.path.exists(a.go):
            time.sleep(0.002)
    # The flag torch.use_deterministic_algorithms(True) sets, without its 3 s import of
    # torch._inductor (which only configures torch.compile, unused here).
    torch._C._set_deterministic_algorithms(True)
    assert torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    data_gen = torch.Generator().manual_seed(7)
    x = torch.randn(N_SAMPLES, 8, generator=data_gen)
    y = x[:, :1] * 2 - x[:, 1:2] ** 2 + 0.1 * torch.randn(N_SAMPLES, 1, generator=data_gen)

    model, opt, sched = build()
    sampler = Sampler(N_SAMPLES, BATCH, SEED)
    mgr = CheckpointManager(
        a.ckpt,
        keep_last=a.keep_last,
        every_steps=a.every,
        incremental=True,
        full_every=a.full_every,
        async_save=not a.no_async,
    )
    step, history = 0, []
    found = mgr.load_latest()
    if found is not None:
        info = restore_state(found[1], model, opt, sched)
        assert info.data_state is not None
        sampler.load_state_dict(info.data_state)
        step, history = info.step, info.metrics_history

    while step < a.steps:
        idx = sampler.next_batch()
        noise = torch.from_numpy(np.random.normal(0.0, 0.01, size=(BATCH, 8))).float()
        xb = x[idx] + (noise if random.random() < 0.5 else 0.0)
        loss = torch.nn.functional.mse_loss(model(xb), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        history.append({"step": step, "loss": loss.item()})
        if mgr.should_save(step):
            # copy=False: live tensors; with async saves the host copy overlaps the next
            # step and opt.step() waits for it, so resuming proves the copy is exact.
            mgr.save(
                step,
                capture_state(
                    model,
                    opt,
                    sched,
                    data_state=sampler.state_dict(),
                    step=step,
                    metrics_history=history[-5:],
                    copy=False,
                ),
                {"loss": loss.item()},
            )
        if a.progress:
            tmp = a.progress + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(step))
            os.replace(tmp, a.progress)
    mgr.close()
    torch.save(model.state_dict(), a.out)
    return 0


def zygote() -> int:
    """Serve runs as forked children of this already-imported process (saves 2-4 s each).

    Reads JSON lines from stdin: ``{"op": "run", "argv": [...]}`` forks a child that runs
    ``main(argv)`` and answers ``{"pid": ...}``; ``{"op": "wait", "pid": ...}`` answers
    ``{"exitcode": ...}`` (negative: killed by that signal). No torch op has run in this
    process, so no thread pool exists yet and forking is safe.
    """
    import torch._dynamo  # noqa: F401  (optimizers import it lazily: ~3 s, pay it once)

    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "run":
            pid = os.fork()
            if pid == 0:  # the child: a fresh training process
                rc = 1
                try:
                    rc = main(cmd["argv"])
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stderr.flush()
                    os._exit(rc)
            reply: dict[str, int] = {"pid": pid}
        else:
            _, status = os.waitpid(int(cmd["pid"]), 0)
            reply = {"exitcode": os.waitstatus_to_exitcode(status)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(zygote() if sys.argv[1:] == ["--zygote"] else main())
