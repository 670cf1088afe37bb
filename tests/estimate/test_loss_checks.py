"""The traced step refuses a ``loss_fn`` whose result ``backward()`` cannot take, naming it."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError

torch = pytest.importorskip("torch")

from danlu.estimate.memory.steps import train_step  # noqa: E402


def _step(loss_fn: Any) -> Any:
    """One fp32 step of a small model over a dict batch with ``loss_fn``; the model."""
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = {"x": torch.ones(5, 4), "y": torch.zeros(5, dtype=torch.long)}
    train_step(model, opt, batch, loss_fn, "fp32", 1, lambda _: None)
    return model


def _ce(model: Any, batch: Any, reduction: str = "mean") -> Any:
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"], reduction=reduction)


@pytest.mark.parametrize(
    ("loss_fn", "said"),
    [
        (lambda m, b: (_ce(m, b), {"accuracy": 1.0}), "loss_fn returned a tuple"),
        (lambda m, b: {"loss": _ce(m, b)}, "loss_fn returned a dict"),
        (lambda m, b: 0.5, "loss_fn returned a float"),
        (lambda m, b: _ce(m, b, "none"), r"shape \(5,\)"),
        (lambda m, b: torch.tensor(1.0), "does not require grad"),
    ],
    ids=["tuple", "dict", "number", "per-sample", "no-grad"],
)
def test_a_loss_backward_cannot_take_is_a_spec_error(loss_fn: Any, said: str) -> None:
    with pytest.raises(SpecError, match=said) as info:
        _step(loss_fn)
    assert info.value.field == "MODEL_REF"
    assert "mean loss as a scalar tensor" in str(info.value)


def test_a_scalar_loss_still_trains() -> None:
    torch.manual_seed(0)
    first = _step(_ce).weight.detach().clone()
    torch.manual_seed(0)
    assert torch.nn.Linear(4, 3).weight.detach().ne(first).any()  # the step moved the weights


def test_a_one_element_loss_is_accepted() -> None:
    """A loss of shape (1,) is one value: ``backward()`` takes it, so the check does too."""
    _step(lambda m, b: _ce(m, b).reshape(1))
