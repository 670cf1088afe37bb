"""A factory returning several models (a GAN's generator and discriminator) in a tuple is
refused saying how to return them: in one module, which the one optimizer covers. The
refusal said what it got (``a tuple of 3 (tuple, function, function)``) but not the fix."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError

torch = pytest.importorskip("torch")

from danlu.estimate.memory import steps  # noqa: E402 (needs torch)


def _gan(first: Any) -> Any:
    def make_batch(b: int) -> Any:
        return torch.randn(b, 8)

    def loss_fn(model: Any, batch: Any) -> Any:
        return model["d"](model["g"](batch)).mean()

    return lambda: (first, make_batch, loss_fn)


def _pair() -> tuple[Any, Any]:
    return torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)


@pytest.mark.parametrize("holder", [tuple, list, lambda pair: dict(zip("gd", pair, strict=True))])
def test_models_in_a_container_are_told_to_share_a_module(holder: Any) -> None:
    with pytest.raises(SpecError) as caught:
        steps.build(_gan(holder(_pair())), "gans:factory")
    assert caught.value.field == "MODEL_REF"
    assert "nn.ModuleDict({'g': g, 'd': d})" in caught.value.message


def test_a_module_dict_of_them_is_taken() -> None:
    g, d = _pair()
    model, _, _ = steps.build(_gan(torch.nn.ModuleDict({"g": g, "d": d})), "gans:factory")
    assert len(list(model.parameters())) == 4


def test_another_wrong_first_item_gets_no_such_hint() -> None:
    with pytest.raises(SpecError) as caught:
        steps.build(_gan("not a model"), "gans:factory")
    assert "ModuleDict" not in caught.value.message
