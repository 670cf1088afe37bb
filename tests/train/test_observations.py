"""What the per-step metric records tell the scheduler's ``danlu`` policy besides the step
time: the exposed gradient synchronisation (``sync_time_s``) and the gradient-noise
statistics (``grad_sqr``, ``grad_var``). The DDP side runs in ``test_observations_ddp.py``."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train import accumulate
from danlu.train import step as step_module
from danlu.train.amp import Precision
from danlu.train.batch import AdaptiveBatch, BatchController, GradientNoiseScale
from danlu.train.distributed import Distributed
from danlu.train.step import StepEngine


def test_exposed_sync_time_is_the_last_micro_step_over_the_median_of_the_others() -> None:
    # odd number of no_sync micro-steps: the middle one; the outlier 3.0 does not count
    assert accumulate.exposed_sync_time([1.0, 3.0, 0.9, 1.5]) == pytest.approx(0.5)
    # even number: the mean of the two middle ones
    assert accumulate.exposed_sync_time([1.0, 2.0, 1.7]) == pytest.approx(0.2)
    # a last micro-step faster than the others (noise): 0, never negative
    assert accumulate.exposed_sync_time([1.0, 1.0, 0.8]) == 0.0
    # the last chunk has half the samples: the others' median counts half
    assert accumulate.exposed_sync_time([1.0, 1.4, 1.0, 0.8], last_ratio=0.5) == pytest.approx(0.3)
    assert accumulate.exposed_sync_time([2.0, 1.1], last_ratio=0.25) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="at least two micro-steps"):
        accumulate.exposed_sync_time([1.0])


class _LocalPeers(Distributed):
    """A world of 2 without a process group: the OOM agreement answers locally (the model
    is a plain module, so there is no all-reduce either)."""

    def any(self, flag: bool) -> bool:
        return flag

    def sum_floats(self, values: list[float]) -> list[float]:
        return list(values)


def _ddp_like_engine(micro: int) -> StepEngine:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dist = _LocalPeers(rank=0, world_size=2)
    return StepEngine(
        model,
        opt,
        dt.LRController(opt),
        BatchController(16, dist.world_size, micro),
        Precision("fp32", "cpu"),
        dist,
    )


@pytest.mark.parametrize(("micro", "chunks", "ratio"), [(4, 2, 1.0), (3, 3, 2 / 3)])
def test_the_engine_times_each_micro_step_and_scales_a_smaller_last_one(
    monkeypatch: pytest.MonkeyPatch, micro: int, chunks: int, ratio: float
) -> None:
    seen: list[tuple[int, float]] = []
    estimate = accumulate.exposed_sync_time

    def spy(durations: list[float], last_ratio: float = 1.0) -> float:
        seen.append((len(durations), last_ratio))
        return estimate(durations, last_ratio)

    monkeypatch.setattr(accumulate, "exposed_sync_time", spy)
    engine = _ddp_like_engine(micro)
    data = tiny_regression(8).tensors  # this rank's 8 samples

    # the engine's clock, advanced by the micro-steps themselves (no wall-clock timing)
    clock = SimpleNamespace(now=100.0)
    monkeypatch.setattr(step_module, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    calls = [0]

    def slow_last(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        clock.now += 0.01  # each micro-step's compute
        if calls[0] == chunks:  # the last micro-batch
            clock.now += 0.05  # stands for the exposed all-reduce
        return mse_loss(m, b)

    result = engine.step(data, slow_last)
    assert seen == [(chunks, ratio)]
    assert seen[0][1] == ratio  # exactly 1.0 for equal chunks
    # the last micro-step took 0.06 s; the others' median 0.01 s, scaled by the size ratio
    assert result.sync_time == pytest.approx(0.06 - 0.01 * ratio)


def test_one_micro_batch_under_ddp_has_no_sync_estimate() -> None:
    engine = _ddp_like_engine(8)
    result = engine.step(tiny_regression(8).tensors, mse_loss)
    assert result.sync_time is None


@pytest.mark.parametrize("micro", [16, 4])
def test_one_process_reports_zero_sync_time(micro: int) -> None:
    """Both the single-micro-batch fast path and the accumulating path: exactly 0.0."""
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model,
        opt,
        global_batch_size=16,
        micro_batch_size=micro,
        dataset_size=len(data),
        metrics_file=False,
        environ={},
    ) as ctx:
        results = [ctx.step(b, mse_loss) for b in ctx.batches(data)]
    assert [r.sync_time for r in results] == [0.0] * 4
    assert [h["sync_time_s"] for h in ctx.history] == [0.0] * 4
    assert [h["accumulation"] for h in ctx.history] == [16 // micro] * 4


def _gns_keys(record: dict[str, Any]) -> tuple[float, float] | None:
    if "grad_sqr" not in record and "grad_var" not in record:
        return None
    return record["grad_sqr"], record["grad_var"]


def test_records_carry_the_adaptive_batchs_gradient_noise_statistics() -> None:
    """Absent until the estimator has measured (a first step of a single micro-batch cannot
    measure), then the estimator's mu2 and sigma2 after each step."""
    data = tiny_regression(256)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    adaptive = AdaptiveBatch("gns", 32, max_batch=32)  # measures, never grows
    after: list[tuple[float, float] | None] = []
    with dt.init(
        model,
        opt,
        global_batch_size=32,
        micro_batch_size=8,
        adaptive_batch=adaptive,
        gns_every=1,
        metrics_file=False,
        environ={},
    ) as ctx:
        x, y = data.tensors
        ctx.step((x[:8], y[:8]), mse_loss)  # one micro-batch: nothing to compare
        after.append(None)
        for lo in range(8, 8 + 4 * 32, 32):
            ctx.step((x[lo : lo + 32], y[lo : lo + 32]), mse_loss)
            after.append((adaptive.gns.mu2, adaptive.gns.sigma2))
    assert adaptive.gns.count == 4
    got = [_gns_keys(h) for h in ctx.history]
    assert got == after
    assert all(v > 0 for pair in got[1:] if pair is not None for v in pair)
    assert ctx.history[-1]["accumulation"] == 4


