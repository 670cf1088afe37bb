"""``dt.init`` that fails after joining the process group but before its context exists
(a checkpoint directory it cannot use, a sampler it cannot build) leaves the group and the
reporter's thread behind no more: the caller never gets a context to close them with."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import tiny_model

import danlu.train as dt
from danlu.train import build
from danlu.train.distributed import Distributed


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every Distributed.close call, by name."""
    calls: list[str] = []
    real = Distributed.close

    def close(self: Distributed) -> None:
        calls.append("close")
        real(self)

    monkeypatch.setattr(Distributed, "close", close)
    return calls


def _init(tmp_path: Path, **kwargs: Any) -> None:
    model = tiny_model(seed=1)
    dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        metrics_file=False,
        progress=False,
        environ={},
        **kwargs,
    )


def test_a_checkpoint_step_that_fails_leaves_the_group(
    tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("checkpoint directory not writable")

    monkeypatch.setattr(build, "Checkpoints", refuse)
    with pytest.raises(PermissionError):
        _init(tmp_path, checkpoint_dir=str(tmp_path))
    assert closed == ["close"]


def test_a_failure_after_the_reporter_started_stops_it(
    tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no sampler")

    monkeypatch.setattr(build, "ElasticSampler", refuse)
    threads = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="no sampler"):
        _init(tmp_path, checkpoint_dir=str(tmp_path), dataset_size=64)
    assert closed == ["close"]
    assert [t.name for t in set(threading.enumerate()) - threads if t.is_alive()] == []
