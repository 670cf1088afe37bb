"""A ``checkpoint_dir`` that is a ``file://`` URL of a relative path is refused locally, as
the control plane's admission refuses it (a 422 after the spec had passed every local
check); a stored spec naming one is still read."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.sweep import parse_sweep


@pytest.mark.parametrize("location", ["file://ckpt/run1", "file://~/ckpt", "file:ckpt"])
def test_relative_file_url_refused(location: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["x"], "checkpoint_dir": location})
    assert caught.value.field == "checkpoint_dir"
    assert "relative path" in caught.value.message
    assert "file:///shared/ckpt/run1" in caught.value.message


@pytest.mark.parametrize("location", ["file:///shared/ckpt", "/shared/ckpt", "s3://bucket/run"])
def test_absolute_locations_accepted(location: str) -> None:
    spec = parse_spec({"name": "a", "command": ["x"], "checkpoint_dir": location})
    assert spec.checkpoint_dir == location


def test_stored_spec_with_relative_file_url_read() -> None:
    data = {"name": "a", "command": ["x"], "checkpoint_dir": "file://ckpt"}
    assert parse_spec(data, stored=True).checkpoint_dir == "file://ckpt"


def test_sweep_trial_relative_file_url_named() -> None:
    sweep = {
        "name": "s",
        "method": "grid",
        "parameters": {"lr": {"values": [0.1, 0.2]}},
        "trial": {"command": ["x"], "checkpoint_dir": "file://ckpt"},
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(sweep)
    assert caught.value.field == "trial.checkpoint_dir"
    assert "relative path" in caught.value.message
