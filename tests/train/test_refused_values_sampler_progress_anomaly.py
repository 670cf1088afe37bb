"""Values of danlu.train that were taken as given: the ElasticSampler's dataset size (a bool
or a float failed only at the first epoch, or trained a dataset of one sample), Progress's
``every`` (``0`` silently became 1, a NaN never updated the bar), the anomaly guard's
``check_loss_spikes`` switch (``"no"`` is true) and a checkpoint's ``data_state`` that is no
dict (a raw ``AttributeError`` out of ``ctx.restore()``). Each is now refused naming it, and
every value that worked still does."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from train_helpers import (
    checkpoint_two_steps,
    damaged_checkpoints,
    mse_loss,
    small_context,
    tiny_regression,
)

from danlu.core.errors import ConfigError
from danlu.train.anomaly import AnomalyDetector
from danlu.train.data import ElasticSampler
from danlu.train.report import Progress
from danlu.train.state import IncompatibleCheckpointError, stored_data_state

NOT_COUNTS: list[object] = [2.5, 16.0, True, False, math.nan, "8", None]


# -- the sampler's dataset size ---------------------------------------------------------------
@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
def test_a_dataset_size_that_is_no_integer_is_refused_by_name(value: object) -> None:
    """``ElasticSampler(True)`` was a dataset of one sample, ``ElasticSampler(2.5)`` (or
    ``16.0``, which ``init``'s ``dataset_size`` refuses too) a bare TypeError at the first
    epoch, ``"8"`` a TypeError from the comparison."""
    with pytest.raises(ConfigError, match=r"ElasticSampler's n \(the dataset size\)"):
        ElasticSampler(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -3])
def test_a_dataset_size_below_one_is_still_refused(value: int) -> None:
    with pytest.raises(ConfigError, match=rf"dataset size\) must be >= 1 \(got {value}\)"):
        ElasticSampler(value)


def test_integer_dataset_sizes_still_work() -> None:
    assert ElasticSampler(1).permutation() == [0]
    sampler = ElasticSampler(np.int64(16), shuffle=False)  # type: ignore[arg-type]
    assert sampler.n == 16 and type(sampler.n) is int
    assert sampler.permutation() == list(range(16))
    assert sorted(ElasticSampler(10, seed=3).permutation()) == list(range(10))


# -- the progress bar's cadence ---------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -5, *NOT_COUNTS], ids=repr)
def test_a_progress_every_that_is_no_step_count_is_refused(value: object) -> None:
    """``every=0`` and ``-5`` were silently raised to 1; ``step % nan`` is NaN, which is true:
    the bar was never updated; ``2.5`` updated it on every fifth step."""
    with pytest.raises(ConfigError, match="Progress every"):
        Progress(None, enabled=False, every=value)  # type: ignore[arg-type]


def test_a_progress_every_that_is_a_step_count_is_taken() -> None:
    assert Progress(None, enabled=False).every == 10  # the documented default
    assert Progress(None, enabled=False, every=1).every == 1
    assert Progress(None, enabled=False, every=np.int64(3)).every == 3  # type: ignore[arg-type]


# -- the anomaly guard's switch ---------------------------------------------------------------
@pytest.mark.parametrize("value", ["no", "False", 2, -1, None, 0.0], ids=repr)
def test_a_check_loss_spikes_that_is_no_bool_is_refused_by_name(value: object) -> None:
    """``bool("no")`` is True: spike checks were on when asked off."""
    with pytest.raises(ConfigError, match="check_loss_spikes must be True or False"):
        AnomalyDetector(check_loss_spikes=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, False, np.True_, np.False_, 1, 0], ids=repr)
def test_a_check_loss_spikes_that_is_a_bool_is_taken(value: bool) -> None:
    detector = AnomalyDetector(check_loss_spikes=value, window=3, min_history=3)
    assert detector.check_loss_spikes is bool(value)
    for _ in range(3):
        assert detector.check(1.0, None) is None
    assert detector.check(1e6, None) == ("loss_spike" if value else None)


# -- a checkpoint's data_state ----------------------------------------------------------------
def _write(directory: Path, monkeypatch: pytest.MonkeyPatch, data_state: object) -> int:
    """Train two steps and checkpoint with ``data_state`` in place of the context's (a
    damaged checkpoint); return the step saved."""

    def damage(state: dict[str, Any]) -> None:
        state["data_state"] = data_state

    with damaged_checkpoints(monkeypatch, damage):
        return checkpoint_two_steps(directory)


@pytest.mark.parametrize("value", [[1, 2], "abc", 3.5, 0, []], ids=repr)
def test_a_data_state_that_is_no_dict_is_refused_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    """A list, a string or a number raised a bare AttributeError (``.get``); a falsy one
    (``0``, ``[]``) resumed silently from the start of the data."""
    step = _write(tmp_path, monkeypatch, value)
    with small_context(tmp_path) as ctx, pytest.raises(IncompatibleCheckpointError) as caught:
        ctx.restore()
    message = str(caught.value)
    assert f"cannot resume from the checkpoint of step {step} in {tmp_path}" in message
    assert f"its data_state {value!r} is not a dict (the checkpoint is damaged)" in message
    assert "resume=False" in message
    assert ctx.sampler is not None and (ctx.sampler.epoch, ctx.sampler.offset) == (0, 0)


def test_a_long_damaged_data_state_is_said_shortened() -> None:
    with pytest.raises(ValueError, match=r"its data_state \[0, 1, .*\.\.\. is not a dict") as err:
        stored_data_state(list(range(1000)))
    assert len(str(err.value)) < 120


def test_a_data_state_of_none_or_a_dict_is_still_read() -> None:
    assert stored_data_state(None) == {}
    held = {"rollbacks": 1}
    assert stored_data_state(held) is held


def test_a_whole_checkpoint_still_resumes_its_data_position(tmp_path: Path) -> None:
    data = tiny_regression(16)
    with small_context(tmp_path) as ctx:
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
            if ctx.step_num == 2:
                break
        ctx.save()
        assert ctx.sampler is not None
        position = (ctx.sampler.epoch, ctx.sampler.offset)
    with small_context(tmp_path) as resumed:
        assert resumed.restore()
        assert resumed.step_num == 2
        assert resumed.sampler is not None
        assert (resumed.sampler.epoch, resumed.sampler.offset) == position == (0, 8)
