"""The synthetic workload's job count has an upper bound: ``danlu sim run --jobs 100000000000``
built jobs until memory ran out instead of saying the count is too large."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError
from danlu.sim.workload import synthetic_workload


def test_a_job_count_past_the_bound_is_refused_before_any_job_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import danlu.sim.workload as workload_module

    def no_jobs(*args: object, **kwargs: object) -> None:
        raise AssertionError("a job was built for a refused count")

    monkeypatch.setattr(workload_module, "JobRequest", no_jobs)
    with pytest.raises(
        ConfigError, match=r"jobs \(--jobs\) must be a whole number from 1 to 1,000,000"
    ):
        synthetic_workload(jobs=1_000_001)


def test_the_cli_names_the_flag() -> None:
    result = CliRunner().invoke(app, ["sim", "run", "--jobs", "100000000000", "--quiet"])
    assert result.exit_code == 2
    assert "--jobs" in result.output and "1,000,000" in result.output


def test_counts_within_the_bound_build_as_before() -> None:
    from danlu.sim.workload import MOST_SYNTHETIC_JOBS

    assert MOST_SYNTHETIC_JOBS == 1_000_000
    assert len(synthetic_workload(jobs=1).jobs) == 1
    assert synthetic_workload(jobs=30, seed=4) == synthetic_workload(jobs=30, seed=4)
    with pytest.raises(ConfigError, match="got 0"):
        synthetic_workload(jobs=0)
