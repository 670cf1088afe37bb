"""The batches of ``ctx.batches``, and those a script hands ``ctx.step``, go to the model's
device: ``to_device`` on every tensor of a batch's structure (the meta device stands in for a
GPU on a CPU-only host), and on a real GPU ``dt.fit`` trains a model on a CPU dataset
(``gpu``-marked)."""

from __future__ import annotations

import shutil
from collections import OrderedDict, UserDict, defaultdict
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn
from train_helpers import cross_entropy_loss, sign_task

import danlu.train as dt
from danlu.train.accumulate import split
from danlu.train.data import to_device


class Pair(NamedTuple):
    inputs: torch.Tensor
    label: str


def test_every_tensor_of_a_batch_moves_and_the_structure_stays() -> None:
    meta = torch.device("meta")
    batch = {
        "x": torch.ones(4, 2),
        "parts": [torch.zeros(4), (torch.ones(4, 1), 3)],
        "pair": Pair(torch.ones(4), "a"),
        "name": "batch",
    }
    moved = to_device(batch, meta)
    assert moved["x"].device == meta and moved["x"].shape == (4, 2)
    assert moved["parts"][0].device == meta and isinstance(moved["parts"], list)
    assert moved["parts"][1][0].device == meta and moved["parts"][1][1] == 3
    assert isinstance(moved["pair"], Pair) and moved["pair"].inputs.device == meta
    assert moved["pair"].label == "a" and moved["name"] == "batch"
    assert batch["x"].device.type == "cpu"  # the caller's batch is left as it was


class Encoding(UserDict[str, Any]):
    """A tokenizer's batch: a mapping whose keys read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None


def test_mappings_keep_their_kind_when_moved_and_split() -> None:
    meta = torch.device("meta")
    ordered = to_device(OrderedDict(b=torch.ones(2), a=torch.ones(2)), meta)
    assert isinstance(ordered, OrderedDict) and list(ordered) == ["b", "a"]
    counts = to_device(defaultdict(int, x=torch.ones(2)), meta)
    assert isinstance(counts, defaultdict) and counts["missing"] == 0
    encoding = Encoding(input_ids=torch.ones(6, 3), mask=torch.ones(6, 3))
    moved = to_device(encoding, meta)
    assert isinstance(moved, Encoding) and moved.input_ids.device == meta
    assert encoding.input_ids.device.type == "cpu"  # the copy moved, not the caller's batch
    parts = split(encoding, 4)
    assert [len(part.input_ids) for part, _ in parts] == [3, 3]
    assert all(isinstance(part, Encoding) for part, _ in parts)
    pairs = split(Pair(torch.ones(6), "a"), 4)
    assert all(isinstance(part, Pair) and part.label == "a" for part, _ in pairs)
    frozen = to_device(MappingProxyType({"x": torch.ones(2)}), meta)
    assert isinstance(frozen, dict) and frozen["x"].device == meta  # no copy: a plain dict


def test_batches_on_the_cpu_are_the_datasets_own_tensors() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(8, 1), torch.zeros(8))
    model = nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dt.init(model, opt, global_batch_size=4, dataset_size=len(data)) as ctx:
        x, y = next(iter(ctx.batches(data)))
        assert x.device.type == "cpu" and x.shape == (4, 1) and y.shape == (4,)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here")
def test_fit_trains_on_the_gpu_from_a_cpu_dataset() -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    torch.manual_seed(0)
    inputs, data = sign_task(512, 16)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_fn(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        assert all(tensor.is_cuda for tensor in batch)
        return cross_entropy_loss(m, batch)

    ctx = dt.fit(model, opt, data, loss_fn, epochs=10, global_batch_size=64, max_steps=40)
    assert next(model.parameters()).is_cuda
    assert ctx.history[-1]["loss"] < ctx.history[0]["loss"]
    assert ctx.history[-1]["memory_bytes"] > 0
    with dt.init(model, opt, global_batch_size=64) as own:  # the script's own CPU batches
        own.step((inputs[:64], (inputs[:64, 0] > 0).long()), loss_fn)
    assert own.history[-1]["step"] == 1
