"""A job spec's ``training.optimizer`` (checked without torch) and the tracer's optimizer
(built with torch) take the same names."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec_training import OPTIMIZER_PRESETS, optimizer_name

torch = pytest.importorskip("torch")

from danlu.estimate.memory.steps import make_optimizer  # noqa: E402


def _builds(name: str) -> bool:
    try:
        make_optimizer(name, torch.nn.Linear(3, 2), None)
    except SpecError:
        return False
    return True


def test_every_torch_optim_class_the_tracer_builds_the_spec_takes() -> None:
    """And what the spec refuses, the tracer refuses too (it may refuse more: a class the
    model cannot be given, such as Muon for a model with 1-D parameters)."""
    classes = [n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)]
    assert "Adadelta" in classes and "LBFGS" in classes
    for name in [*OPTIMIZER_PRESETS, *classes]:
        try:
            taken = optimizer_name(name, "training.optimizer")
        except SpecError:
            assert not _builds(name), f"the spec refuses {name}, which the tracer builds"
            continue
        assert taken == name.lower(), name
        if _builds(name):
            assert _builds(taken), name
