"""Counts and settings of danlu.train that were read with a plain ``int()`` or taken as given:
a checkpoint's counters (the context's, the training state's step, the sampler's position,
the anomaly counts) and the arguments of MetricsReporter and Preemption. A damaged value
(``"abc"``, ``2.5``, ``true``, a negative number or a NaN) raised a bare ValueError or
TypeError, or was silently truncated; now it is refused naming the field, and every value a
run writes (a whole float ``3.0`` too) is still read."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from train_helpers import checkpoint_two_steps, small_context

from danlu.core.errors import ConfigError
from danlu.train.anomaly import AnomalyDetector
from danlu.train.context import TrainContext
from danlu.train.data import ElasticSampler
from danlu.train.preempt import Preemption
from danlu.train.report import MetricsReporter
from danlu.train.state import (
    Counters,
    IncompatibleCheckpointError,
    capture_state,
    check_compatible,
    restore_state,
    stored_counters,
)

DAMAGED: list[object] = ["abc", 2.5, True, -1, math.nan]
ABSENT = object()
"""A counter left out of a checkpoint (see ``_write``)."""


# -- the context's counters -------------------------------------------------------------------


def _write(directory: Path, monkeypatch: pytest.MonkeyPatch, **counters: object) -> int:
    """Train two steps and checkpoint with ``counters`` in the data state (one given
    :data:`ABSENT` is left out: an older checkpoint's); return the step saved."""
    real = TrainContext.data_state

    def written(self: TrainContext) -> dict[str, Any]:
        state = real(self)
        for name, value in counters.items():
            if value is ABSENT:
                state.pop(name)
            else:
                state[name] = value
        return state

    monkeypatch.setattr(TrainContext, "data_state", written)
    step = checkpoint_two_steps(directory)
    monkeypatch.setattr(TrainContext, "data_state", real)
    return step


@pytest.mark.parametrize("value", DAMAGED, ids=repr)
@pytest.mark.parametrize("name", ["skipped_steps", "rollbacks", "engine_steps", "scheduler_batch"])
def test_a_damaged_counter_of_the_context_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: object
) -> None:
    """``int("abc")`` raised a bare ValueError out of ``ctx.restore()``, ``int(2.5)`` resumed
    2 and ``int(True)`` 1, a negative count was taken as it was."""
    _write(tmp_path, monkeypatch, **{name: value})
    with small_context(tmp_path) as ctx, pytest.raises(IncompatibleCheckpointError) as caught:
        ctx.restore()
    message = str(caught.value)
    assert f"its {name} {value!r} is not a whole number" in message
    assert "damaged" in message and "resume=False" in message
    assert (ctx.rollbacks, ctx.engine.step_count, ctx.precision.skipped_steps) == (0, 0, 0)


def test_a_scheduler_batch_of_zero_is_refused() -> None:
    """A global batch of 0 is no batch the scheduler sets."""
    with pytest.raises(ValueError, match="scheduler_batch 0 is not a whole number >= 1"):
        stored_counters({"scheduler_batch": 0}, Counters(0, 0, 0, None))


def test_counters_a_run_writes_still_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = _write(
        tmp_path, monkeypatch, skipped_steps=3.0, rollbacks=2, engine_steps=7, scheduler_batch=8
    )
    with small_context(tmp_path) as ctx:
        assert ctx.restore()
        assert (ctx.precision.skipped_steps, ctx.rollbacks, ctx.engine.step_count) == (3, 2, 7)
        assert type(ctx.precision.skipped_steps) is int and ctx._scheduler_batch == 8
        assert ctx.step_num == step


def test_an_older_checkpoint_without_the_counters_keeps_the_live_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("skipped_steps", "rollbacks", "engine_steps", "scheduler_batch")
    step = _write(tmp_path, monkeypatch, **dict.fromkeys(names, ABSENT))
    with small_context(tmp_path) as ctx:
        ctx.rollbacks, ctx._scheduler_batch = 1, 12
        assert ctx.restore()
        assert (ctx.precision.skipped_steps, ctx.rollbacks, ctx.engine.step_count) == (0, 1, step)
        assert ctx._scheduler_batch == 12


