"""The traced training step's optimizer: the named ones, torch.optim classes, refusals."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError

torch = pytest.importorskip("torch")

from danlu.estimate.memory.steps import make_optimizer  # noqa: E402


def test_named_and_class_optimizers_build() -> None:
    model = torch.nn.Linear(3, 2)
    assert type(make_optimizer("sgd-momentum", model, None)).__name__ == "SGD"
    assert type(make_optimizer("Adadelta", model, None)).__name__ == "Adadelta"


@pytest.mark.parametrize("name", ["LBFGS", "optimizer", "lr_scheduler", "swa_utils", "nosuch"])
def test_what_one_step_cannot_run_is_refused_naming_the_flag(name: str) -> None:
    """LBFGS's step needs a closure, ``Optimizer`` is the abstract base, ``lr_scheduler`` a
    module: none is an optimizer a traced step can call."""
    with pytest.raises(SpecError, match="--optimizer") as info:
        make_optimizer(name, torch.nn.Linear(3, 2), None)
    assert name in str(info.value)
