"""A checkpoint metric that is an integer too large for a float (``10**400``, which JSON
stores as it is) ranked as the best: ``float()`` of it raised a bare OverflowError in the
retention of the save, after its commit. It is no finite number: it never ranks as the best,
as an infinite loss does not."""

from __future__ import annotations

from pathlib import Path

import torch

from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.fields import CheckpointInfo, finite_metric


def test_a_huge_integer_is_not_finite() -> None:
    info = CheckpointInfo("ckpt-000000000001-0123abcd", 1, "full", None, 1, {"loss": 10**400})
    assert finite_metric(info, "loss") is None
    info.metrics["loss"] = 10**300  # large, but a float holds it
    assert finite_metric(info, "loss") == 1e300


def test_a_save_with_a_huge_metric_keeps_the_best_finite_one(tmp_path: Path) -> None:
    mgr = CheckpointManager(str(tmp_path), keep_last=1, keep_best=1, best_metric="loss")
    mgr.save(1, {"w": torch.zeros(2)}, metrics={"loss": 0.5})
    mgr.save(2, {"w": torch.ones(2)}, metrics={"loss": 10**400})
    mgr.save(3, {"w": torch.ones(2)}, metrics={"loss": -(10**400)})
    kept = [(i.step, i.metrics["loss"]) for i in mgr.list_checkpoints()]
    assert kept == [(1, 0.5), (3, -(10**400))]
