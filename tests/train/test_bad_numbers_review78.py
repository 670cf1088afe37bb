"""Numbers that are NaN, infinite, negative or a bool where danlu.train wants a measurement, a
count or a rate: from a measurement, a checkpoint, a server's reply or an argument. Each used
to reach arithmetic unseen (a silently wrong result) or raise a raw exception; now it is left
out as no measurement, skipped as a damaged file, or refused naming the field."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from danlu.core.errors import ConfigError, DataError
from danlu.train.accumulate import exposed_sync_time
from danlu.train.anomaly import AnomalyDetector
from danlu.train.batch import AdaptiveBatch, BatchController, GradientNoiseScale, PowerSchedule
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.manager import MANIFEST
from danlu.train.data import ElasticSampler
from danlu.train.goodput import SAMPLES, SETTLE, GoodputTuner
from danlu.train.lr import LRController
from danlu.train.report import MetricsReporter
from danlu.train.scaling import lr_factor

STEP, SYNC = 0.2, 0.02


def _record(tuner: GoodputTuner, sync_time: float) -> None:
    """One step of 4 GPUs on one node, one shape throughout."""
    tuner.record(
        micro=32,
        accumulation=2,
        placement=(4,),
        step_time=STEP,
        sync_time=sync_time,
        grad_sqr=1.0,
        grad_var=64.0,
    )


# -- the goodput tuner's measurements -------------------------------------------------------
def test_a_nan_sync_time_is_no_sample_of_the_goodput_tuner() -> None:
    """``max(nan, 0.0)`` is NaN: the NaN sync went into the samples, their median was NaN
    and the whole window of samples was thrown away with it."""
    tuner = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    for _ in range(SETTLE + 2):
        _record(tuner, SYNC)
    _record(tuner, math.nan)
    for _ in range(SAMPLES - 3):
        _record(tuner, SYNC)
    assert tuner.tuner.sync_time((4,)) is None  # one good sample short: the NaN is none
    _record(tuner, SYNC)
    assert tuner.tuner.sync_time((4,)) == pytest.approx(SYNC)


@pytest.mark.parametrize("bad", [-0.01, math.inf])
def test_a_negative_or_infinite_sync_time_is_not_measured(bad: float) -> None:
    """A negative sync was clamped to 0 (the model read the sync as free), an infinite one to
    the whole step (no compute at all)."""
    tuner = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    for _ in range(SETTLE + SAMPLES):
        _record(tuner, bad)
    assert tuner.tuner.sync_time((4,)) is None
    assert tuner.choose((4,)) is None


def test_gradient_statistics_that_are_not_finite_are_not_kept() -> None:
    tuner = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    tuner.note_stats(1.0, math.inf)  # an overflowed estimate
    assert tuner.state_dict()["stats"] is None
    tuner.note_stats(1.0, 64.0)
    assert tuner.state_dict()["stats"] == (1.0, 1.0)
    restored = GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)
    restored.load_state_dict({"tuner": {}, "stats": [math.nan, 1.0]})  # a damaged checkpoint
    assert restored.state_dict()["stats"] is None


# -- checkpoints: best_mode and the manifest ---------------------------------------------------
@pytest.mark.parametrize("mode", ["MAX", " max ", "Max"])
def test_best_mode_is_read_in_any_case(tmp_path: Path, mode: str) -> None:
    manager = CheckpointManager(
        str(tmp_path), keep_last=1, keep_best=1, best_metric="acc", mode=mode
    )
    for step, acc in ((1, 0.9), (2, 0.1), (3, 0.2)):
        manager.save(step, {"w": torch.full((2,), float(step))}, {"acc": acc})
    assert manager.mode == "max"
    assert [c.step for c in manager.list_checkpoints()] == [1, 3]  # the highest acc kept


def test_init_takes_best_mode_in_any_case_and_names_the_spellings(tmp_path: Path) -> None:
    import danlu.train as dt

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dt.init(
        model,
        opt,
        global_batch_size=4,
        environ={},
        metrics_file=False,
        checkpoint_dir=str(tmp_path),
        best_mode="MAX",
    ) as ctx:
        assert ctx.checkpoints._manager.mode == "max"
    with pytest.raises(ConfigError, match=r"best_mode must be one of min, max.*'highest'"):
        dt.init(model, opt, global_batch_size=4, environ={}, best_mode="highest")
    with pytest.raises(ConfigError, match="mode must be one of min, max"):
        CheckpointManager(str(tmp_path), mode=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [True, False, -1])
def test_a_manifest_whose_file_size_is_a_bool_or_negative_is_skipped(
    tmp_path: Path, size: object
) -> None:
    """JSON ``true`` passed ``isinstance(size, int)``: the manifest counted as valid."""
    with CheckpointManager(str(tmp_path)) as manager:
        manager.save(1, {"w": torch.ones(2)})
        manager.save(2, {"w": torch.full((2,), 2.0)})
    manifest = sorted(p for p in tmp_path.iterdir() if p.name.startswith("ckpt-"))[-1] / MANIFEST
    data = json.loads(manifest.read_text())
    next(iter(data["files"].values()))["size"] = size
    manifest.write_text(json.dumps(data))
    with CheckpointManager(str(tmp_path)) as manager:
        assert [i.step for i in manager.list_checkpoints()] == [1]
        with pytest.raises(DataError, match="no size and checksum"):
            manager.load(manifest.parent.name)
        found = manager.load_latest()
    assert found is not None and found[0] == 1


# -- the gradient-noise estimate ---------------------------------------------------------------
def test_an_overflowing_gradient_noise_step_leaves_the_estimate_as_it_was() -> None:
    """Norms near the float range made ``inf - inf``: the estimate was NaN for good, and the
    AdaScale LR of the next batch change raised a raw SpecError on it."""
    gns = GradientNoiseScale()
    gns.update(4.0, 4, 2.0, 8)
    before = gns.state_dict()
    gns.update(1e308, 4, 1e308, 8)
    assert gns.state_dict() == before
    factor = lr_factor("adascale", 128, 64, sigma2=gns.sigma2, mu2=gns.mu2)
    assert math.isfinite(factor) and factor >= 1.0


@pytest.mark.parametrize("key", ["sigma2", "mu2"])
def test_a_gradient_noise_estimate_that_is_not_finite_is_not_resumed(key: str) -> None:
    """A NaN estimate from a checkpoint made the "gns" batch's target ``int(nan)``."""
    gns = GradientNoiseScale()
    state: dict[str, Any] = {"sigma2": 8.0, "mu2": 1.0, "count": 5, key: math.nan}
    gns.load_state_dict(state)
    assert gns.count == 0 and gns.noise_scale is None
    assert math.isfinite(gns.sigma2) and math.isfinite(gns.mu2)


