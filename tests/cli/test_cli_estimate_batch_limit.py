"""``danlu estimate``'s batch sizes have an upper bound, the spec's (``MAX_BATCH``, 2**30
samples): a larger one printed a torch traceback from the tracer (C++ frames past 64 bits,
a Python one at 2**63 - 1) instead of an error naming the flag (exit 2)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import estimate as estimate_cli
from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.memory import TraceRequest
from danlu.estimate.memory.tracer import validate

APP = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
estimate_cli.register(APP)
APP.command("noop", hidden=True)(lambda: None)  # keeps ``estimate`` a subcommand

HUGE = str(10**20 - 1)  # past 64 bits
INT64_MAX = str(2**63 - 1)


ZOO = "danlu.estimate.zoo:mlp_small"
ABSENT = "no_such_module_here:factory"


@pytest.mark.parametrize(
    ("model", "flags", "named"),
    [
        (ZOO, ["--batch-size", HUGE], "--batch-size"),  # the traceback of the report
        (ZOO, ["--batch-size", INT64_MAX], "--batch-size"),
        (ABSENT, ["--batch-size", str(MAX_BATCH + 1)], "--batch-size"),
        (ABSENT, ["--max-batch", "--fit-points", f"1,2,{INT64_MAX}"], "--fit-points"),
        (ABSENT, ["--sweep", f"4,{HUGE}"], "--sweep"),
    ],
    ids=["batch-past-64-bits", "batch-int64-max", "batch-max-plus-one", "fit-points", "sweep"],
)
def test_a_batch_size_above_the_limit_is_refused_naming_the_flag(
    model: str, flags: list[str], named: str
) -> None:
    """Refused before anything is traced (the model reference need not even exist)."""
    args = ["estimate", model, *flags]
    result = CliRunner().invoke(APP, args)
    assert result.exit_code == 2, result.output
    assert f"error: {named}" in result.stderr, result.stderr
    assert "1,073,741,824" in result.stderr, result.stderr  # the limit, named
    assert "Traceback" not in result.output


def test_the_tracer_refuses_a_batch_size_above_the_limit() -> None:
    """The library's own check (``trace`` calls it before starting a worker)."""
    for sizes in ((MAX_BATCH + 1,), (1, 2**63 - 1), (10**20,)):
        with pytest.raises(SpecError, match=r"--batch-size.*1\.\.1,073,741,824"):
            validate(TraceRequest("danlu.estimate.zoo:mlp_small", sizes))
    validate(TraceRequest("danlu.estimate.zoo:mlp_small", (1, MAX_BATCH)))  # the limit: allowed
    with pytest.raises(SpecError, match="--batch-size"):
        validate(TraceRequest("danlu.estimate.zoo:mlp_small", (0,)))