def test_a_scheduler_batch_of_none_resumes_as_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, monkeypatch)  # a run the scheduler never rebatched: None
    with small_context(tmp_path) as ctx:
        ctx._scheduler_batch = 12
        assert ctx.restore()
        assert ctx._scheduler_batch is None


# -- the training state's step and its batch --------------------------------------------------
@pytest.mark.parametrize("value", DAMAGED, ids=repr)
def test_a_damaged_step_of_a_training_state_is_refused_before_loading(value: object) -> None:
    model = torch.nn.Linear(2, 1)
    state = capture_state(torch.nn.Linear(2, 1))
    state["step"] = value
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(IncompatibleCheckpointError, match="training state's step"):
        restore_state(state, model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_whole_float_step_still_resumes() -> None:
    model = torch.nn.Linear(2, 1)
    state = capture_state(model, step=5)
    state["step"] = 5.0
    info = restore_state(state, model)
    assert info.step == 5 and type(info.step) is int


@pytest.mark.parametrize("value", ["abc", math.nan, True, [8]], ids=repr)
def test_a_damaged_batch_size_of_a_state_is_left_to_the_batch_states_check(
    value: object, caplog: pytest.LogCaptureFixture
) -> None:
    """``int("abc")`` in the check of another global batch raised a bare ValueError before
    the batch state's load could name the field; ``true`` was said to be a batch of 1."""
    model = torch.nn.Linear(2, 1)
    state = capture_state(model, data_state={"batch": {"base_global_batch": value}})
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        check_compatible(state, model, global_batch_size=8)  # no error here
    assert "global_batch_size" not in caplog.text


def test_another_global_batch_of_a_state_is_still_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = torch.nn.Linear(2, 1)
    state = capture_state(model, data_state={"batch": {"base_global_batch": 16.0}})
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        check_compatible(state, model, global_batch_size=8)
    assert "global_batch_size=8 differs from the checkpoint's global_batch_size=16" in caplog.text


# -- the sampler's position -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", "abc"),  # a bare ValueError
        ("n", True),  # "the dataset differs: dataset_size=True"
        ("n", 64.5),  # read as 64
        ("offset", "abc"),
        ("offset", True),  # read as 1
        ("offset", 8.5),
        ("epoch", math.nan),  # a bare ValueError in the message of another shuffle
        ("epoch", "1"),
        ("shuffle", "False"),  # bool("False") is True
        ("shuffle", None),
    ],
    ids=repr,
)
def test_a_damaged_sampler_state_is_a_resume_problem_naming_the_field(
    key: str, value: object
) -> None:
    sampler = ElasticSampler(64, shuffle=True)
    state = {**ElasticSampler(64).state_dict(), "offset": 8, "epoch": 1, key: value}
    problem = sampler.resume_problem(state)
    assert problem is not None and f"sampler state's {key} {value!r}" in problem
    assert "damaged" in problem and "fresh checkpoint_dir" in problem
    with pytest.raises(ConfigError, match=f"sampler state's {key}"):
        sampler.load_state_dict(state)
    assert (sampler.epoch, sampler.offset) == (0, 0)
    model = torch.nn.Linear(2, 1)
    saved = capture_state(model, data_state={"sampler": state})
    with pytest.raises(IncompatibleCheckpointError, match=f"sampler state's {key}"):
        check_compatible(saved, model, sampler=sampler)


@pytest.mark.parametrize("value", ["abc", 2.5, True, math.nan], ids=repr)
def test_a_damaged_sampler_seed_is_refused(value: object) -> None:
    """``int(2.5)`` resumed seed 2, another order than the run's."""
    sampler = ElasticSampler(64)
    state = {**ElasticSampler(64).state_dict(), "seed": value}
    with pytest.raises(ConfigError, match="sampler state's seed"):
        sampler.load_state_dict(state)
    assert sampler.seed == 0


