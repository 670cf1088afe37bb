"""A periodic checkpoint and a ``save()`` of the same step (``fit``'s end of an epoch, its
evaluation as the metric) take one of ``keep_last``'s places, the newer's. Before, they took
two: ``keep_last=2`` kept the last step twice and nothing before it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt


def test_a_periodic_and_an_evaluated_checkpoint_of_one_step_take_one_place(
    tmp_path: Path,
) -> None:
    model = tiny_model()
    scores = iter([0.3, 0.1, 0.2])
    dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        tiny_regression(16),
        mse_loss,
        epochs=3,
        global_batch_size=4,  # 4 steps an epoch: the periodic checkpoint is an epoch's last
        evaluate=lambda ctx: next(scores),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=4,
        keep_last=2,
        keep_best=0,
        metrics_file=False,
        progress=False,
        environ={},
    )
    manifests = [json.loads(p.read_text()) for p in tmp_path.glob("ckpt-*/MANIFEST.json")]
    kept = sorted(((m["step"], m["metrics"]) for m in manifests), key=lambda sm: sm[0])
    # the newer of each step's two: the one with the evaluation (and fit's mark of it)
    assert kept == [(8, {"eval": 0.1}), (12, {"eval": 0.2})]
