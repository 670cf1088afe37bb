"""``danlu top``'s summary counts every active job, but the finished ones only among the
newest jobs it reads (:data:`danlu.cli.top.RECENT`): where there are more, it says so instead
of printing a cluster's 5,000 finished jobs as 1,000."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, jobs_app, serve_jobs_commands

from danlu.cli import top


@pytest.mark.parametrize(
    ("succeeded", "said", "not_said"),
    [
        (30, "RUNNING 1; of the newest 20 jobs: SUCCEEDED 18, FAILED 1", None),
        (12, "RUNNING 1, SUCCEEDED 12, FAILED 1", "newest"),
    ],
    ids=["more-than-it-reads", "fewer"],
)
def test_top_once_counts_finished_jobs_of_the_newest_it_reads(
    monkeypatch: pytest.MonkeyPatch, succeeded: int, said: str, not_said: str | None
) -> None:
    monkeypatch.setattr(top, "RECENT", 20)
    fake = serve_jobs_commands(monkeypatch)
    for i in range(succeeded):
        fake.add_job(f"done-{i}", "SUCCEEDED")
    fake.add_job("failed", "FAILED")
    fake.add_job("running", "RUNNING")
    code, out, err = invoke(jobs_app(), "top", "--once")
    assert code == 0, err
    assert said in out, out
    assert not_said is None or not_said not in out, out