# -- the anomaly detector and the LR ----------------------------------------------------------
def test_an_anomaly_window_with_an_infinity_resumes_without_it() -> None:
    """``inf.as_integer_ratio()`` raised a raw OverflowError, past the resume's handler."""
    detector = AnomalyDetector(min_history=2, window=4)
    detector.load_state_dict({"counts": {}, "grad": [1.0, math.inf, 1.0], "loss": [math.nan, 2.0]})
    assert detector.state_dict()["grad"] == [1.0, 1.0]
    assert detector.state_dict()["loss"] == [2.0]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("k", math.nan),  # every limit NaN: no spike ever found
        ("k", -1.0),
        ("rollback_lr_factor", math.nan),  # the LR after a rollback
        ("rollback_lr_factor", 0.0),
        ("rollback_lr_factor", True),
        ("window", math.nan),  # the window never dropped a value
        ("min_history", 2.5),
    ],
)
def test_an_anomaly_detector_refuses_rates_and_counts_that_cannot_work(
    name: str, value: object
) -> None:
    with pytest.raises(ConfigError, match=f"anomaly {name}"):
        AnomalyDetector(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"),
    [("scale", math.nan), ("decay", -0.5), ("inner", [math.inf]), ("steps", 2.5), ("steps", True)],
)
def test_an_lr_state_that_no_run_writes_is_refused_naming_the_field(
    key: str, value: object
) -> None:
    """A NaN scale from a damaged checkpoint became the LR of every later step."""
    model = torch.nn.Linear(2, 1)
    lr = LRController(torch.optim.SGD(model.parameters(), lr=0.1))
    state = lr.state_dict()
    state[key] = value
    with pytest.raises(ValueError, match=f"LR state's {key}"):
        lr.load_state_dict(state)
    assert lr.lr == pytest.approx(0.1) and lr.scale == 1.0  # nothing half-loaded


