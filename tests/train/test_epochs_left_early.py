"""``ctx.epochs(n)`` ends an epoch when its body returns, as a ``range(n)`` loop does, also
when the body left the epoch before its end: a ``break`` out of ``ctx.batches`` (a cap of
steps per epoch, a step bound), or batches from a loader of the script's own, which
``ctx.step`` does not count as the sampler's. Before, the same epoch came again: after a
``break`` with the rest of its batches (a ``break`` at a step bound then trained one more
step per yield, to the end of every epoch), and with the script's own loader for ever."""

from __future__ import annotations

import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.context import TrainContext

YIELDS_ALLOWED = 20
"""More yields than any test here expects: the old code's endless loop stops at it."""


def _init(n: int) -> TrainContext:
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(
        model,
        optimizer,
        global_batch_size=16,
        dataset_size=n,
        metrics_file=False,
        environ={},
    )


def test_a_break_out_of_the_batches_goes_on_with_the_next_epoch() -> None:
    """Two steps per epoch of a dataset of four steps: epochs 0, 1, 2 once each, six steps."""
    data = tiny_regression(64)
    yielded: list[int] = []
    with _init(len(data)) as ctx:
        for epoch in ctx.epochs(3):
            yielded.append(epoch)
            assert len(yielded) <= YIELDS_ALLOWED, yielded
            for i, batch in enumerate(ctx.batches(data)):
                ctx.step(batch, mse_loss)
                if i == 1:
                    break
    assert yielded == [0, 1, 2]
    assert ctx.step_num == 6
    assert [r["epoch"] for r in ctx.history] == [0, 0, 1, 1, 2, 2]


def test_a_break_at_a_step_bound_trains_no_further_step() -> None:
    """``if ctx.step_num >= 3: break`` in a loop of one epoch: the loop ends at step 3 (it
    trained the rest of the epoch, one step per yield of the same epoch, before)."""
    data = tiny_regression(128)
    yielded: list[int] = []
    with _init(len(data)) as ctx:
        for epoch in ctx.epochs(1):
            yielded.append(epoch)
            assert len(yielded) <= YIELDS_ALLOWED, yielded
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num >= 3:
                    break
    assert yielded == [0]
    assert ctx.step_num == 3


def test_the_scripts_own_loader_ends_each_epoch() -> None:
    """A loop over a DataLoader of the script's own, with ``dataset_size`` for the
    progress: three epochs of four steps (the same epoch came for ever before)."""
    data = tiny_regression(64)
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    yielded: list[int] = []
    with _init(len(data)) as ctx:
        for epoch in ctx.epochs(3):
            yielded.append(epoch)
            assert len(yielded) <= YIELDS_ALLOWED, yielded
            for batch in loader:
                ctx.step(batch, mse_loss)
    assert yielded == [0, 1, 2]
    assert ctx.step_num == 12
    assert [r["epoch"] for r in ctx.history] == [0] * 4 + [1] * 4 + [2] * 4


def test_a_whole_epoch_of_batches_still_gives_each_sample_once() -> None:
    """The common loop is unchanged: every epoch draws each sample once, in 4 steps."""
    data = torch.utils.data.TensorDataset(torch.arange(64.0).unsqueeze(1), torch.zeros(64, 1))
    seen: dict[int, list[int]] = {}
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with dt.init(
        model, optimizer, global_batch_size=16, dataset_size=64, metrics_file=False, environ={}
    ) as ctx:
        for epoch in ctx.epochs(2):
            for batch in ctx.batches(data):
                seen.setdefault(epoch, []).extend(int(v) for v in batch[0].flatten())
                ctx.step(batch, mse_loss)
    assert {e: sorted(v) for e, v in seen.items()} == {0: list(range(64)), 1: list(range(64))}
    assert ctx.step_num == 8
