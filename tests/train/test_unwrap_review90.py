"""A user's model that keeps a submodule as ``self.module`` is checkpointed whole.

``unwrap`` took every module with a ``module`` attribute for a DDP wrapper: such a model was
checkpointed as that submodule alone, and a resume left the rest of it (here its head) at a
fresh initialisation, silently."""

from __future__ import annotations

from pathlib import Path

import torch

import danlu.train as dt
from danlu.train.distributed import parameter_hash, unwrap


class Net(torch.nn.Module):
    """A backbone kept as ``.module`` and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.module = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.module(x))


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def _context(model: torch.nn.Module, directory: Path) -> dt.TrainContext:
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=4,
        checkpoint_dir=str(directory),
        metrics_file=False,
        progress=False,
        environ={},
    )


def test_a_model_with_a_module_attribute_resumes_whole(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(4, 4, generator=g), torch.randn(4, 1, generator=g))
    with _context(model, tmp_path) as ctx:
        for _ in range(3):
            ctx.step(batch, _loss)
        ctx.save()
        trained = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)  # other initial weights: only the checkpoint can give them back
    resumed = Net()
    with _context(resumed, tmp_path) as ctx:
        assert ctx.step_num == 3
        now = resumed.state_dict()
        assert now.keys() == trained.keys()
        assert all(torch.equal(now[k], trained[k]) for k in trained)  # head.* too


def test_unwrap_takes_off_torch_wrappers_only() -> None:
    model = Net()
    assert unwrap(model) is model
    assert unwrap(torch.nn.DataParallel(model)) is model  # a wrapper: its module
    plain = torch.nn.Linear(2, 2)
    assert unwrap(plain) is plain


def test_the_consistency_hash_covers_the_whole_model() -> None:
    torch.manual_seed(0)
    a = Net()
    b = Net()
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.head.weight.add_(1.0)
    assert parameter_hash(a) != parameter_hash(b)  # ranks apart in the head are found
