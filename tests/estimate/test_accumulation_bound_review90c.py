"""``danlu estimate ... --accumulation 99999999999999999999999`` started a trace worker,
which failed inside torch (``loss / accumulation``: ``OverflowError: int too big to
convert``, quoted as an error line after seconds of start-up). The request's check now bounds
it by the largest batch a job may give (each accumulation step's micro-batch is a sample at
least), naming the flag and the bound, before any worker starts."""

from __future__ import annotations

import subprocess

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.memory.trace_result import TraceRequest
from danlu.estimate.memory.tracer import validate

MODEL = "danlu.estimate.zoo:mlp_small"


@pytest.mark.parametrize("steps", [MAX_BATCH + 1, 2**63, 99999999999999999999999, 10**400])
def test_accumulation_beyond_the_largest_batch_is_refused_naming_the_bound(steps: int) -> None:
    with pytest.raises(SpecError) as caught:
        validate(TraceRequest(MODEL, (2,), accumulation=steps))
    assert caught.value.field == "--accumulation"
    assert "must lie within 1..1,073,741,824" in str(caught.value)


@pytest.mark.parametrize("steps", [1, 4, MAX_BATCH])
def test_accumulation_within_the_bound_is_still_taken(steps: int) -> None:
    validate(TraceRequest(MODEL, (2,), accumulation=steps))


def test_the_cli_refuses_it_before_a_worker_starts(
    started_workers: list[subprocess.Popen[str]],
) -> None:
    args = ["estimate", MODEL, "--batch-size", "2", "--accumulation", "99999999999999999999999"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --accumulation: ")
    assert "1,073,741,824" in result.stderr
    assert started_workers == []
