"""``dt.init`` whose context cannot be made (``TrainContext`` raising after the progress bar
and the preemption handler exist: the goodput tuner refusing its limits) leaves neither the
SIGTERM handler installed nor the Rich bar's refresh thread running: the caller
never gets a context to close them with, and a later SIGTERM only set a flag nobody read
(the job ignored its preemption and was SIGKILLed after the grace, its checkpoint lost)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest
import torch
from train_helpers import tiny_model

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train import context
from danlu.train.batch import AdaptiveBatch


def test_a_context_that_cannot_be_made_restores_sigterm_and_stops_the_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("rich")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConfigError("batch limits: refused")

    monkeypatch.setattr(context, "GoodputTuner", refuse)
    model = tiny_model(seed=1)
    handler = signal.getsignal(signal.SIGTERM)
    threads = set(threading.enumerate())
    with pytest.raises(ConfigError, match="refused"):
        dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=4,
            adaptive_batch=AdaptiveBatch("goodput", 4),
            metrics_file=False,
            progress=True,
            environ={},
        )
    assert signal.getsignal(signal.SIGTERM) is handler
    started = set(threading.enumerate()) - threads
    for thread in started:  # a stopped Rich bar's thread ends at its next tick (not joined)
        thread.join(timeout=10)
    assert [t.name for t in started if t.is_alive()] == []
