"""``danlu top``'s summary counts every active job, but the finished ones only among the
newest jobs it reads (:data:`danlu.cli.top.RECENT`): where there are more, it says so instead
of printing a cluster's 5,000 finished jobs as 1,000."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, jobs_app, serve_jobs_commands

from danlu.cli import top


def test_top_once_says_its_finished_counts_are_of_the_newest_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(top, "RECENT", 20)
    fake = serve_jobs_commands(monkeypatch)
    for i in range(30):
        fake.add_job(f"done-{i}", "SUCCEEDED")
    fake.add_job("running", "RUNNING")
    code, out, err = invoke(jobs_app(), "top", "--once")
    assert code == 0, err
    assert "RUNNING 1; of the newest 20 jobs: SUCCEEDED 19" in out, out


def test_top_once_counts_every_job_where_there_are_fewer_than_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(top, "RECENT", 20)
    fake = serve_jobs_commands(monkeypatch)
    for i in range(12):
        fake.add_job(f"done-{i}", "SUCCEEDED")
    fake.add_job("failed", "FAILED")
    fake.add_job("running", "RUNNING")
    code, out, err = invoke(jobs_app(), "top", "--once")
    assert code == 0, err
    assert "RUNNING 1, SUCCEEDED 12, FAILED 1" in out, out
    assert "newest" not in out, out
