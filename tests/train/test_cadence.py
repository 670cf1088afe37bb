"""The gradient norm's cadence: ``"auto"`` sizes it to a cost budget, keeps it across a
resume, and a NaN gradient that slips through an unchecked step is caught, not skipped
forever."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import DanluError
from danlu.train import cadence
from danlu.train.anomaly import TrainingAnomalyError
from danlu.train.cadence import NormCadence, decide
from danlu.train.step import LossFn


def test_decide_keeps_cheap_norms_every_step_and_sizes_costly_ones_to_the_budget() -> None:
    assert decide(50e-6, 1e-3) == 1  # under the floor, however short the step
    assert decide(200e-6, 0.25) == 1  # 0.08 % of the step: inside the budget
    # 500 us next to a 20 ms step: 2.5 %, 25 times the budget of 0.1 %
    assert decide(500e-6, 20e-3) == 25
    assert decide(5e-3, 1e-3) == cadence.MAX_EVERY
    assert decide(5e-3, 0.0) == cadence.MAX_EVERY


def test_auto_skips_a_warm_up_step_then_decides_on_the_median() -> None:
    c = NormCadence("auto")
    assert c.calibrating and all(c.due(s) for s in range(7))
    assert c.observe(1.0, 1.0) is None  # warm-up: ignored, however slow
    assert [c.observe(n, 20e-3 + n) for n in (500e-6, 9e-3)] == [None, None]
    every = c.observe(520e-6, 20e-3 + 520e-6)
    assert every == 26  # median norm 520 us over a median 20.0 ms step
    assert c.state_dict() == {"every": None}  # not fixed until the caller agrees
    c.fix(every)
    assert not c.calibrating and c.state_dict() == {"every": 26}
    assert [s for s in range(60) if c.due(s)] == [0, 26, 52]
    assert c.observe(1.0, 1.0) is None  # calibration is over


def test_a_fixed_cadence_and_an_unmeasurable_device_never_calibrate() -> None:
    fixed = NormCadence(3)
    assert not fixed.calibrating and [s for s in range(7) if fixed.due(s)] == [0, 3, 6]
    assert fixed.state_dict() == {"every": None}
    fixed.load_state_dict({"every": 9})  # a user's integer wins over a saved auto cadence
    assert fixed.every == 3
    gpu = NormCadence("auto", measurable=False)
    assert not gpu.calibrating and gpu.every == 1
    resumed = NormCadence("auto")
    resumed.load_state_dict({"every": 9})
    assert not resumed.calibrating and resumed.every == 9


@pytest.mark.parametrize("bad", [0, -2, "sometimes", 2.5, True])
def test_a_bad_cadence_is_refused_by_name(bad: object) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(DanluError, match="grad_norm_every must be >= 1 or 'auto'"):
        dt.init(
            model,
            opt,
            global_batch_size=16,
            metrics_file=False,
            grad_norm_every=bad,  # type: ignore[arg-type]
            environ={},
        )


def _tiny_ctx(model: torch.nn.Module, **kwargs: Any) -> dt.TrainContext:
    """danlu.train over ``model`` (SGD), 16 samples a step from a 512-sample dataset."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(
        model,
        opt,
        global_batch_size=16,
        dataset_size=512,
        metrics_file=False,
        environ={},
        **kwargs,
    )


def _run(steps: int, ckpt: Path | None = None) -> tuple[list[dt.StepResult], int]:
    """``steps`` steps of a tiny model with the default cadence (checkpoints every 4 steps
    to ``ckpt``, resumed from there)."""
    extra: dict[str, Any] = {}
    if ckpt is not None:
        extra = {"checkpoint_dir": str(ckpt), "checkpoint_every_steps": 4}
    with _tiny_ctx(tiny_model(), **extra) as ctx:
        batches = ctx.batches(tiny_regression(512))
        results = [ctx.step(next(batches), mse_loss) for _ in range(steps)]
        return results, ctx.engine.norm_every


