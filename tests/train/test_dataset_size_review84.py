"""``ctx.batches(dataset)`` draws indices ``0 .. dataset_size - 1`` whatever the
dataset it is given. A dataset smaller than ``init``'s ``dataset_size`` failed with a bare
``IndexError`` at the first batch that held an index past its end (without shuffling, after
training on the part before it); a larger one was trained on its first ``dataset_size``
samples only, unseen. The first is a ``ConfigError`` naming ``dataset_size`` before any batch
is drawn, the second a WARNING, once."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.data import ElasticSampler


def _context(dataset_size: int, *, shuffle: bool = True) -> dt.TrainContext:
    model = tiny_model()
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=dataset_size,
        shuffle=shuffle,
        progress=False,
        metrics_file=False,
    )


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_dataset_smaller_than_dataset_size_is_refused_before_a_step(shuffle: bool) -> None:
    data = tiny_regression(16)
    with _context(32, shuffle=shuffle) as ctx:
        with pytest.raises(ConfigError, match=r"16 samples.*dataset_size=32") as caught:
            for _ in ctx.epochs(1):
                for batch in ctx.batches(data):
                    ctx.step(batch, mse_loss)
        assert ctx.step_num == 0  # no step on a part of it
    assert "dataset_size=len(dataset)" in str(caught.value)


def test_a_dataset_larger_than_dataset_size_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = tiny_regression(16)
    with caplog.at_level(logging.WARNING, logger="danlu.train"), _context(8) as ctx:
        for _ in ctx.epochs(2):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
        assert ctx.step_num == 4  # 8 samples an epoch, as before
    said = [r.getMessage() for r in caplog.records if "only its first 8" in r.getMessage()]
    assert len(said) == 1 and "other 8 never" in said[0]


def test_a_dataset_of_dataset_size_or_without_len_is_taken() -> None:
    sampler = ElasticSampler(16)
    sampler.check_dataset(tiny_regression(16))
    sampler.check_dataset(torch.zeros(16, 2))
    sampler.check_dataset(iter(range(3)))  # no len(): nothing to compare
    with pytest.raises(ConfigError, match="dataset_size=16"):
        sampler.check_dataset(torch.zeros(15, 2))


class _Stream(torch.utils.data.IterableDataset[torch.Tensor]):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter([torch.zeros(2)])


def test_fit_on_a_dataset_without_len_is_refused_by_name() -> None:
    """A bare ``TypeError: object of type '_Stream' has no len()`` before."""
    model = tiny_model()
    with pytest.raises(ConfigError, match=r"fit\(\) needs a dataset with len\(\).*_Stream"):
        dt.fit(model, torch.optim.SGD(model.parameters(), lr=0.01), _Stream(), mse_loss)


def test_fit_with_a_dataset_size_is_refused_by_name() -> None:
    """A bare ``TypeError: init() got multiple values for keyword argument 'dataset_size'``
    before."""
    model = tiny_model()
    with pytest.raises(ConfigError, match=r"fit\(\) takes no dataset_size.*Subset"):
        dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            tiny_regression(16),
            mse_loss,
            dataset_size=8,
        )
