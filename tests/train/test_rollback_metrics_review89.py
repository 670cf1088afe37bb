"""A rollback's replayed steps are in the JSONL metrics file once: before, a resume cut the
file back to its checkpoint's step but a rollback (anomaly recovery) did not, so the steps
it redid were in the file twice, the first try's records and the replay's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.report import MetricsReporter


@pytest.mark.parametrize("written", [True, False], ids=["in-the-file", "not-yet-written"])
def test_the_steps_a_rollback_redoes_are_in_the_metrics_file_once(
    tmp_path: Path, written: bool
) -> None:
    """Checkpoints at steps 3 and 6; a NaN loss at step 5 rolls back to step 3, and step 4
    is redone. Its first record was in the file already (``written``: shipped before the
    anomaly) or still waiting for the reporter's next flush: either way it went out twice."""
    metrics = tmp_path / "metrics.jsonl"
    data = tiny_regression(n=32)
    data.tensors[0][4 * 4 + 1, 0] = float("nan")  # the fifth batch: step 5
    model = tiny_model()
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=32,
        shuffle=False,
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every_steps=3,
        anomaly="rollback",
        metrics_file=str(metrics),
        report_interval_s=3600,  # only the checkpoints and the explicit flush write
        progress=False,
        environ={},
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num == 4 and written:
                    ctx.reporter.flush()
        assert ctx.rollbacks == 1
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]  # the closing record has no loss
    assert steps == list(range(1, 9))
    assert [h["step"] for h in ctx.history] == list(range(1, 9))


def test_rewind_drops_only_later_records_and_leaves_the_api_alone(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    reporter = MetricsReporter(path=path, interval_s=3600)
    for step in (1, 2, 3):
        reporter.report({"step": step})
    reporter.flush()
    for step in (4, 5):
        reporter.report({"step": step})
    assert reporter.rewind(2) == 2  # steps 4 and 5, not written yet
    reporter.report({"step": 3, "again": True})
    reporter.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1},
        {"step": 2},
        {"step": 3, "again": True},
    ]
    api = MetricsReporter(url="http://127.0.0.1:9/api", interval_s=3600, close_timeout_s=0.1)
    api.report({"step": 5})
    assert api.rewind(2) == 0 and api._unsent() == 1
