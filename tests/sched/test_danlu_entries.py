"""The danlu policy's per-status entry cache: a round builds only the entries of new or
changed statuses, whether or not the caller hands it the same status objects again."""

from __future__ import annotations

from dataclasses import replace

from danlu.sched import JobRequest, JobStatus
from danlu.sched.policies.danlu_entries import NO_WAITING, EntryCache, Option, WaitingEntry


def _entry(job: JobStatus) -> WaitingEntry:
    seconds = 100.0 * job.request.gpus + job.run_time
    return WaitingEntry(job, [Option(job.request.gpus, seconds)], seconds, 0.0, 0.0, 0)


class _Counting:
    def __init__(self) -> None:
        self.built: list[str] = []

    def __call__(self, job: JobStatus) -> WaitingEntry:
        self.built.append(job.id)
        return _entry(job)


def _jobs(count: int) -> list[JobStatus]:
    return [JobStatus(JobRequest(f"j{i}", float(i), gpus=1 + i % 3, seq=i)) for i in range(count)]


def test_first_round_builds_every_entry_in_order() -> None:
    cache: EntryCache[WaitingEntry] = EntryCache(NO_WAITING)
    jobs, build = _jobs(5), _Counting()
    out = cache.entries(jobs, build)
    assert build.built == [j.id for j in jobs]
    assert [e.status for e in out] == jobs
    assert out == [_entry(j) for j in jobs]


def test_later_rounds_build_only_new_or_changed_statuses() -> None:
    cache: EntryCache[WaitingEntry] = EntryCache(NO_WAITING)
    jobs = _jobs(6)
    first = cache.entries(jobs, _Counting())
    # the same objects, equal new objects, a changed one and a new job
    again = [jobs[0], replace(jobs[1]), replace(jobs[2], run_time=50.0), *jobs[3:], *_jobs(7)[6:]]
    build = _Counting()
    out = cache.entries(again, build)
    assert build.built == ["j2", "j6"]
    assert out[0] is first[0]  # the same status object: the same entry
    assert out[1].status is again[1] and out[1].options is first[1].options  # reused
    assert out[2].best == 100.0 * jobs[2].request.gpus + 50.0  # rebuilt from its status
    assert [e.status for e in out] == again
    build = _Counting()
    assert cache.entries(again, build) == out and build.built == []


def test_entries_of_jobs_gone_are_dropped() -> None:
    cache: EntryCache[WaitingEntry] = EntryCache(NO_WAITING)
    cache.entries(_jobs(200), _Counting())
    kept = _jobs(3)
    for _ in range(3):  # a new equal object each round keeps only the live jobs' entries
        cache.entries([replace(j) for j in kept], _Counting())
    assert len(cache._by_job) <= 2 * len(kept) + 64
    assert len(cache._by_object) <= 2 * len(kept) + 64
    build = _Counting()
    cache.entries(_jobs(200)[150:], build)  # gone jobs come back: built again
    assert build.built == [f"j{i}" for i in range(150, 200)]