def test_a_sampler_state_of_whole_floats_and_any_seed_still_resumes() -> None:
    sampler = ElasticSampler(64, shuffle=False)
    state = {"n": 64.0, "epoch": 2.0, "offset": 8.0, "seed": -3.0, "shuffle": 0}
    assert sampler.resume_problem(state) is None
    sampler.load_state_dict(state)
    assert (sampler.epoch, sampler.offset, sampler.seed) == (2, 8, -3)
    assert type(sampler.offset) is int and type(sampler.seed) is int
    older = ElasticSampler(64, shuffle=True)  # a state written before shuffle was kept
    older.load_state_dict({"n": 64, "epoch": 0, "offset": 8, "seed": 0})
    assert older.offset == 8


def test_another_dataset_size_is_still_said_as_such() -> None:
    problem = ElasticSampler(64).resume_problem({"n": 32, "epoch": 0, "offset": 8})
    assert problem is not None and "dataset_size=32 in the checkpoint" in problem


# -- the anomaly counts -----------------------------------------------------------------------
@pytest.mark.parametrize("value", DAMAGED, ids=repr)
def test_a_damaged_anomaly_count_is_refused_naming_its_kind(value: object) -> None:
    """``int(True)`` counted one anomaly, a negative count lowered the total reported."""
    detector = AnomalyDetector()
    detector.count("zero_grad")
    with pytest.raises(ValueError, match="anomaly state's count of grad_spike"):
        detector.load_state_dict({"counts": {"zero_grad": 1, "grad_spike": value}})
    assert detector.counts == {"zero_grad": 1} and detector.total == 1  # nothing loaded


def test_anomaly_counts_a_run_writes_still_resume() -> None:
    detector = AnomalyDetector()
    detector.load_state_dict({"counts": {"zero_grad": 2, "grad_spike": 3.0}})
    assert detector.counts == {"zero_grad": 2, "grad_spike": 3} and detector.total == 5
    assert type(detector.counts["grad_spike"]) is int


# -- the MetricsReporter's and Preemption's arguments -----------------------------------------
@pytest.mark.parametrize(
    "value", [math.nan, -1.0, 0, 0.0, math.inf, True, "2", None, 10**400], ids=repr
)
@pytest.mark.parametrize("name", ["interval_s", "timeout_s", "close_timeout_s"])
def test_reporter_seconds_that_cannot_work_are_refused_by_name(name: str, value: object) -> None:
    """A zero, negative or NaN interval spun the shipping thread; an infinite one (or an
    infinite timeout) raised OverflowError in it; ``True`` was one second."""
    with pytest.raises(ConfigError, match=name):
        MetricsReporter(url="http://127.0.0.1:9/m", **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 2.5, True, "10", math.nan, None], ids=repr)
def test_a_reporter_max_pending_that_is_no_count_is_refused(value: object) -> None:
    """A negative ``max_pending`` counted more records dropped than there were."""
    with pytest.raises(ConfigError, match="max_pending"):
        MetricsReporter(url="http://127.0.0.1:9/m", max_pending=value)  # type: ignore[arg-type]


def test_reporter_arguments_that_work_are_still_taken() -> None:
    reporter = MetricsReporter(
        url="http://127.0.0.1:9/m", interval_s=3600, timeout_s=0.5, close_timeout_s=10.0
    )
    assert (reporter.interval_s, reporter.timeout_s, reporter.close_timeout_s) == (3600, 0.5, 10)
    assert MetricsReporter(interval_s=np.float64(0.01), max_pending=0).max_pending == 0
    assert MetricsReporter(max_pending=np.int64(4)).max_pending == 4  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [2.5, math.nan, True, 0, -1, "2", None], ids=repr)
def test_a_preemption_check_every_that_is_no_step_count_is_refused(value: object) -> None:
    """``step % nan`` is NaN, which is true: a distributed run never agreed on a stop."""
    with pytest.raises(ConfigError, match="check_every"):
        Preemption(install=False, check_every=value)  # type: ignore[arg-type]


def test_a_preemption_check_every_that_is_a_count_is_taken() -> None:
    assert Preemption(install=False).check_every == 1
    assert Preemption(install=False, check_every=5).check_every == 5
    assert Preemption(install=False, check_every=np.int64(3)).check_every == 3  # type: ignore[arg-type]
