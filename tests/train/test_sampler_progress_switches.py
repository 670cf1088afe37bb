"""The ElasticSampler's ``shuffle``, ``drop_last`` and ``seed`` and Progress's ``enabled`` were
taken as given: ``shuffle="no"`` shuffled (``bool("no")`` is True), ``drop_last="False"``
dropped the last batch, a seed of ``2.5`` failed at the first epoch inside
``torch.Generator.manual_seed``, and ``Progress(enabled="no")`` started a bar. Each is now
checked when it is given (a switch is a bool or 0/1, as ``check_loss_spikes``; a seed a whole
number of any sign), a ConfigError naming the argument otherwise."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.checks import flag_argument, whole_argument
from danlu.train.data import ElasticSampler
from danlu.train.report import Progress

NOT_SWITCHES: list[object] = ["no", "False", "", 2, -1, 0.0, 1.0, math.nan, [True]]
SWITCHES: list[object] = [True, False, np.True_, np.False_, 1, 0, np.int64(1)]


@pytest.mark.parametrize("name", ["shuffle", "drop_last"])
@pytest.mark.parametrize("value", NOT_SWITCHES, ids=repr)
def test_a_sampler_switch_that_is_no_bool_is_refused_by_name(name: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        ElasticSampler(16, **{name: value})  # type: ignore[arg-type]
    assert str(caught.value) == (f"ElasticSampler's {name} must be True or False (got {value!r})")


@pytest.mark.parametrize("value", SWITCHES, ids=repr)
def test_a_sampler_switch_that_is_a_bool_is_taken_as_one(value: object) -> None:
    sampler = ElasticSampler(16, shuffle=value, drop_last=value)  # type: ignore[arg-type]
    assert sampler.shuffle is bool(value) and sampler.drop_last is bool(value)
    assert (sampler.permutation() == list(range(16))) is not bool(value)
    assert sampler.state_dict()["shuffle"] is bool(value)


def _init(tmp_path: Path, **arguments: Any) -> None:
    """``dt.init`` of a one-layer model with ``arguments`` (nothing resumed or written)."""
    model = torch.nn.Linear(2, 1)
    dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=4,
        checkpoint_dir=str(tmp_path),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
        **arguments,
    )


def test_shuffle_no_is_refused_through_init(tmp_path: Path) -> None:
    """Through ``init`` too: ``shuffle="no"`` shuffled every epoch."""
    with pytest.raises(ConfigError, match="shuffle must be True or False"):
        _init(tmp_path, dataset_size=16, shuffle="no")


@pytest.mark.parametrize("value", [2.5, 3.0, "7", True, None, math.nan], ids=repr)
def test_a_sampler_seed_that_is_no_whole_number_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        ElasticSampler(16, seed=value)  # type: ignore[arg-type]
    assert str(caught.value) == f"ElasticSampler's seed must be an integer (got {value!r})"


@pytest.mark.parametrize("value", [0, 7, -3, np.int64(5)], ids=repr)
def test_a_whole_seed_of_any_sign_is_taken(value: int) -> None:
    sampler = ElasticSampler(16, seed=value)
    assert sampler.seed == value and type(sampler.seed) is int
    assert sorted(sampler.permutation()) == list(range(16))


@pytest.mark.parametrize("value", NOT_SWITCHES, ids=repr)
def test_a_progress_enabled_that_is_no_bool_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Progress(None, enabled=value)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("Progress enabled (init's progress")
    assert f"must be True or False (got {value!r})" in message


@pytest.mark.parametrize("value", [False, np.False_, 0], ids=repr)
def test_a_progress_switched_off_is_off(value: object) -> None:
    progress = Progress(None, enabled=value)  # type: ignore[arg-type]
    assert progress.enabled is False
    progress.update(10, {"loss": 1.0})
    progress.close()


def test_the_check_helpers_say_the_argument() -> None:
    assert flag_argument("x", np.True_) is True
    with pytest.raises(ConfigError, match=r"^x must be True or False \(got 'yes'\)$"):
        flag_argument("x", "yes")
    assert whole_argument("seed", -4, None) == -4
    with pytest.raises(ConfigError, match=r"^n must be >= 1 \(got 0\)$"):
        whole_argument("n", 0, 1)


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [
        ("shuffle", "no", "shuffle must be True or False (got 'no')"),
        ("drop_last", "yes", "drop_last must be True or False (got 'yes')"),
        ("seed", 2.5, "seed must be an integer (got 2.5)"),
    ],
)
def test_the_sampler_arguments_are_checked_without_a_dataset_size(
    tmp_path: Path, argument: str, value: object, wanted: str
) -> None:
    """Without a ``dataset_size`` no sampler is built, and its arguments went unchecked: a
    ``shuffle="no"`` shuffled once a later run gave the size."""
    with pytest.raises(ConfigError) as caught:
        _init(tmp_path, **{argument: value})
    assert str(caught.value) == wanted
