"""keep_best over a directory holding several runs' checkpoints: the best K of each run.

Before, the best K ranked every run's checkpoints together: an older run's better metric
(another model's, often not comparable) took the places, and the new run's own best
checkpoint was deleted as soon as keep_last let it go.
"""

from __future__ import annotations

from pathlib import Path

import torch

from danlu.train.checkpoint import CheckpointManager


def _save(mgr: CheckpointManager, step: int, loss: float) -> None:
    mgr.save(step, {"w": torch.full((2,), float(step))}, {"loss": loss})


def test_keep_best_keeps_each_runs_best(tmp_path: Path) -> None:
    old = CheckpointManager(str(tmp_path), keep_last=1, keep_best=1, best_metric="loss")
    for step, loss in ((100, 0.1), (200, 0.2)):
        _save(old, step, loss)
    old.close()
    new = CheckpointManager(str(tmp_path), keep_last=1, keep_best=1, best_metric="loss")
    for step, loss in ((10, 0.5), (11, 0.4), (12, 0.6), (13, 0.7)):
        _save(new, step, loss)
    new.close()
    kept = [i.step for i in CheckpointManager(str(tmp_path)).list_checkpoints()]
    # run A's best (100), run B's best (11, before: deleted) and its newest
    assert kept == [11, 13, 100]