def test_auto_on_a_costly_norm_checks_sparsely_and_a_resume_keeps_the_cadence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make every norm "costly": no size or time floor, a budget no norm fits in.
    monkeypatch.setattr(cadence, "SMALL_GRADIENTS", 0)
    monkeypatch.setattr(cadence, "FLOOR_S", 0.0)
    monkeypatch.setattr(cadence, "BUDGET", 1e-12)
    results, every = _run(12, tmp_path / "ckpt")
    assert every == cadence.MAX_EVERY
    calibration = 1 + cadence.CALIBRATION_STEPS
    assert [r.grad_norm is not None for r in results] == [i < calibration for i in range(12)]

    monkeypatch.undo()  # the real budget: a resumed run does not measure again
    results, every = _run(4, tmp_path / "ckpt")
    assert every == cadence.MAX_EVERY
    assert all(r.grad_norm is None for r in results)  # steps 12..15: off the cadence

    fresh, every = _run(8)  # a tiny model is not measured: every step, whatever the timings
    assert every == 1 and all(r.grad_norm is not None for r in fresh)


def test_small_models_are_never_timed() -> None:
    small = NormCadence("auto", elements=cadence.SMALL_GRADIENTS - 1)
    assert not small.calibrating and small.every == 1
    assert NormCadence("auto", elements=cadence.SMALL_GRADIENTS).calibrating
    assert NormCadence("auto").calibrating  # size unknown: measured


def _nan_gradient_on(step: int) -> LossFn:
    """A loss_fn whose gradient is NaN on call ``step`` while the loss stays finite:
    ``0 * sqrt(w - w)`` is 0, its derivative 0 * inf."""
    calls = [0]

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = mse_loss(m, b)
        if calls[0] == step + 1:
            w = next(m.parameters())
            loss = loss + 0.0 * (w - w.detach()).sum().sqrt()
        return loss

    return loss_fn


def test_a_nan_gradient_on_an_unchecked_step_stops_with_a_clear_error() -> None:
    loss_fn = _nan_gradient_on(4)  # off a cadence of 3: steps 0, 3, 6 are checked
    with _tiny_ctx(tiny_model(), grad_norm_every=3) as ctx:
        batches = ctx.batches(tiny_regression(512))
        for _ in range(5):
            assert math.isfinite(ctx.step(next(batches), loss_fn).loss)
        with pytest.raises(TrainingAnomalyError, match="grad_norm_every=1"):
            ctx.step(next(batches), loss_fn)  # step 5: NaN loss from NaN parameters


def test_a_nan_gradient_on_an_unchecked_step_rolls_back_to_a_checkpoint(tmp_path: Path) -> None:
    model = tiny_model()
    loss_fn = _nan_gradient_on(5)
    with _tiny_ctx(
        model, grad_norm_every=3, checkpoint_dir=str(tmp_path), checkpoint_every_steps=2
    ) as ctx:
        batches = ctx.batches(tiny_regression(512))
        results = [ctx.step(next(batches), loss_fn) for _ in range(10)]
        # step 5's NaN gradient is not checked; before the checkpoint of step 6 the NaN
        # parameters are found and the run goes back to the checkpoint of step 4
        assert ctx.rollbacks == 1 and ctx.step_num == 8
        assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_params": 1}
        assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(math.isfinite(r.loss) for r in results)


def test_the_same_nan_gradient_on_a_checked_step_is_skipped() -> None:
    with _tiny_ctx(tiny_model(), grad_norm_every=1) as ctx:
        batches = ctx.batches(tiny_regression(512))
        loss_fn = _nan_gradient_on(4)
        results = [ctx.step(next(batches), loss_fn) for _ in range(8)]
    assert results[4].anomaly == "nonfinite_grad" and not results[4].applied
    assert all(r.anomaly is None for r in results[5:])


def test_warn_applies_a_nan_gradient_but_never_checkpoints_its_parameters(
    tmp_path: Path,
) -> None:
    """Under ``"warn"`` a checked NaN gradient is counted and applied: the periodic checkpoint
    after it is left out, not written from the NaN parameters."""
    from danlu.train.checkpoint import CheckpointManager

    with _tiny_ctx(
        tiny_model(),
        grad_norm_every=1,
        anomaly="warn",
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
    ) as ctx:
        batches = ctx.batches(tiny_regression(512))
        loss_fn = _nan_gradient_on(4)
        results = [ctx.step(next(batches), loss_fn) for _ in range(6)]
        assert results[4].anomaly == "nonfinite_grad" and results[4].applied
        assert ctx.anomaly is not None and ctx.anomaly.counts["nonfinite_params"] == 1
    step, state = CheckpointManager(str(tmp_path)).load_latest()
    assert step == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_the_engine_computes_the_norm_exactly_on_the_cadences_due_steps() -> None:
    """``StepEngine.step`` inlines ``NormCadence.due`` (the per-step path): both must agree."""
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = data.tensors
    with dt.init(
        model, opt, global_batch_size=8, grad_norm_every=3, metrics_file=False, environ={}
    ) as ctx:
        checked = [ctx.step((x[i : i + 8], y[i : i + 8]), mse_loss).grad_norm for i in range(7)]
        due = [ctx.engine.cadence.due(s) for s in range(7)]
    assert [n is not None for n in checked] == due == [s % 3 == 0 for s in range(7)]


