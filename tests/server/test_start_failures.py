"""A run the executor's poll finds could not start on a node for the node's own reasons (a
Ray actor whose creation failed there: danlu not importable on it) counts as a launch that
failed there, as a launch that raised a node fault does: the same limit, the same cordon
reason, started over by a launch that goes through; its job is re-queued with no restart
counted, and fails, naming the nodes, at a bound. A job's own failure counts nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import user_and_nodes
from sqlalchemy import select

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import ExecStatus, FakeExecutor, FakeWorld, Handle, Outcome
from danlu.sched.registry import make_policy
from danlu.server.db import Database, JobEvent, User
from danlu.server.polling import UNSTARTED_RUNS_LIMIT
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs, nodes

NOW = 1_000_000.0
A, B = Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))
CAUSE = "ModuleNotFoundError: No module named 'danlu'"


def _submit(db: Database, alice: User, name: str, gpus: int = 1) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": gpus}}
    with db.session() as s:
        return jobs.submit(s, body, alice, now=NOW).id


@contextmanager
def _loop(
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unstarted_on: set[str],
    node_launch_failures: int = 2,
) -> Iterator[tuple[Reconciler, FakeWorld]]:
    """A loop whose fake runs end at once: FAILED as a Ray run whose actor could not start on
    the nodes ``unstarted_on`` names (as the Ray executor's poll reports it), when the run is
    on one of them, else SUCCEEDED (or as scripted)."""
    world = FakeWorld()
    world.default = world.default.__class__(duration=0.0)
    executor = FakeExecutor(Cluster((A, B)), world)
    real = executor.poll

    def poll(handle: Handle) -> ExecStatus:
        status = real(handle)
        on = sorted(set(world.runs[handle.job_id].nodes) & unstarted_on)
        if status.running or not on:
            return status
        where = "; ".join(f"{name}: {CAUSE}" for name in on)
        return replace(
            status,
            outcome=Outcome.FAILED,
            exit_code=None,
            message=f"the run's Ray actor could not start ({where}); is danlu installed?",
            start_failed_on=tuple(on),
        )

    monkeypatch.setattr(executor, "poll", poll)
    settings = load_settings(home=tmp_path, node_launch_failures=node_launch_failures)
    loop = Reconciler(db, executor, settings, policy=make_policy("priority"))
    try:
        yield loop, world
    finally:
        loop.stop()


def _counts(db: Database) -> dict[str, tuple[int, str]]:
    with db.read_session() as s:
        return {n.name: (n.launch_failures, nodes.state(n)) for n in cluster.list_nodes(s)}


def test_runs_that_could_not_start_on_a_node_cordon_it_at_the_launch_failure_limit(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", now=NOW)  # every job goes to node a
    first, second = _submit(db, alice, "first"), _submit(db, alice, "second")
    with _loop(db, tmp_path, monkeypatch, {"a"}) as (loop, _):
        assert sorted(loop.run_once(now=NOW).launched) == sorted([first, second])
        report = loop.run_once(now=NOW + 1)  # both runs found unstarted on a
    assert sorted(report.settled) == sorted([first, second])
    assert report.cordoned == ["a"]
    with db.read_session() as s:
        a = {n.name: n for n in cluster.list_nodes(s)}["a"]
        assert nodes.state(a) == "cordoned" and a.launch_failures == 2
        assert a.cordon_reason.startswith(
            "2 launches in a row failed for the node's reasons "
            f"(last: the run's Ray actor could not start (a: {CAUSE})"
        )
        assert jobs.get_job(s, first).state != "RUNNING"


def test_a_run_that_could_not_start_counts_once_and_a_launch_that_goes_through_resets(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", now=NOW)
    broken = {"a"}
    job = _submit(db, alice, "unlucky")
    with _loop(db, tmp_path, monkeypatch, broken) as (loop, world):
        loop.run_once(now=NOW)
        loop.run_once(now=NOW + 1)
        assert _counts(db) == {"a": (1, "ready"), "b": (0, "cordoned")}
        loop.run_once(now=NOW + 2)  # its exit, recorded, is not counted again
        assert _counts(db)["a"] == (1, "ready")
        broken.clear()  # fixed: the job's next launch there goes through
        t = NOW + 2
        while len(world.launches) < 2:
            t += 30  # past the job's backoff
            loop.run_once(now=t)
            assert t < NOW + 900
        assert _counts(db)["a"] == (0, "ready")
        loop.run_once(now=t + 1)
    assert _counts(db)["a"] == (0, "ready")
    with db.read_session() as s:
        assert jobs.get_job(s, job).state == "SUCCEEDED"


def test_the_job_s_own_failure_and_a_run_on_another_node_count_nothing(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    own = _submit(db, alice, "exits-1")
    wide = _submit(db, alice, "wide", gpus=4)  # on a and b, unstarted on b alone
    with _loop(db, tmp_path, monkeypatch, {"b"}) as (loop, world):
        world.script(own, duration=0.0, outcome=Outcome.FAILED)
        loop.run_once(now=NOW)
        assert world.runs[own].nodes == ("a",)  # (placed first, alone on node a)
        loop.run_once(now=NOW + 1)
        assert _counts(db) == {"a": (0, "ready"), "b": (0, "ready")}
        t = NOW + 1
        while wide not in world.runs:
            t += 30
            loop.run_once(now=t)
            assert t < NOW + 900
        loop.run_once(now=t + 1)
    assert _counts(db) == {"a": (0, "ready"), "b": (1, "ready")}


@pytest.mark.parametrize("seen_at_poll", [True, False])
def test_a_run_seen_started_starts_its_node_s_count_over_once_when_the_poll_tells_starts(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen_at_poll: bool
) -> None:
    """With an executor that learns of a start only at a poll (Ray's), the first poll that
    sees a run started starts its nodes' count over; later polls of it do not (a run that
    started before its node broke does not hide the failures there at every pass). Other
    executors' counts start over at the launch alone."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", now=NOW)
    job = _submit(db, alice, "long")
    with _loop(db, tmp_path, monkeypatch, set()) as (loop, world):
        monkeypatch.setattr(loop.executor, "start_seen_at_poll", seen_at_poll, raising=False)
        world.script(job, duration=10_000.0)
        loop.run_once(now=NOW)  # launched on a
        with db.session() as s:
            nodes.launch_failed(s, {"a"}, "EMFILE", limit=3, now=NOW)
            nodes.launch_failed(s, {"a"}, "EMFILE", limit=3, now=NOW)
        loop.run_once(now=NOW + 1)  # seen started
        assert _counts(db)["a"] == ((0, "ready") if seen_at_poll else (2, "ready"))
        with db.session() as s:
            nodes.launch_failed(s, {"a"}, "EMFILE", limit=3, now=NOW)
        loop.run_once(now=NOW + 2)  # seen again: counted on
        assert _counts(db)["a"] == ((1, "ready") if seen_at_poll else (3, "cordoned"))


def test_runs_that_could_not_start_one_at_a_time_cordon_the_node(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs placed on the broken node one after another (the job relaunched there after its
    backoff): with an executor that learns of a start only at a poll, a launch that goes
    through is no start, so it does not start the count over, and the node is cordoned at
    the limit (every launch had reset it: it never got there)."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", now=NOW)
    job = _submit(db, alice, "unlucky")
    with _loop(db, tmp_path, monkeypatch, {"a"}) as (loop, world):
        monkeypatch.setattr(loop.executor, "start_seen_at_poll", True, raising=False)
        loop.run_once(now=NOW)  # launched on a
        loop.run_once(now=NOW + 1)  # found unstarted there
        assert _counts(db)["a"] == (1, "ready")
        t = NOW + 1
        while len(world.launches) < 2:
            t += 30  # past the job's backoff
            loop.run_once(now=t)
            assert t < NOW + 900
        assert world.runs[job].nodes == ("a",)
        assert _counts(db)["a"] == (1, "ready")  # its launch is no start
        report = loop.run_once(now=t + 1)  # found unstarted there again
    assert report.cordoned == ["a"]
    assert _counts(db)["a"] == (2, "cordoned")


def _submit_retrying(db: Database, alice: User, name: str, max_restarts: int) -> str:
    body = {
        "name": name,
        "command": ["python", "train.py"],
        "resources": {"gpus": 1},
        "max_restarts": max_restarts,
    }
    with db.session() as s:
        return jobs.submit(s, body, alice, now=NOW).id


def test_a_run_that_could_not_start_re_queues_its_job_with_no_restart_and_it_goes_elsewhere(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's fault, not the job's: the job is re-queued as a launch the node could not
    make (no restart counted, even with none to spare), and once the node is cordoned the
    job runs on another node."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    job = _submit_retrying(db, alice, "no-restarts", max_restarts=0)
    with _loop(db, tmp_path, monkeypatch, {"a"}) as (loop, world):
        monkeypatch.setattr(loop.executor, "start_seen_at_poll", True, raising=False)
        loop.run_once(now=NOW)
        assert world.runs[job].nodes == ("a",)
        report = loop.run_once(now=NOW + 1)  # found unstarted on a
        assert job in report.settled
        with db.read_session() as s:
            row = jobs.get_job(s, job)
            assert (row.state, row.restarts) == ("PENDING", 0)
            assert row.pending_reason.startswith(
                f"the node could not launch it: the run's Ray actor could not start (a: {CAUSE})"
            )
        t = NOW + 1
        while world.runs[job].nodes == ("a",):
            t += 60  # past the job's backoff
            loop.run_once(now=t)
            assert t < NOW + 3600
        assert _counts(db)["a"] == (2, "cordoned")  # two runs could not start there
        assert world.runs[job].nodes == ("b",)
        loop.run_once(now=t + 1)
    with db.read_session() as s:
        row = jobs.get_job(s, job)
        assert (row.state, row.restarts) == ("SUCCEEDED", 0)


def test_a_job_whose_runs_never_start_anywhere_fails_at_the_bound_naming_the_nodes(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every node broken and never cordoned (``DANLU_NODE_LAUNCH_FAILURES=0``): the job is
    re-queued with no restart counted until its re-queues for its nodes' reasons reach
    :data:`UNSTARTED_RUNS_LIMIT`; that run fails it, naming its node, instead of a loop
    that never ends."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    job = _submit_retrying(db, alice, "nowhere", max_restarts=100)
    with _loop(db, tmp_path, monkeypatch, {"a", "b"}, node_launch_failures=0) as (loop, world):
        monkeypatch.setattr(loop.executor, "start_seen_at_poll", True, raising=False)
        t = NOW
        while True:
            loop.run_once(now=t)
            with db.read_session() as s:
                if jobs.get_job(s, job).state == "FAILED":
                    break
            t += 60
            assert t < NOW + 24 * 3600
    assert len(world.launches) == UNSTARTED_RUNS_LIMIT
    last = world.runs[job].nodes[0]
    with db.read_session() as s:
        row = jobs.get_job(s, job)
        assert row.restarts == 0
        ended = s.execute(
            select(JobEvent.old, JobEvent.new, JobEvent.reason)
            .where(JobEvent.job_id == job)
            .order_by(JobEvent.id.desc())
        ).first()
    assert ended is not None and (ended.old, ended.new) == ("RUNNING", "FAILED")
    assert ended.reason.startswith(f"{UNSTARTED_RUNS_LIMIT} of its runs could not be launched")
    assert f"(the last on {last}: the run's Ray actor could not start ({last}: {CAUSE})" in (
        ended.reason
    )
    assert sum(failures for failures, _ in _counts(db).values()) == UNSTARTED_RUNS_LIMIT
