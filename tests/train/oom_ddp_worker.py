"""One rank of a 2-process gloo job in which ONE rank runs out of memory during a DDP step
(test helper for ``test_oom_ddp.py``).

``python oom_ddp_worker.py RANK WORLD PORT OUT CASE...``, each ``CASE`` as
``MODEL-WHERE-OOM_RANK``: trains :data:`STEPS` steps of a tiny model (``MODEL``: ``mlp``, or
``bn`` with batch normalisation) on :data:`LOCAL` samples a rank in micro-batches of
:data:`MICRO` (three of them), twice:

- ``oom``: on step :data:`OOM_STEP`, rank ``OOM_RANK`` raises ``torch.OutOfMemoryError`` once,
  as a CUDA allocation would, ``WHERE``: inside the model's forward of the first, middle or
  last micro-batch (``first``, ``middle``, ``last``: a forward hook, before DDP's forward
  returns), or in the loss of the last micro-batch, after DDP's forward returned (``loss``);
- ``reference``: no OOM; every rank halves the micro-batch itself before step
  :data:`OOM_STEP` (what the recovery should amount to).

Writes ``{CASE: {"oom": run, "reference": run}}`` as JSON to ``OUT.RANK``; a run is each step's
micro-batch and OOM count, and the final parameters and buffers (batch normalisation's
running statistics: each rank's own).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from sync_worker import join, leave  # the same directory: the script's sys.path[0]
from train_helpers import exit_now

import danlu.train as dt

LOCAL, MICRO, STEPS, OOM_STEP = 12, 4, 3, 1
WHERES = {"first": 0, "middle": 1, "last": 2, "loss": 2}
"""The micro-batch (of the three at :data:`MICRO`) whose forward or loss runs out of memory."""


class Trigger:
    """Raises one simulated OOM at the ``at``-th forward of the step it is armed for."""

    def __init__(self, at: int | None, in_loss: bool) -> None:
        self.at = at
        self.in_loss = in_loss
        self.armed = False
        self.calls = 0

    def arm(self) -> None:
        self.armed = self.at is not None
        self.calls = 0

    def fire(self, in_loss: bool) -> None:
        """Called in the forward hook (``in_loss`` False) and after the forward (True)."""
        if not self.armed or in_loss != self.in_loss:
            return
        if self.calls == self.at:
            self.armed = False
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        self.calls += 1


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "bn":
        return torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def run(rank: int, world: int, kind: str, trigger: Trigger | None) -> dict[str, Any]:
    """Train :data:`STEPS` steps; with ``trigger``, this rank's OOM on step :data:`OOM_STEP`,
    else every rank halves the micro-batch before it."""
    model = _model(kind)
    model[-1].register_forward_hook(lambda *_: trigger.fire(False) if trigger else None)

    def loss(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out = m(batch[0])
        if trigger is not None:
            trigger.fire(True)
        return torch.nn.functional.mse_loss(out, batch[1])

    environ = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        global_batch_size=LOCAL * world,
        micro_batch_size=MICRO,
        anomaly=None,
        metrics_file=False,
        progress=False,
        environ=environ,
    ) as ctx:
        g = torch.Generator().manual_seed(rank)
        for step in range(STEPS):
            x = torch.randn(LOCAL, 4, generator=g)
            if step == OOM_STEP:
                if trigger is not None:
                    trigger.arm()
                else:
                    ctx.batch.on_oom()
            ctx.step((x, x.sum(1, keepdim=True)), loss)
        return {
            "micro": [h["micro_batch"] for h in ctx.history],
            "oom_count": [h["oom_count"] for h in ctx.history],
            "params": {k: v.double().flatten().tolist() for k, v in model.named_parameters()},
            "buffers": {k: v.double().flatten().tolist() for k, v in model.named_buffers()},
        }


def main(rank: int, world: int, port: int, out: str, cases: list[str]) -> int:
    join(rank, world, port)
    result: dict[str, Any] = {}
    for case in cases:
        kind, where, oom_rank = case.split("-")
        at = WHERES[where] if rank == int(oom_rank) else None
        result[case] = {
            "oom": run(rank, world, kind, Trigger(at, where == "loss")),
            "reference": run(rank, world, kind, None),
        }
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    return leave()


if __name__ == "__main__":
    r, w, p, o = sys.argv[1:5]
    exit_now(main(int(r), int(w), int(p), o, sys.argv[5:]))
