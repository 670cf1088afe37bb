"""``danlu.train.init`` refuses arguments that cannot work, naming them, before training:
not a failure at the first batch change, not a run that silently trains wrong."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


@pytest.mark.parametrize(
    ("bad", "name"),
    [
        ({"micro_batch_size": 0}, "micro_batch_size"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"clip_grad_norm": -1.0}, "clip_grad_norm"),  # flipped every gradient before
        ({"clip_grad_norm": math.nan}, "clip_grad_norm"),
        ({"grad_norm_tau": -1.0}, "grad_norm_tau"),  # a negative LR before
        ({"anomaly_k": 0.0}, "anomaly_k"),
        ({"anomaly_window": 0}, "anomaly_window"),
        ({"anomaly_window": 19}, "anomaly_window"),  # spike detection silently off before
        ({"dataset_size": 0}, "dataset_size"),
        ({"lr_scaling": "cubic"}, "lr_scaling"),  # raised at the first batch change before
        ({"gns_every": -1}, "gns_every"),
        ({"checkpoint_every_steps": 0}, "checkpoint_every_steps"),
        ({"checkpoint_every_seconds": -5.0}, "checkpoint_every_seconds"),
        ({"keep_last": 0}, "keep_last"),
        ({"keep_best": -1}, "keep_best"),
        ({"best_mode": "lowest"}, "best_mode"),
        ({"report_interval_s": 0.0}, "report_interval_s"),  # a reporter spinning before
        ({"report_interval_s": math.inf}, "report_interval_s"),  # a reporter thread died
        ({"collective_timeout_s": -1.0}, "collective_timeout_s"),
    ],
)
def test_arguments_that_cannot_work_are_refused_by_name(bad: dict[str, Any], name: str) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(ConfigError, match=name):
        dt.init(model, opt, global_batch_size=16, environ={}, metrics_file=False, **bad)


def test_fit_on_an_empty_dataset_says_the_dataset_is_empty() -> None:
    """``dataset_size=0`` was taken for "no dataset size given": ``fit`` (which passes
    ``len(dataset)``) failed telling the caller to pass ``dataset_size``."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    empty = torch.utils.data.TensorDataset(torch.zeros(0, 8), torch.zeros(0, 1))
    with pytest.raises(ConfigError, match="dataset is empty"):
        dt.fit(model, opt, empty, mse_loss, environ={}, metrics_file=False)


def test_an_unwritable_checkpoint_dir_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(ConfigError, match="checkpoint_dir"):
        dt.init(
            model,
            opt,
            global_batch_size=16,
            environ={},
            metrics_file=False,
            checkpoint_dir=str(blocker / "ckpt"),
        )


def test_rule_names_are_case_blind_and_none_turns_scaling_off() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for rule in ("Linear", "none", "sqrt"):
        with dt.init(
            model,
            opt,
            global_batch_size=16,
            environ={},
            metrics_file=False,
            lr_scaling=rule,
            dataset_size=32,
        ) as ctx:
            for batch in ctx.batches(tiny_regression(32)):
                ctx.step(batch, mse_loss)
            ctx.adopt_launch_batch(32)  # the rule applies without an error
            assert ctx.batch.global_batch == 32


@pytest.mark.parametrize(("mode", "best"), [("min", 4), ("max", 12)])
def test_fit_keeps_the_checkpoint_of_its_best_evaluation(
    tmp_path: Path, mode: str, best: int
) -> None:
    """``fit(evaluate=...)`` checkpoints each epoch's end with its evaluation, and the best
    one is kept beside the newest (it was only stored in ``extra``, and retention never saw
    it). With a plateau scheduler the best follows the scheduler's mode."""
    from danlu.train.checkpoint import CheckpointManager

    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode)  # type: ignore[arg-type]
    scores = iter([0.1, 5.0, 9.0, 7.0])  # after the epochs ending at steps 4, 8, 12 and 16
    dt.fit(
        model,
        opt,
        tiny_regression(n=32),
        mse_loss,
        epochs=4,
        scheduler=plateau,
        global_batch_size=8,
        evaluate=lambda ctx: next(scores),
        checkpoint_dir=str(tmp_path),
        keep_last=1,
        metrics_file=False,
        progress=False,
        environ={},
    )
    kept = CheckpointManager(str(tmp_path)).list_checkpoints()
    assert sorted(i.step for i in kept) == sorted({best, 16})
    assert all("eval" in i.metrics for i in kept)


def test_a_rule_name_in_any_case_works_at_the_batch_change_too() -> None:
    """``lr_scaling="AdaScale"`` passed init's case-blind check, then failed at the first
    batch change, where the name was compared as given (``"adascale"`` gets the gradient
    statistics, any other spelling went to the rules without them)."""
    data = tiny_regression(64)
    model = tiny_model()
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=len(data),
        adaptive_batch=dt.AdaptiveBatch("schedule", 4, total_steps=2, max_batch=16),
        lr_scaling=" AdaScale",
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        assert ctx.lr_scaling == "adascale"
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
        assert ctx.batch.global_batch > 4  # the schedule grew the batch; the LR followed
