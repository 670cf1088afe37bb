"""``TrainContext.restore()`` is all or nothing. It loaded the model, the optimizer, the
scheduler and then each part's state one after another, so a checkpoint whose ``anomaly``
(or ``goodput``, ``gns``, ...) state was refused had already overwritten the weights, the
optimizer's momentum, the scheduler and the parts before it: a caller that caught the
:class:`IncompatibleCheckpointError` and trained on (from scratch, or from an older
checkpoint) trained a mixture. Every part's state is now checked before anything is loaded:
the refusal says the same, and every live object is as it was."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import damaged_checkpoints, mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.anomaly import AnomalyDetector
from danlu.train.batch import BatchController
from danlu.train.context import TrainContext
from danlu.train.distributed import unwrap
from danlu.train.goodput import GoodputTuner
from danlu.train.lr import LRController
from danlu.train.state import IncompatibleCheckpointError

Damage = Callable[[dict[str, Any]], None]


def _context(directory: Path, *, goodput: bool) -> TrainContext:
    """A fresh context of :func:`tiny_model`, SGD with momentum (an optimizer state a load
    changes) and a ``StepLR`` over 32 samples at a global batch of 4 (micro-batches of 2:
    the gradient noise is measured), checkpointing to ``directory``; ``goodput``: with the
    goodput-adaptive batch (its tuner and its gradient-noise estimate, the last parts)."""
    model = tiny_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return dt.init(
        model,
        optimizer,
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9),
        global_batch_size=4,
        micro_batch_size=2,
        adaptive_batch=dt.AdaptiveBatch("goodput", 4, max_batch=16) if goodput else None,
        lr_scaling="adascale" if goodput else "linear",
        dataset_size=32,
        checkpoint_dir=str(directory),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
    )


def _train(ctx: TrainContext, steps: int, seed: int) -> None:
    """``steps`` steps of :func:`tiny_regression` drawn with ``seed``."""
    data = tiny_regression(32, seed=seed)
    for batch in ctx.batches(data):
        ctx.step(batch, mse_loss)
        if ctx.step_num >= steps:
            return


def _write(directory: Path, monkeypatch: pytest.MonkeyPatch, goodput: bool, damage: Damage) -> int:
    """Train three steps, checkpoint a state that ``damage`` changed; return the step."""
    with damaged_checkpoints(monkeypatch, damage), _context(directory, goodput=goodput) as ctx:
        _train(ctx, 3, seed=0)
        ctx.save()
        return ctx.step_num


def _part(part: str, key: str, value: object) -> Damage:
    def damage(state: dict[str, Any]) -> None:
        state["data_state"][part][key] = value

    return damage


def _snapshot(ctx: TrainContext) -> dict[str, Any]:
    """Everything a refused restore must leave as it was (deep copies)."""
    gns = ctx.adaptive.gns if ctx.adaptive is not None else ctx.engine.gns
    assert ctx.anomaly is not None and ctx.scheduler is not None
    return copy.deepcopy(
        {
            "model": unwrap(ctx.model).state_dict(),
            "optimizer": ctx.optimizer.state_dict(),
            "scheduler": ctx.scheduler.state_dict(),
            "batch": ctx.batch.state_dict(),
            "lr": ctx.lr.state_dict(),
            "anomaly": ctx.anomaly.state_dict(),
            "anomaly_total": ctx.anomaly.total,
            "norm_cadence": ctx.engine.cadence.state_dict(),
            "goodput": None if ctx.goodput is None else ctx.goodput.state_dict(),
            "gns": None if gns is None else gns.state_dict(),
            "step": ctx.step_num,
        }
    )


def _same(a: object, b: object) -> bool:
    """Equal, tensors by value, through dicts, lists and tuples."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _live_run(directory: Path, goodput: bool) -> TrainContext:
    """A live context on ``directory`` moved away from the checkpoint: other weights, another
    optimizer momentum and scheduler step, another global batch and LR decay, anomaly and
    gradient-noise statistics of other data."""
    ctx = _context(directory, goodput=goodput)
    _train(ctx, 1, seed=1)
    ctx.batch.set_global(8)
    ctx.lr.reduce(0.5)
    return ctx


def _refused_leaves_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, goodput: bool, part: str, damage: Damage
) -> str:
    """Write a checkpoint whose ``part`` state ``damage`` broke, restore it into a live run:
    refused naming the part, and every live object as it was. Returns the message."""
    step = _write(tmp_path, monkeypatch, goodput, damage)
    with _live_run(tmp_path, goodput) as ctx:
        found = ctx.checkpoints.load_latest()
        assert found is not None and found[0] == step
        before = _snapshot(ctx)
        # the checkpoint holds other weights and momentum: a load would have changed them
        assert not _same(found[1]["model"], before["model"])
        assert not _same(found[1]["optimizer"]["state"], before["optimizer"]["state"])
        with pytest.raises(IncompatibleCheckpointError) as caught:
            ctx.restore()
        after = _snapshot(ctx)
        changed = [key for key in before if not _same(before[key], after[key])]
        assert changed == [], f"changed by the refused restore: {changed}"
        assert [g["lr"] for g in ctx.optimizer.param_groups] == [ctx.lr.lr]
    message = str(caught.value)
    assert f"cannot resume from the checkpoint of step {step} in {tmp_path}" in message
    assert f"its {part!r} state is not one this danlu reads" in message
    assert "resume=False" in message
    return message


