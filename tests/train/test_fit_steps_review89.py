"""``fit(max_steps=0)`` (or below) trained nothing and returned at once, saying nothing: a
user who passed 0 by mistake (an unset option's default) learnt of it only from an untrained
model. It is a ConfigError naming max_steps now, before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


@pytest.mark.parametrize("max_steps", [0, -1])
def test_fit_refuses_a_step_bound_below_one(tmp_path: Path, max_steps: int) -> None:
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ConfigError, match=rf"max_steps={max_steps}.*max_steps >= 1"):
        dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            tiny_regression(n=32),
            mse_loss,
            global_batch_size=8,
            max_steps=max_steps,
            checkpoint_dir=str(tmp_path / "ckpt"),
            metrics_file=False,
            progress=False,
            environ={},
        )
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not (tmp_path / "ckpt").exists()  # refused before init made anything


def test_fit_with_one_step_trains_one_step() -> None:
    model = tiny_model()
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        tiny_regression(n=32),
        mse_loss,
        global_batch_size=8,
        max_steps=1,
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert ctx.step_num == 1 and ctx.history[-1]["progress"] == 1.0
