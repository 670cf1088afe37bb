"""The goodput-adaptive batch (``AdaptiveBatch("goodput", ...)``): danlu.train feeds its own
step times and gradient noise to the tuner the simulator's adaptive jobs run, takes the batch
it picks every ``every`` steps, reports ``adaptive`` and keeps what it measured across a
restart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.estimate.adapt import BatchLimits
from danlu.train.batch import AdaptiveBatch
from danlu.train.goodput import SAMPLES, SETTLE, GoodputTuner, placement_of

ALPHA, BETA, SYNC = 0.05, 0.001, 0.02  # compute(b) = ALPHA + BETA * b per micro-batch


def test_placement_is_gpus_per_node() -> None:
    assert placement_of(1, 1) == (1,)
    assert placement_of(4, 4) == (4,)
    assert placement_of(8, 4) == (4, 4)
    assert placement_of(6, 4) == (4, 2)
    assert placement_of(2, 1) == (1, 1)


def _feed(tuner: GoodputTuner, micro: int, accumulation: int, var: float, sqr: float = 1.0) -> None:
    """SETTLE + SAMPLES steps of one shape on 4 GPUs of one node, exactly on the line."""
    step = accumulation * (ALPHA + BETA * micro) + SYNC
    for _ in range(SETTLE + SAMPLES):
        tuner.record(
            micro=micro,
            accumulation=accumulation,
            placement=(4,),
            step_time=step,
            sync_time=SYNC,
            grad_sqr=sqr,
            grad_var=var,
        )


def _true_goodput(batch: int, var0: float, sqr: float = 1.0) -> float:
    """Goodput of ``batch`` on 4 GPUs, micro-batches of at most 128 (fewest that fit)."""
    local = math.ceil(batch / 4)
    accum = math.ceil(local / 128)
    micro = math.ceil(local / accum)
    executed = 4 * micro * accum
    gain = (var0 + sqr) / (var0 / (executed / 64) + sqr)
    return gain / (accum * (ALPHA + BETA * micro) + SYNC)


def test_the_tuner_picks_the_goodput_optimum_from_its_measurements() -> None:
    tuner = GoodputTuner(init_batch=64, max_batch=2048, max_micro=128)
    assert tuner.choose((4,)) is None  # nothing measured
    _feed(tuner, 32, 1, var=64 * 4.0)
    _feed(tuner, 64, 1, var=64 * 4.0)
    _feed(tuner, 128, 2, var=64 * 4.0)
    assert tuner.choose((2, 2)) is None  # sync across two nodes never measured
    chosen = tuner.choose((4,))
    assert chosen is not None and 64 <= chosen <= 2048
    best = max(_true_goodput(b, 4.0) for b in range(64, 2049))
    assert _true_goodput(chosen, 4.0) == pytest.approx(best, rel=1e-9)
    assert chosen > 64  # noise scale 256: the tuned batch is not the optimum here

    quiet = GoodputTuner(init_batch=64, max_batch=2048, max_micro=128)
    for micro, accumulation in ((32, 1), (64, 1), (128, 2)):
        _feed(quiet, micro, accumulation, var=64 * 0.05)  # 80 x less noise
    calm = quiet.choose((4,))
    assert calm is not None and calm < chosen  # less noise: a smaller batch is better
    assert _true_goodput(calm, 0.05) == pytest.approx(
        max(_true_goodput(b, 0.05) for b in range(64, 2049)), rel=1e-9
    )


def test_the_tuner_waits_for_settled_samples_and_gradient_noise() -> None:
    tuner = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    for _ in range(SETTLE + SAMPLES - 1):
        tuner.record(
            micro=64,
            accumulation=1,
            placement=(4,),
            step_time=0.2,
            sync_time=SYNC,
            grad_sqr=1.0,
            grad_var=64.0,
        )
    assert tuner.choose((4,)) is None  # one sample short
    blind = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    _feed(blind, 64, 1, var=0.0)  # no usable gradient noise yet
    assert blind.choose((4,)) is None
    unsynced = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    for _ in range(SETTLE + SAMPLES):
        unsynced.record(
            micro=64,
            accumulation=1,
            placement=(4,),
            step_time=0.2,
            sync_time=None,  # several GPUs, sync not measured: no measurement
            grad_sqr=1.0,
            grad_var=64.0,
        )
    assert unsynced.choose((4,)) is None


def test_steps_of_one_micro_batch_are_measured_against_the_probed_sync() -> None:
    tuner = GoodputTuner(init_batch=64, max_batch=2048, max_micro=128)
    _feed(tuner, 32, 2, var=64 * 4.0)  # probe steps: two micro-batches expose the sync
    assert tuner.tuner.sync_time((4,)) == pytest.approx(SYNC)
    for _ in range(SETTLE + SAMPLES):  # one micro-batch: no sync of its own
        tuner.record(
            micro=128,
            accumulation=1,
            placement=(4,),
            step_time=ALPHA + BETA * 128 + SYNC,
            sync_time=None,
            grad_sqr=1.0,
            grad_var=64 * 4.0,
        )
    chosen = tuner.choose((4,))  # two compute points, exactly on the line: the optimum
    assert chosen is not None
    best = max(_true_goodput(b, 4.0) for b in range(64, 2049))
    assert _true_goodput(chosen, 4.0) == pytest.approx(best, rel=1e-9)


def test_what_the_tuner_measured_survives_a_round_trip_and_a_smaller_micro_cap() -> None:
    tuner = GoodputTuner(init_batch=64, max_batch=2048, max_micro=128)
    for micro, accumulation in ((32, 1), (128, 1)):
        _feed(tuner, micro, accumulation, var=64 * 4.0)
    chosen = tuner.choose((4,))
    again = GoodputTuner(init_batch=64, max_batch=2048, max_micro=128)
    again.load_state_dict(json.loads(json.dumps(tuner.state_dict())))  # plain values
    assert again.choose((4,)) == chosen
    tuner.cap_micro(16)  # after an OOM: the measurements stay, the limit shrinks
    assert tuner.tuner.limits.max_local == 16
    assert tuner.choose((4,)) is not None


def test_bad_limits_and_modes_are_named() -> None:
    with pytest.raises(ConfigError, match="init_batch <= max_batch"):
        BatchLimits(128, 64)
    with pytest.raises(ConfigError, match="goodput"):
        AdaptiveBatch("fastest", 32)
    with pytest.raises(ConfigError, match="every"):
        AdaptiveBatch("goodput", 32, every=0)


def test_a_run_takes_the_tuner_s_batch_reports_adaptive_and_keeps_its_measurements(
    tmp_path: Path,
) -> None:
    data = tiny_regression(n=4096)
    metrics = tmp_path / "metrics.jsonl"

    def make() -> dt.TrainContext:
        model = tiny_model()
        return dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=32,
            micro_batch_size=8,  # accumulation: the gradient noise is measured
            adaptive_batch=AdaptiveBatch("goodput", 32, max_batch=512, every=10),
            lr_scaling="adascale",
            dataset_size=len(data),
            checkpoint_dir=str(tmp_path / "ckpt"),
            metrics_file=str(metrics),
            progress=False,
        )

    decided = 0
    with make() as ctx:
        assert ctx.goodput is not None
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num % 10 == 0:
                    pick = ctx.goodput.choose((1,))
                    if pick is not None:
                        decided += 1
                        assert ctx.batch.global_batch == pick  # the tuner's pick, taken
                        assert 32 <= pick <= 512
                        assert ctx.batch.micro == min(8, pick)  # the micro cap holds
                if ctx.step_num >= 60:
                    break
            break
        assert decided >= 2
        ctx.save()
        kept = ctx.goodput.choose((1,))
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert records and all(r["adaptive"] == 1 for r in records)
    with make() as resumed:  # the measurements come back with the checkpoint
        assert resumed.goodput is not None and resumed.goodput.choose((1,)) == kept


def _probe_run(
    data: torch.utils.data.TensorDataset,
    steps: int,
    adaptive: AdaptiveBatch | None,
    save: bool = False,
    **kw: object,
) -> tuple[torch.nn.Module, list[dict[str, object]], int]:
    """Steps of batch 32 in one micro-batch on one process (no accumulation) until step
    ``steps``; ``save``: checkpoint at the end. Returns the model, the records and the step
    it started from (a resumed run: its checkpoint's)."""
    model = tiny_model()
    x, y = data.tensors
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        global_batch_size=32,
        adaptive_batch=adaptive,
        metrics_file=False,
        progress=False,
        environ={},
        **kw,  # type: ignore[arg-type]
    ) as ctx:
        started = ctx.step_num
        while ctx.step_num < steps:
            lo = 32 * ctx.step_num
            ctx.step((x[lo : lo + 32], y[lo : lo + 32]), mse_loss)
        if save:
            ctx.save()
        return model, ctx.history, started


