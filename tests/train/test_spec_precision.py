"""The job spec's ``training.precision`` reaches ``danlu.train`` as ``DANLU_PRECISION``: it
is ``init``'s default precision (the control plane reserved the memory that precision needs);
an explicit ``precision=`` still wins, with a WARNING naming both; a bad value in the variable
is a ``ConfigError`` naming it."""

from __future__ import annotations

import logging

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv


def _init(environ: dict[str, str], **kwargs: str) -> dt.TrainContext:
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(
        model, optimizer, global_batch_size=16, environ=environ, metrics_file=False, **kwargs
    )


@pytest.mark.parametrize(
    ("raw", "name"), [("bf16", "bf16"), ("BF16", "bf16"), (" fp16 ", "fp16"), ("32", "fp32")]
)
def test_the_variable_is_read_as_the_estimators_name(raw: str, name: str) -> None:
    assert JobEnv.from_environ({"DANLU_PRECISION": raw}).precision == name


@pytest.mark.parametrize("environ", [{}, {"DANLU_PRECISION": ""}, {"DANLU_PRECISION": "  "}])
def test_unset_or_empty_is_no_precision(environ: dict[str, str]) -> None:
    assert JobEnv.from_environ(environ).precision is None


@pytest.mark.parametrize("raw", ["bfloat16", "fp8", "half", "1"])
def test_a_bad_value_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="DANLU_PRECISION") as caught:
        JobEnv.from_environ({"DANLU_PRECISION": raw})
    assert "fp32, fp16 or bf16" in str(caught.value)


def test_init_trains_in_the_specs_precision_by_default() -> None:
    """A spec's ``precision: bf16`` with ``dt.init(model, opt)``: the forward pass runs
    under bfloat16 autocast (it ran in fp32 before, with about twice the activation memory
    the scheduler reserved)."""
    with _init({"DANLU_PRECISION": "bf16"}) as ctx:
        assert ctx.precision.dtype is torch.bfloat16
        seen: list[torch.dtype] = []

        def loss_fn(
            model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
        ) -> torch.Tensor:
            x, y = batch
            out = model(x)
            seen.append(out.dtype)
            return torch.nn.functional.mse_loss(out.float(), y)

        data = tiny_regression(16)
        ctx.step(data[:16], loss_fn)
    assert seen == [torch.bfloat16]


def test_without_the_variable_init_trains_in_fp32() -> None:
    with _init({}) as ctx:
        assert ctx.precision.dtype is None and ctx.precision.name == "fp32"


def test_an_explicit_precision_wins_with_a_warning_naming_both(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="danlu.train"),
        _init({"DANLU_PRECISION": "bf16"}, precision="fp32") as ctx,
    ):
        assert ctx.precision.dtype is None
        ctx.step(tiny_regression(16)[:16], mse_loss)
    told = [r.getMessage() for r in caplog.records if "DANLU_PRECISION" in r.getMessage()]
    assert len(told) == 1
    assert "fp32" in told[0] and "bf16" in told[0]


@pytest.mark.parametrize(("spec", "script"), [("fp32", "bf16"), ("bf16", "fp32"), ("fp16", "bf16")])
def test_each_direction_of_a_difference_warns_once_naming_the_spec_field(
    spec: str, script: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A spec's precision on either side of the script's (``fp32`` reaches a job whose
    launch sets it): one WARNING, naming both precisions and ``training.precision``, the
    field to change; the script's precision is the one trained in."""
    with (
        caplog.at_level(logging.WARNING, logger="danlu.train"),
        _init({"DANLU_PRECISION": spec}, precision=script) as ctx,
    ):
        assert ctx.precision.name == script
        ctx.step(tiny_regression(16)[:16], mse_loss)
    told = [r for r in caplog.records if "DANLU_PRECISION" in r.getMessage()]
    assert len(told) == 1
    assert told[0].levelno == logging.WARNING
    message = told[0].getMessage()
    assert f"trains in {script}" in message and f"training.precision is {spec}" in message
    assert f"set training.precision: {script}" in message


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_without_the_variable_an_explicit_precision_says_nothing(
    precision: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Off the cluster, or a launch that names no precision: nothing to compare with."""
    with (
        caplog.at_level(logging.WARNING, logger="danlu.train"),
        _init({}, precision=precision) as ctx,
    ):
        assert ctx.precision.name == precision
    assert not [r for r in caplog.records if "precision" in r.getMessage()]


def test_an_explicit_precision_equal_to_the_specs_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="danlu.train"),
        _init({"DANLU_PRECISION": "fp16"}, precision="FP16") as ctx,
    ):
        assert ctx.precision.dtype is torch.float16
    assert not [r for r in caplog.records if "DANLU_PRECISION" in r.getMessage()]


def test_only_the_chief_warns(caplog: pytest.LogCaptureFixture) -> None:
    """Another rank of a distributed run says nothing (the chief says it once for all):
    checked on the function that chooses, without a process group."""
    from danlu.train.build import _chosen_precision

    other = JobEnv.from_environ({"DANLU_PRECISION": "bf16", "RANK": "1", "WORLD_SIZE": "2"})
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        assert _chosen_precision("fp16", other) == "fp16"
        assert _chosen_precision(None, other) == "bf16"
    assert not caplog.records
