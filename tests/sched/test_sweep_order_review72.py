"""The same sweep spec with its parameters written in another order drew other trials for
the same seed (one generator drew them in the order written): each parameter now draws from
the seed, the trial number and its own name, and ``tpe`` tells Optuna the parameters in the
order of their names. A grid still follows the order written (documented: the last varies
fastest)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.sweep import SweepSpec
from danlu.sched.sweep import Ended, trial_parameters

PARAMETERS: dict[str, Any] = {
    "lr": {"distribution": "log_uniform", "low": 1e-5, "high": 1e-1},
    "width": {"distribution": "int", "low": 64, "high": 4096},
    "act": {"values": ["relu", "gelu", "silu"]},
    "dropout": {"distribution": "uniform", "low": 0.0, "high": 0.5},
}


def _spec(order: list[str], method: str = "random", **extra: Any) -> SweepSpec:
    return SweepSpec.model_validate(
        {
            "name": "s",
            "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
            "parameters": {name: PARAMETERS[name] for name in order},
            "method": method,
            "trials": 40,
            "seed": 7,
            **extra,
        }
    )


ORDERS = [["lr", "width", "act", "dropout"], ["dropout", "act", "width", "lr"]]


def test_random_draws_do_not_depend_on_the_order_written() -> None:
    written, reversed_ = (_spec(order) for order in ORDERS)
    draws = [trial_parameters(written, n) for n in range(40)]
    assert draws == [trial_parameters(reversed_, n) for n in range(40)]
    assert len({d["lr"] for d in draws}) == 40  # still a draw per trial


def test_a_parameter_added_leaves_the_others_draws_alone() -> None:
    fewer = _spec(["lr", "width"])
    more = _spec(["act", "lr", "width"])
    for n in range(20):
        a, b = trial_parameters(fewer, n), trial_parameters(more, n)
        assert (a["lr"], a["width"]) == (b["lr"], b["width"])


def test_tpe_draws_do_not_depend_on_the_order_written() -> None:
    pytest.importorskip("optuna", reason="the hpo extra (optuna) is not installed")
    written, reversed_ = (_spec(order, "tpe", metric={"name": "loss"}) for order in ORDERS)
    history = [trial_parameters(written, n) for n in range(8)]  # the startup draws
    assert history == [trial_parameters(reversed_, n) for n in range(8)]
    ended = [Ended(p, float(p["lr"]) * 1000 + float(p["dropout"])) for p in history]
    guided = [trial_parameters(written, n, ended) for n in range(8, 14)]
    assert guided == [trial_parameters(reversed_, n, ended) for n in range(8, 14)]
    assert list(guided[0]) == ORDERS[0]  # returned in the order written