def test_a_single_gpu_that_never_accumulates_probes_for_the_gradient_noise() -> None:
    """Every gns_every-th step runs as two half micro-batches (``probe: 1``): the noise is
    measured, the goodput tuner can choose, and the training is the same within rounding."""
    data = tiny_regression(n=32 * 60)
    adaptive = AdaptiveBatch("goodput", 32, max_batch=32, every=10)  # measures, stays at 32
    model, history, _ = _probe_run(data, 60, adaptive, gns_every=10)
    probes = [r["step"] for r in history if r.get("probe") == 1]
    assert probes == [1, 11, 21, 31, 41, 51]  # engine steps 0, 10, ...: records count from 1
    assert all(
        (r["micro_batch"], r["accumulation"]) == ((16, 2) if r.get("probe") else (32, 1))
        for r in history
    )
    assert adaptive.gns is not None and adaptive.gns.count == len(probes)
    assert history[-1]["grad_sqr"] == adaptive.gns.mu2 > 0
    plain, _, _ = _probe_run(data, 60, None)
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_probes_land_on_the_same_steps_after_a_resume(tmp_path: Path) -> None:
    """Probe steps follow the engine's step count, which the checkpoint keeps: a run resumed
    half way is bit-identical to one that never stopped."""
    data = tiny_regression(n=32 * 30)
    straight, _, _ = _probe_run(data, 30, AdaptiveBatch("gns", 32, max_batch=32), gns_every=7)
    ckpt = str(tmp_path / "ckpt")
    _probe_run(
        data, 15, AdaptiveBatch("gns", 32, max_batch=32), True, gns_every=7, checkpoint_dir=ckpt
    )
    resumed, history, started = _probe_run(
        data, 30, AdaptiveBatch("gns", 32, max_batch=32), gns_every=7, checkpoint_dir=ckpt
    )
    assert started == 15  # it resumed from the checkpoint
    assert [r["step"] for r in history if r.get("probe") == 1] == [1, 8, 15, 22, 29]
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("mode", "every"), [("gns", 1), ("gns", 5), ("schedule", 4)])
def test_the_gradient_noise_estimate_is_resumed_with_the_run(
    tmp_path: Path, mode: str, every: int
) -> None:
    """The noise estimate steers a ``"gns"`` batch and AdaScale's LR; it was not in the
    checkpoint, so a resumed run chose other batches (and steps) than one that never
    stopped. Found by resuming random configurations of ``fit`` half way."""

    def run(steps: int, checkpoint_dir: str | None) -> tuple[torch.nn.Module, int]:
        torch.manual_seed(0)
        model = tiny_model()
        ctx = dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
            tiny_regression(n=67),
            mse_loss,
            epochs=2,
            global_batch_size=2,
            micro_batch_size=1,
            max_steps=steps,
            adaptive_batch=AdaptiveBatch(mode, 2, total_steps=40, max_batch=64),
            gns_every=2,
            lr_scaling="adascale",
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_steps=every,
            metrics_file=False,
            progress=False,
            environ={},
        )
        return model, ctx.step_num

    straight, steps = run(30, None)
    ckpt = str(tmp_path / "ckpt")
    run(12, ckpt)
    resumed, resumed_steps = run(30, ckpt)
    assert resumed_steps == steps
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_no_probe_splits_off_a_single_sample_that_batch_norm_cannot_train_on() -> None:
    """A local batch of 3 made probe parts of 2 and 1: a model with batch normalisation
    raised "Expected more than 1 value per channel" on the probe step. Below 4 there is no
    probe; from 4 on the parts hold 2 samples at least."""
    torch.manual_seed(0)
    x, y = torch.randn(400, 4), torch.randn(400, 1)

    def run(batch: int) -> list[dict[str, object]]:
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
        )
        with dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=batch,
            adaptive_batch=AdaptiveBatch("gns", batch, max_batch=batch),
            gns_every=2,
            metrics_file=False,
            progress=False,
            environ={},
        ) as ctx:
            while ctx.step_num < 8:
                lo = batch * ctx.step_num
                ctx.step((x[lo : lo + batch], y[lo : lo + batch]), mse_loss)
            return ctx.history

    assert all(not r.get("probe") for r in run(3))
    probes = [r for r in run(4) if r.get("probe") == 1]
    assert len(probes) == 4 and all(r["micro_batch"] == 2 for r in probes)