class _Fixed(GradientNoiseScale):
    """An estimator that holds the given |G|^2 and tr(Sigma) from the start (before any
    measurement: they must not be reported yet) and after every measurement."""

    def __init__(self, mu2: float, sigma2: float) -> None:
        super().__init__()
        self.fixed = self.mu2, self.sigma2 = mu2, sigma2

    def update(self, small_sq: float, small_n: int, big_sq: float, big_n: int) -> None:
        self.mu2, self.sigma2 = self.fixed
        self.count += 1


@pytest.mark.parametrize(
    ("mu2", "sigma2", "reported"),
    [
        (2.0, 3.0, True),
        (0.0, 3.0, False),
        (2.0, -1.0, False),
        (math.nan, 3.0, False),
        (2.0, math.inf, False),
    ],
)
def test_the_engines_estimator_is_reported_only_when_finite_and_positive(
    mu2: float, sigma2: float, reported: bool
) -> None:
    """Without an adaptive batch the context reports the engine's estimator (``gns_every``
    on an engine that accumulates)."""
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model, opt, global_batch_size=16, micro_batch_size=8, metrics_file=False, environ={}
    ) as ctx:
        gns = _Fixed(mu2, sigma2)
        ctx.engine.gns, ctx.engine.gns_every = gns, 2
        x, y = data.tensors
        ctx.step((x[:8], y[:8]), mse_loss)  # step 0, one micro-batch: cannot measure
        ctx.step((x[8:24], y[8:24]), mse_loss)  # step 1: off the gns_every cadence
        ctx.step((x[24:40], y[24:40]), mse_loss)  # step 2: measured
        ctx.step((x[40:56], y[40:56]), mse_loss)  # step 3: not, the estimate stays
    assert gns.count == 1
    expected = (mu2, sigma2) if reported else None
    assert [_gns_keys(h) for h in ctx.history] == [None, None, expected, expected]


def test_records_carry_the_progress_of_the_epochs_asked_for() -> None:
    """Only once ``epochs(n)`` says how much there is: the share of its samples done."""
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model, opt, global_batch_size=16, dataset_size=len(data), metrics_file=False, environ={}
    ) as ctx:
        first = ctx.step(next(iter(ctx.batches(data))), mse_loss)
        assert first is not None and "progress" not in ctx.history[-1]
        for _ in ctx.epochs(2):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
    progress = [h["progress"] for h in ctx.history[1:]]
    assert progress == pytest.approx([k / 8 for k in range(2, 9)])


@pytest.mark.parametrize(("every_s", "reads"), [(3600.0, 1), (0.0, 4)])
def test_memory_bytes_is_read_at_most_once_per_interval(
    monkeypatch: pytest.MonkeyPatch, every_s: float, reads: int
) -> None:
    """On a GPU every record carries ``memory_bytes``, but the allocator's statistics (a
    fraction of a millisecond to build) are read at most once per ``MEMORY_READ_EVERY_S``;
    the records in between repeat the last reading."""
    from danlu.train import context as context_module

    readings = iter(range(100, 1000, 100))
    calls: list[object] = []

    def max_memory_allocated(device: object) -> int:
        calls.append(device)
        return next(readings)

    monkeypatch.setattr(context_module, "MEMORY_READ_EVERY_S", every_s)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", max_memory_allocated)
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model,
        opt,
        global_batch_size=16,
        dataset_size=len(data),
        metrics_file=False,
        environ={},
    ) as ctx:
        ctx.distributed.cuda = True  # a CPU model; only the record's memory field is at stake
        for b in ctx.batches(data):
            ctx.step(b, mse_loss)
    assert len(calls) == reads
    expected = [100] * 4 if reads == 1 else [100, 200, 300, 400]
    assert [h["memory_bytes"] for h in ctx.history] == expected


def test_a_records_lr_is_the_lr_its_optimizer_step_used() -> None:
    """The record's ``lr`` was read after the schedule advanced: the next step's LR (during
    a warmup, one step ahead; with a grad-norm-scaled LR, without that step's factor)."""
    data = tiny_regression(32)
    for kwargs in ({"warmup_steps": 4}, {"grad_norm_tau": 0.05}):
        model = tiny_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        used: list[float] = []

        def note(o: torch.optim.Optimizer, *_: Any, used: list[float] = used) -> None:
            used.append(float(o.param_groups[0]["lr"]))

        opt.register_step_pre_hook(note)
        with dt.init(
            model,
            opt,
            sched,
            global_batch_size=4,
            dataset_size=len(data),
            anomaly=None,
            metrics_file=False,
            progress=False,
            environ={},
            **kwargs,  # type: ignore[arg-type]
        ) as ctx:
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
        assert len(used) == 8
        assert [r["lr"] for r in ctx.history] == used, kwargs
