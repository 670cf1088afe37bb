"""``JobLaunch.precision`` (a job spec's ``training.precision``) reaches the job as
``DANLU_PRECISION``, where ``danlu.train`` takes it as its default precision: written when
the launch names one, absent otherwise (also one the spec's own ``env`` sets), and a launch
naming something that is no precision is refused by field."""

from __future__ import annotations

import pytest

from danlu.executors import JobLaunch
from danlu.executors.base import job_environment
from danlu.executors.errors import InvalidLaunchError


def _launch(**fields: object) -> JobLaunch:
    return JobLaunch("j-1", ("python", "train.py"), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("given", "written"), [("bf16", "bf16"), ("FP16", "fp16"), ("32", "fp32")])
def test_a_launch_with_a_precision_writes_it(given: str, written: str) -> None:
    env = job_environment({"PATH": "/bin"}, _launch(precision=given), None)
    assert env["DANLU_PRECISION"] == written


def test_a_launch_without_one_writes_none() -> None:
    env = job_environment({"PATH": "/bin"}, _launch(), None)
    assert "DANLU_PRECISION" not in env


def test_the_control_planes_own_value_never_reaches_a_job_without_one() -> None:
    """A ``DANLU_PRECISION`` in the base environment or the job's own ``env`` is not the
    spec's ``training.precision``: it goes, as the other optional job variables do."""
    job = _launch(env={"DANLU_PRECISION": "fp16"})
    assert "DANLU_PRECISION" not in job_environment({"DANLU_PRECISION": "bf16"}, job, None)


@pytest.mark.parametrize("bad", ["fp8", "", 16, ["bf16"]])
def test_a_launch_with_another_value_is_refused_by_field(bad: object) -> None:
    with pytest.raises(InvalidLaunchError) as caught:
        _launch(precision=bad)
    assert caught.value.field == "precision"
