"""A step of the wall clock (an NTP step, ``date -s``, a VM resumed) counts as no run time:
a jump forward stops no run before its ``time_limit`` and charges no GPU-hours for it, a
jump back gives no run the jump's length more, nor holds a backoff back that long. The
passes read an injected monotonic clock beside the wall clock they are given."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld, Script
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.loops import ClockSteps, steady_clock
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, users

NOW = 1_000_000.0
DAY = 86_400.0
HOUR = 3_600.0
NODES = (Node("a", 2, gpu_type("H100")),)


class Monotonic:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _loop(db: Database, tmp_path: Path, mono: Monotonic) -> tuple[Reconciler, str]:
    """A fifo loop over a fake node whose runs last a day, and one running job of a one-hour
    time limit started at ``NOW`` (monotonic 0)."""
    with db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}, "time_limit": "1h"}
        job_id = jobs.submit(s, {"name": "limited", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.default = Script(duration=DAY)
    executor = FakeExecutor(Cluster(NODES), world)
    settings = load_settings(home=tmp_path)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"), monotonic=mono)
    assert loop.run_once(now=NOW).launched == [job_id]
    return loop, job_id


def test_a_clock_step_forward_stops_no_run_before_its_time_limit(
    db: Database, tmp_path: Path
) -> None:
    mono = Monotonic()
    loop, job_id = _loop(db, tmp_path, mono)
    try:
        mono.now = 600.0
        loop.run_once(now=NOW + 600)
        mono.now = 1_200.0  # the wall clock stepped a day ahead meanwhile
        report = loop.run_once(now=NOW + DAY + 1_200)
        assert report.timed_out == []  # the old code stopped it: "ran 1d of 1h"
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert job.state == "RUNNING"
            assert jobs.run_time_at(job, NOW + DAY + 1_200) == pytest.approx(1_200)
            assert "left of its time limit" in jobs.why(s, job, now=NOW + DAY + 1_200)
        mono.now = HOUR + 1.0  # an hour of running, as the monotonic clock measured it
        report = loop.run_once(now=NOW + DAY + HOUR + 1.0)
        assert report.timed_out == [job_id]
    finally:
        loop.stop()


def test_a_clock_step_back_gives_a_run_no_more_than_its_time_limit(
    db: Database, tmp_path: Path
) -> None:
    mono = Monotonic()
    loop, job_id = _loop(db, tmp_path, mono)
    try:
        mono.now = 3_000.0  # then the wall clock is set back a day
        loop.run_once(now=NOW - DAY + 3_000)
        mono.now = HOUR + 1.0
        report = loop.run_once(now=NOW - DAY + HOUR + 1.0)
        assert report.timed_out == [job_id]  # the old code: not before another day
    finally:
        loop.stop()


def test_a_backoff_is_not_held_back_by_a_clock_set_back(db: Database, tmp_path: Path) -> None:
    mono = Monotonic()
    loop, job_id = _loop(db, tmp_path, mono)
    try:
        with db.session() as s:  # a queued job waits out a backoff until NOW + 100
            alice = users.get_user(s, "alice")
            body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
            queued = jobs.submit(s, {"name": "queued", **body}, alice, now=NOW).id
            jobs.get_job(s, queued).next_attempt_at = NOW + 100
        mono.now = 10.0
        loop.run_once(now=NOW - HOUR + 10)  # the clock set back an hour
        with db.read_session() as s:
            assert jobs.get_job(s, queued).next_attempt_at == pytest.approx(NOW - HOUR + 100)
            assert jobs.get_job(s, job_id).last_start == pytest.approx(NOW - HOUR)
    finally:
        loop.stop()


def test_a_run_started_in_the_future_of_a_clock_set_back_keeps_its_earlier_runs_time(
    db: Database, tmp_path: Path
) -> None:
    """Without a loop to see the step (the plane was down as it happened), the current run
    adds nothing while the clock is behind its start: it took the earlier runs' time off,
    and a job that had used its whole limit ran on."""
    mono = Monotonic()
    loop, job_id = _loop(db, tmp_path, mono)
    loop.stop()
    with db.session() as s:
        jobs.get_job(s, job_id).run_time = HOUR  # its earlier runs used the whole limit
    with db.read_session() as s:
        assert [j for j, _ in jobs.over_time(s, now=NOW - DAY)] == [job_id]
        assert jobs.run_time_at(jobs.get_job(s, job_id), NOW - DAY) == HOUR


def test_clock_steps_tell_a_step_from_a_slew() -> None:
    steps = ClockSteps()
    assert steps.step(NOW, 0.0) == 0.0  # no reading kept yet
    steps.mark(NOW, 0.0)
    assert steps.step(NOW + 5.2, 5.0) == 0.0  # 0.2 s: slewed, not stepped
    assert steps.step(NOW + 10_000.0 + 3.0, 10_000.0) == 0.0  # within 500 ppm
    assert steps.step(NOW + 3_605.0, 5.0) == pytest.approx(3_600.0)
    assert steps.step(NOW - 55.0, 5.0) == pytest.approx(-60.0)
    steps.forget()
    assert steps.step(NOW + DAY, 5.0) == 0.0


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="Linux's CLOCK_BOOTTIME only")
def test_the_steady_clock_counts_a_suspend() -> None:
    """Linux's boot-time clock, not the monotonic one that stops while the host is
    suspended (a resume would read as a step of the wall clock: runs elsewhere ran on)."""
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    read = steady_clock()
    assert before <= read <= time.clock_gettime(time.CLOCK_BOOTTIME)