def test_a_damaged_anomaly_state_leaves_the_model_optimizer_and_earlier_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window value that is no number: the old restore had loaded the model, optimizer,
    scheduler, batch, LR and the anomaly counts before it raised."""
    message = _refused_leaves_everything(
        tmp_path, monkeypatch, False, "anomaly", _part("anomaly", "grad", [1.0, "abc"])
    )
    assert "(ValueError: could not convert string to float: 'abc')" in message


def test_an_anomaly_window_value_beyond_the_float_range_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An integer no float holds: ``float()`` raised a bare OverflowError."""
    message = _refused_leaves_everything(
        tmp_path, monkeypatch, False, "anomaly", _part("anomaly", "grad", [1.0, 10**400])
    )
    assert "its 'anomaly' state is not one this danlu reads (OverflowError" in message


def test_a_damaged_gradient_noise_state_leaves_every_other_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last part: the old restore had loaded everything else (the goodput tuner too)."""
    message = _refused_leaves_everything(
        tmp_path, monkeypatch, True, "gns", _part("gns", "sigma2", "abc")
    )
    assert "could not convert string to float: 'abc'" in message


def test_a_damaged_goodput_sync_time_leaves_the_tuner_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A placement that is no list of GPU counts: the tuner's own load had set its compute
    times before it read the sync times."""

    def damage(state: dict[str, Any]) -> None:
        tuner = state["data_state"]["goodput"]["tuner"]
        tuner["compute"] = [[2, 0.5], [4, 0.75]]  # other than the live run's
        tuner["sync"] = [[["x"], 0.1]]

    message = _refused_leaves_everything(tmp_path, monkeypatch, True, "goodput", damage)
    # the tuner's error names the bad value: int()'s ValueError once, danlu.estimate's
    # DataError (a ValueError) naming the field since
    assert "'x'" in message


def test_an_lr_state_of_another_number_of_groups_is_refused_before_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two LRs for one parameter group: the LR's load set the step count and multipliers
    before applying them to the optimizer raised ``zip()``'s error."""
    message = _refused_leaves_everything(
        tmp_path, monkeypatch, False, "lr", _part("lr", "inner", [0.01, 0.02])
    )
    assert "the LR state's inner holds 2 LRs for 1 parameter groups" in message


def test_a_global_batch_beyond_the_float_range_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its local batch (a float division) raised a bare ``OverflowError`` out of
    ``restore()``, once the batch state was half set."""
    message = _refused_leaves_everything(
        tmp_path, monkeypatch, False, "batch", _part("batch", "global_batch", 10**400)
    )
    assert "global_batch (a whole number of 1329 bits) is beyond the float range" in message


@pytest.mark.parametrize("goodput", [False, True], ids=["plain", "goodput"])
def test_a_whole_checkpoint_loads_every_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, goodput: bool
) -> None:
    """What the refusals leave out is loaded when nothing is damaged: the live run then
    holds the checkpoint's weights, optimizer, scheduler and every part's state."""
    _write(tmp_path, monkeypatch, goodput, lambda state: None)
    with _context(tmp_path, goodput=goodput) as writer:
        assert writer.restore()
        expected = _snapshot(writer)
    with _live_run(tmp_path, goodput) as ctx:
        assert not _same(_snapshot(ctx), expected)
        assert ctx.restore()
        after = _snapshot(ctx)
        assert [key for key in expected if not _same(expected[key], after[key])] == []
        assert ctx.lr.state_dict()["decay"] == 1.0  # the live reduce(0.5) undone
        assert ctx.batch.global_batch == 4  # the live set_global(8) too


# -- each part's own load_state_dict changes nothing when it raises ---------------------------
def _anomaly_detector() -> AnomalyDetector:
    detector = AnomalyDetector("skip", window=30)
    detector.load_state_dict({"counts": {"grad_spike": 1}, "grad": [1.0] * 25, "loss": [2.0] * 25})
    return detector


def _goodput_tuner() -> GoodputTuner:
    tuner = GoodputTuner(4, 16, 2)
    measured = {"compute": [[2, 0.5]], "sync": [[[1], 0.1]], "stats": None}
    tuner.load_state_dict({"tuner": measured, "stats": [1.0, 2.0]})
    return tuner


_BATCH = {"micro": 4, "micro_cap": 4, "oom_cap": None, "oom_count": 0, "base_global_batch": 16}
"""A batch state but for its global batch."""


def _lr_controller() -> LRController:
    model = tiny_model()
    return LRController(torch.optim.SGD(model.parameters(), lr=0.01))


@pytest.mark.parametrize(
    ("make", "damaged"),
    [
        # the counts were set before a window value raised
        (_anomaly_detector, {"counts": {"loss_spike": 3}, "grad": [1.0, "abc"]}),
        # the tuner's compute times were set before a sync time's placement raised
        (_goodput_tuner, {"tuner": {"compute": [[4, 0.9]], "sync": [[["x"], 0.1]]}}),
        # the step count and multipliers were set before zip() raised on them
        (_lr_controller, {"steps": 5, "scale": 2.0, "decay": 0.5, "inner": [0.1, 0.2]}),
        # the global batch was set before its local batch raised OverflowError
        (lambda: BatchController(16, world_size=2, micro=4), {**_BATCH, "global_batch": 10**400}),
    ],
    ids=["anomaly", "goodput", "lr", "batch"],
)
def test_a_refused_load_state_dict_changes_nothing(
    make: Callable[[], Any], damaged: dict[str, Any]
) -> None:
    """A state its check refuses (a ``ValueError``) leaves the part as it was."""
    part = make()
    before = copy.deepcopy(part.state_dict())
    lrs = [g["lr"] for g in part.optimizer.param_groups] if isinstance(part, LRController) else []
    with pytest.raises(ValueError):
        part.load_state_dict(damaged)
    assert _same(part.state_dict(), before)
    if isinstance(part, AnomalyDetector):
        assert part.total == 1
    if isinstance(part, LRController):
        assert [g["lr"] for g in part.optimizer.param_groups] == lrs
