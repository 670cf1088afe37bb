"""Pending jobs that share a ``seq`` (JobRequest's default is 0: a library caller or an
adapter that does not number its jobs) are all ranked. The pending order, kept by ``seq``,
held one entry per ``seq``: all but one such job dropped out of ``priority``, ``sjf``,
``tiresias`` and ``value-density``'s rounds, neither started nor said to wait."""

from __future__ import annotations

import math

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.policies.ranked import RankedJobs, RankKey, ranked_pending
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

RANKED = ["priority", "sjf", "tiresias", "value-density"]
FOUR = Cluster.homogeneous(1, 4)


def job(job_id: str, gpus: int = 1, seq: int = 0, submit: float = 0.0) -> JobStatus:
    return JobStatus(JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=seq))


@pytest.mark.parametrize("policy", RANKED)
def test_every_job_of_one_seq_starts(policy: str) -> None:
    pending = tuple(job(f"j{i}") for i in range(3))
    plan = make_policy(policy).schedule(ClusterView(10.0, FOUR, pending=pending))
    assert sorted(s.job_id for s in plan.starts) == ["j0", "j1", "j2"]


@pytest.mark.parametrize("policy", RANKED)
def test_every_job_of_one_seq_starts_or_says_why_it_waits(policy: str) -> None:
    pending = tuple(job(f"j{i}", gpus=2) for i in range(3))
    plan = make_policy(policy).schedule(ClusterView(10.0, FOUR, pending=pending))
    started = {s.job_id for s in plan.starts}
    assert len(started) == 2
    (left,) = {"j0", "j1", "j2"} - started
    assert plan.reason(left)


def _key(status: JobStatus, now: float) -> tuple[RankKey, float]:
    return (status.request.seq, status.id), math.inf


@pytest.mark.parametrize("after", [True, False], ids=["new-after-old", "new-before-old"])
def test_a_seq_that_comes_twice_in_a_later_round_is_ranked(after: bool) -> None:
    """The order kept from round to round (incremental: 100 jobs, one more) takes a job whose
    ``seq`` another job already has, whichever of the two comes first in the view."""
    jobs = [job(f"j{i:03}", seq=i) for i in range(100)]
    ranked = ranked_pending()
    ranked.update(tuple(jobs), 0.0, _key)
    twin = job("j050-twin", seq=50)
    more = [*jobs[:51], twin, *jobs[51:]] if after else [*jobs[:50], twin, *jobs[50:]]
    ranked.update(tuple(more), 1.0, _key)
    assert sorted(j.id for j in ranked.jobs) == sorted(j.id for j in more)
    assert ranked.keys == sorted(_key(j, 1.0)[0] for j in more)
    # and the order keeps up as jobs leave and come afterwards
    later = (*(j for j in more if j.id != "j010"), job("j100", seq=100))
    ranked.update(later, 2.0, _key)
    assert ranked.keys == sorted(_key(j, 2.0)[0] for j in later)
    assert ranked.key_of(twin) == _key(twin, 2.0)[0]


def test_unique_seqs_keep_the_same_order() -> None:
    jobs = tuple(job(f"j{i:03}", seq=i) for i in range(100))
    ranked = ranked_pending()
    ranked.update(jobs, 0.0, _key)
    fresh = RankedJobs()
    fresh.update(jobs, 0.0, _key)
    assert ranked.jobs == fresh.jobs and ranked.keys == fresh.keys
