"""``restore_state`` loads nothing from a state it then refuses. Its RNG states were set
after the model, optimizer and scheduler had been loaded, and checked only by setting them:
a damaged one (a torch state of another size, a numpy key too short) was refused, often as
a bare RuntimeError or IndexError, with the model already holding the checkpoint's weights
and python's generator already reset; a ``gauss_next`` that is no number was taken and
broke the next ``random.gauss``. A GradScaler state without its fields (a bare KeyError)
was likewise met after the model was loaded. Each is now checked before anything is loaded,
and the empty state of a disabled scaler reads as no scaler state."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from train_helpers import checkpoint_two_steps, damaged_checkpoints, small_context

from danlu.core.errors import DataError
from danlu.train.state import IncompatibleCheckpointError, capture_state, restore_state

Damage = Callable[[dict[str, Any]], None]


def _model() -> torch.nn.Module:
    return torch.nn.Linear(4, 2)


def _saved(scaler: torch.amp.GradScaler | None = None) -> dict[str, Any]:
    torch.manual_seed(1)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return capture_state(model, opt, scaler=scaler, step=3)


def _rng_now() -> tuple[object, object, torch.Tensor]:
    return random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state()


def _same_rng(
    a: tuple[object, object, torch.Tensor], b: tuple[object, object, torch.Tensor]
) -> bool:
    np_a, np_b = a[1], b[1]
    assert isinstance(np_a, dict) and isinstance(np_b, dict)
    return (
        a[0] == b[0]
        and np.array_equal(np_a["state"]["key"], np_b["state"]["key"])
        and np_a["state"]["pos"] == np_b["state"]["pos"]
        and torch.equal(a[2], b[2])
    )


def _set(*path: str, value: object) -> Damage:
    def damage(state: dict[str, Any]) -> None:
        target = state
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return damage


RNG_DAMAGE = {
    "torch state of another size": _set("rng", "torch", value=torch.zeros(10, dtype=torch.uint8)),
    "numpy key too short": _set("rng", "numpy", "key", value=torch.zeros(3, dtype=torch.int64)),
    "numpy position no number": _set("rng", "numpy", "pos", value="x"),
    "numpy generator of another kind": _set("rng", "numpy", "bit_generator", value="PCG64"),
    "python state of another size": _set("rng", "python", "internal", value=[0] * 10),
    "python gauss_next no number": _set("rng", "python", "gauss_next", value="x"),
    "python state missing": _set("rng", "python", value=None),
}


@pytest.mark.parametrize("damage", RNG_DAMAGE.values(), ids=RNG_DAMAGE.keys())
def test_a_damaged_rng_state_is_refused_before_anything_is_loaded(damage: Damage) -> None:
    state = _saved()
    damage(state)
    torch.manual_seed(2)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    weights = [p.detach().clone() for p in model.parameters()]
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = _rng_now()
    with pytest.raises(DataError, match="invalid RNG state in checkpoint"):
        restore_state(state, model, opt)
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True))
    assert opt.param_groups[0]["lr"] == 0.5
    assert _same_rng(before, _rng_now())


def test_a_whole_rng_state_is_set_exactly() -> None:
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    state = _saved()
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(8)
    np.random.seed(8)
    torch.manual_seed(8)
    restore_state(state, _model())
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_a_scaler_state_without_its_fields_is_refused_before_the_model_is_loaded() -> None:
    state = _saved(torch.amp.GradScaler("cpu"))
    del state["scaler"]["scale"]
    model = _model()
    weights = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    with pytest.raises(DataError, match=r"GradScaler state.s .scale. is None"):
        restore_state(state, model, scaler=scaler)
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True))
    assert scaler.get_scale() == 16.0


def test_a_disabled_scalers_empty_state_starts_the_scaler_fresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _saved(torch.amp.GradScaler("cpu", enabled=False))
    assert state["scaler"] == {}
    model = _model()
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        info = restore_state(state, model, scaler=scaler)
    assert info.step == 3
    assert scaler.get_scale() == 16.0
    assert "loss scale starts fresh" in caplog.text


def test_a_whole_scaler_state_is_loaded() -> None:
    state = _saved(torch.amp.GradScaler("cpu", init_scale=64.0))
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    restore_state(state, _model(), scaler=scaler)
    assert scaler.get_scale() == 64.0


@pytest.mark.parametrize("scale", [float("nan"), 0.0, -1.0, "2"])
def test_a_scaler_scale_that_is_no_positive_number_is_refused(scale: object) -> None:
    state = _saved(torch.amp.GradScaler("cpu"))
    state["scaler"]["scale"] = scale
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    with pytest.raises(DataError, match="GradScaler state's 'scale'"):
        restore_state(state, _model(), scaler=scaler)
    assert scaler.get_scale() == 16.0


def test_a_context_refuses_a_damaged_rng_state_naming_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``TrainContext.restore()``: refused as a damaged checkpoint of its step and
    directory, the model and the step as they were (the old restore raised a bare
    RuntimeError with the checkpoint's weights loaded)."""
    with damaged_checkpoints(monkeypatch, RNG_DAMAGE["torch state of another size"]):
        step = checkpoint_two_steps(tmp_path)
    with small_context(tmp_path) as ctx:
        weights = [p.detach().clone() for p in ctx.model.parameters()]
        with pytest.raises(IncompatibleCheckpointError) as caught:
            ctx.restore()
        assert ctx.step_num == 0
        assert all(torch.equal(p, w) for p, w in zip(ctx.model.parameters(), weights, strict=True))
    message = str(caught.value)
    assert f"cannot resume from the checkpoint of step {step} in {tmp_path}" in message
    assert "invalid RNG state in checkpoint" in message and "(the checkpoint is damaged)" in message