def test_a_reply_whose_batch_size_is_true_is_no_batch() -> None:
    """``true`` is an int to Python: the job was rebatched to one sample a step."""
    reporter = MetricsReporter()
    reporter._note_reply(b'{"accepted": 1, "batch_size": true}')
    assert reporter.scheduler_batch is None
    reporter._note_reply(b'{"accepted": 1, "batch_size": 64}')
    assert reporter.scheduler_batch == 64


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("oom_cap", 0),  # the micro-batch became 0: a raw ZeroDivisionError
        ("micro_cap", -4),
        ("global_batch", -8),  # trained one sample a step
        ("global_batch", True),
        ("oom_count", -1),
        ("base_global_batch", 2.5),
    ],
)
def test_a_batch_state_that_no_run_writes_is_refused_naming_the_field(
    key: str, value: object
) -> None:
    batch = BatchController(16, world_size=2, micro=4)
    state = batch.state_dict()
    state[key] = value
    before = batch.state_dict()
    with pytest.raises(ValueError, match=f"batch state's {key}"):
        batch.load_state_dict(state)
    assert batch.state_dict() == before  # nothing half-loaded


def test_a_batch_state_of_whole_floats_still_resumes() -> None:
    batch = BatchController(16, world_size=2, micro=4)
    state = {
        k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in BatchController(32, world_size=2, micro=4).state_dict().items()
    }
    batch.load_state_dict(state)
    assert batch.global_batch == 32 and type(batch.global_batch) is int


# -- the adaptive batch's arguments and the sync measurement ----------------------------------
def test_a_micro_step_that_was_not_timed_makes_the_sync_unknown_not_free() -> None:
    """``max(0.0, nan)`` is 0.0: the goodput tuner was told the sync cost nothing."""
    assert math.isnan(exposed_sync_time([0.1, math.nan]))
    assert math.isnan(exposed_sync_time([math.inf, 0.1, 0.2]))
    assert exposed_sync_time([0.1, 0.1, 0.15]) == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"every": math.nan}, "every"),  # step % nan is nan: never adapted
        ({"every": 2.5}, "every"),
        ({"b0": 0}, "b0"),
        ({"b0": True}, "b0"),
        ({"alpha": math.nan}, "alpha"),  # int(nan) at the first step
        ({"total_steps": 0}, "total_steps"),
        ({"max_batch": math.nan}, "max_batch"),
        ({"multiple": 2.5}, "multiple"),  # fractional batches
    ],
)
def test_adaptive_batch_arguments_that_cannot_work_are_refused_by_name(
    kwargs: dict[str, Any], name: str
) -> None:
    arguments: dict[str, Any] = {"mode": "schedule", "b0": 16, "total_steps": 10, **kwargs}
    with pytest.raises(ConfigError, match=name):
        AdaptiveBatch(**arguments)


def test_adaptive_batch_modes_are_read_in_any_case() -> None:
    assert AdaptiveBatch(" GNS ", 16).mode == "gns"
    with pytest.raises(ConfigError, match="schedule, gns, goodput"):
        AdaptiveBatch(None, 16)  # type: ignore[arg-type]


def test_a_schedule_past_the_float_range_stays_at_its_largest_batch() -> None:
    """``(1 + t / T) ** alpha`` beyond the float range raised a raw OverflowError mid-run."""
    schedule = PowerSchedule(16, total_steps=1, alpha=400.0, max_batch=1024)
    assert schedule(10**6) == 1024


@pytest.mark.parametrize("beta", [math.nan, 1.0, -0.1, True])
def test_a_gradient_noise_average_that_cannot_work_is_refused(beta: float) -> None:
    with pytest.raises(ConfigError, match="beta"):
        GradientNoiseScale(beta=beta)


@pytest.mark.parametrize(
    ("key", "value"), [("offset", -8), ("offset", 65), ("epoch", -1), ("epoch", 1.5)]
)
def test_a_data_position_that_no_run_writes_is_refused_naming_the_field(
    key: str, value: object
) -> None:
    """A negative offset read the epoch's last samples again; one beyond the dataset ended
    the epoch unseen."""
    sampler = ElasticSampler(64)
    state = ElasticSampler(64).state_dict()
    state[key] = value
    with pytest.raises(ConfigError, match=f"sampler state's {key}.*fresh checkpoint_dir"):
        sampler.load_state_dict(state)
    assert (sampler.epoch, sampler.offset) == (0, 0)
