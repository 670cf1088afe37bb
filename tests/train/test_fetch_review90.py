"""``ctx.batches()`` reads a dataset's items through its ``__getitem__`` unless it is a plain
``TensorDataset``: any dataset with a ``tensors`` tuple was sliced directly, so one that keeps
its data as ``self.tensors`` and transforms it per item (an augmentation, a subclass of
``TensorDataset``) trained on the raw tensors, silently."""

from __future__ import annotations

import torch

import danlu.train as dt
from danlu.train.data import LocalBatch, fetch


class Scaled(torch.utils.data.Dataset[torch.Tensor]):
    """Keeps its data as ``self.tensors``; each item is the row times 100."""

    def __init__(self) -> None:
        self.tensors = (torch.arange(8.0),)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tensors[0][i] * 100


class Shifted(torch.utils.data.TensorDataset):
    """A TensorDataset whose items are shifted by 1000."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[i] + 1000 for t in self.tensors)


BATCH = LocalBatch([1, 2], 2, 2)


def test_a_dataset_with_a_tensors_attribute_is_read_through_its_items() -> None:
    assert torch.equal(fetch(Scaled(), BATCH), torch.tensor([100.0, 200.0]))


def test_a_tensor_dataset_subclass_with_its_own_items_is_read_through_them() -> None:
    (x,) = fetch(Shifted(torch.arange(8.0)), BATCH)
    assert torch.equal(x, torch.tensor([1001.0, 1002.0]))


def test_a_plain_tensor_dataset_is_still_sliced() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.0), torch.arange(8))
    x, y = fetch(data, BATCH)
    assert torch.equal(x, torch.tensor([1.0, 2.0])) and torch.equal(y, torch.tensor([1, 2]))


def test_ctx_batches_yields_the_datasets_items() -> None:
    model = torch.nn.Linear(1, 1)
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=4,
        dataset_size=8,
        shuffle=False,
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        first = next(iter(ctx.batches(Scaled())))
    assert torch.equal(first, torch.tensor([0.0, 100.0, 200.0, 300.0]))
