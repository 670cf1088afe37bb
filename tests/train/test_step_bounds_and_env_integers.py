"""``fit(max_steps=...)`` and ``ctx.stop_at_step`` take whole numbers only (2.5 ran 3 steps,
``"3"`` failed after the context was built), and the job environment's integers are digits
0-9, at most 18 of them (``int()`` took ``1_000`` and other scripts' digits, and a 400-digit
count failed later with a bare OverflowError)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv


@pytest.mark.parametrize("bound", [2.5, "3", True])
def test_fit_refuses_a_step_bound_that_is_no_whole_number(bound: Any) -> None:
    model = tiny_model()
    with pytest.raises(ConfigError, match="max_steps must be an integer"):
        dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            tiny_regression(n=16),
            mse_loss,
            global_batch_size=4,
            max_steps=bound,
            metrics_file=False,
            progress=False,
            environ={},
        )


def test_fit_still_stops_at_a_whole_step_bound() -> None:
    model = tiny_model()
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        tiny_regression(n=16),
        mse_loss,
        epochs=3,
        global_batch_size=4,
        max_steps=3,
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert ctx.step_num == 3


def test_stop_at_step_refuses_a_fraction() -> None:
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        dt.init(model, optimizer, global_batch_size=4, metrics_file=False, environ={}) as ctx,
        pytest.raises(ConfigError, match="max_steps must be an integer"),
    ):
        ctx.stop_at_step(2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    ["1_000", "\u0661\u0662", "9" * 400, "1.0", "0x10", "--1"],
    ids=["underscore", "arabic-digits", "400-digits", "decimal", "hex", "double-sign"],
)
def test_an_environment_integer_of_other_digits_or_too_many_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"DANLU_BATCH_SIZE=.* is not an integer"):
        JobEnv.from_environ({"DANLU_BATCH_SIZE": raw})


@pytest.mark.parametrize(("raw", "value"), [("32", 32), (" 32 ", 32), ("+8", 8)])
def test_an_environment_integer_reads_as_before(raw: str, value: int) -> None:
    assert JobEnv.from_environ({"DANLU_BATCH_SIZE": raw}).batch_size == value
