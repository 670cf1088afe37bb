"""``drop_last=True`` with a global batch larger than the dataset skips every epoch whole: no
step is ever trained. A WARNING now says so, once, with the fix; before, ``fit`` went through
its epochs without a step and said nothing."""

from __future__ import annotations

import logging

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt


def test_an_epoch_skipped_whole_is_a_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    model = tiny_model()
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        ctx = dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            tiny_regression(n=10),
            mse_loss,
            epochs=3,
            global_batch_size=16,
            drop_last=True,
            metrics_file=False,
            progress=False,
            environ={},
        )
    assert ctx.step_num == 0
    said = [r.getMessage() for r in caplog.records if "skipped whole" in r.getMessage()]
    assert len(said) == 1
    assert "16 samples" in said[0] and "dataset_size=10" in said[0]


def test_a_last_partial_batch_dropped_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    sampler = dt.ElasticSampler(10, drop_last=True)
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        windows = [b.global_real for b in sampler.batches(global_batch=lambda: 4)]
    assert windows == [4, 4]
    assert not [r for r in caplog.records if "skipped whole" in r.getMessage()]