def _nan_gradient_for_sample(bad: int) -> LossFn:
    """A loss_fn whose gradient is NaN, the loss finite, on every batch holding sample
    ``bad`` (a batch bad in itself: the replay after a rollback meets it again)."""

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y, index = b
        loss = torch.nn.functional.mse_loss(m(x), y)
        if bool((index == bad).any()):
            w = next(m.parameters())
            loss = loss + 0.0 * (w - w.detach()).sum().sqrt()
        return loss

    return loss_fn


def _indexed(n: int) -> torch.utils.data.TensorDataset:
    x, y = tiny_regression(n).tensors
    return torch.utils.data.TensorDataset(x, y, torch.arange(n))


def _train_to(ctx: dt.TrainContext, loss_fn: LossFn, steps: int) -> int:
    """Train until step ``steps``; the number of ``ctx.step`` calls (fails past 30: the run
    keeps going back)."""
    batches = ctx.batches(_indexed(512))
    attempts = 0
    while ctx.step_num < steps:
        ctx.step(next(batches), loss_fn)
        attempts += 1
        assert attempts < 30, f"{ctx.rollbacks} rollbacks: the run keeps going back"
    return attempts


@pytest.mark.parametrize("action", ["skip", "rollback"])
def test_a_batch_with_a_nan_gradient_off_the_cadence_is_caught_on_the_replay(
    tmp_path: Path, action: str
) -> None:
    """Step 5's batch gives a finite loss and a NaN gradient, off a cadence of 100: the NaN
    parameters are found before the checkpoint of step 6 and the run goes back to step 4.
    The replay applied the same NaN gradient again, rolling back for good (98 rollbacks, the
    LR 3e-32). Now the replay checks the norm on every step up to where the parameters were
    found bad, so the batch is caught and skipped (under "rollback": rolled back for once,
    then skipped)."""
    model = tiny_model()
    with _tiny_ctx(
        model,
        shuffle=False,
        grad_norm_every=100,
        anomaly=action,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
    ) as ctx:
        attempts = _train_to(ctx, _nan_gradient_for_sample(5 * 16 + 3), 10)
        assert all(torch.isfinite(p).all() for p in model.parameters())
        assert ctx.anomaly is not None
        if action == "skip":
            assert ctx.rollbacks == 1 and attempts == 12
            assert ctx.anomaly.counts == {"nonfinite_params": 1, "nonfinite_grad": 1}
        else:
            assert ctx.rollbacks == 2 and attempts == 14
            assert ctx.anomaly.counts == {"nonfinite_params": 1, "nonfinite_grad": 2}
        # past the replay the cadence is as before: steps 7..9 computed no norm
        assert ctx.engine.norm_every == 100
        assert [r["grad_norm"] is None for r in ctx.history[-3:]] == [True] * 3


def test_parameters_bad_again_after_a_rollback_for_them_stop_the_run(tmp_path: Path) -> None:
    """Parameters that go NaN again at the same step after the rollback for them, with
    every gradient since the checkpoint checked (here the optimizer's update itself puts the
    NaN there), would be rolled back for without end: the run stops with the error."""
    model = tiny_model()
    poison: list[int] = []
    with _tiny_ctx(
        model,
        shuffle=False,
        grad_norm_every=100,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
    ) as ctx:

        def after_step(opt: torch.optim.Optimizer, *_: object) -> None:
            if poison:  # the update of step 5's batch leaves NaN parameters
                poison.clear()
                with torch.no_grad():
                    next(model.parameters()).fill_(math.nan)

        ctx.optimizer.register_step_post_hook(after_step)

        def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, ...]) -> torch.Tensor:
            if bool((b[2] == 5 * 16).any()):
                poison.append(1)
            return torch.nn.functional.mse_loss(m(b[0]), b[1])

        with pytest.raises(TrainingAnomalyError, match="again"):
            _train_to(ctx, loss_fn, 10)
        assert ctx.rollbacks == 1
