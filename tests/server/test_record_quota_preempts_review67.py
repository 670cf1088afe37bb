"""Recording a plan must not preempt a job to make room for a start that a quota
then refuses. The plan's quota checks come before its preemptions are applied: a start or
growth that would take its project (or user) past a quota, counting the plan's starts
together in plan order on top of what the kept preemptions and shrinks free, is refused
with the quota's reason, and a preemption made only for refused starts is not applied (the
victim keeps running), as the simulator's quota layer drops it. Through the reconcile loop
and the in-memory executor, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Allocation, Cluster, GpuShare, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld
from danlu.executors.fake import Script
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Preempt, Start
from danlu.server.db import Database
from danlu.server.db.models import Job
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects, users
from danlu.server.services.record import apply_plan

NOW = 1_000_000.0
ROUNDS = 8


def _low(name: str) -> dict[str, object]:
    """A preemptible priority-0 job of project ``q`` on one whole GPU (ckpt.yaml's)."""
    return {
        "name": name,
        "command": ["sleep", "600"],
        "project": "q",
        "resources": {"gpus": 1},
        "preemptible": True,
    }


def _high(name: str, resources: dict[str, object]) -> dict[str, object]:
    """A priority-10 job of project ``p``."""
    return {
        "name": name,
        "command": ["sleep", "300"],
        "project": "p",
        "resources": resources,
        "priority": 10,
    }


def _loop(db: Database, home: Path, nodes: tuple[Node, ...]) -> tuple[Reconciler, FakeWorld]:
    """The reconcile loop under the ``priority`` policy over fake ``nodes`` whose runs last
    long past the test and checkpoint at once on SIGTERM."""
    world = FakeWorld()
    world.default = Script(duration=100_000.0)
    executor = FakeExecutor(Cluster(nodes), world)
    policy = make_policy("priority")
    return Reconciler(db, executor, load_settings(home=home), policy=policy), world


def _rounds(loop: Reconciler, world: FakeWorld, count: int) -> None:
    for _ in range(count):
        assert loop.run_once(now=NOW + world.clock()).errors == []
        world.clock.advance(5.0)


class _Seen(NamedTuple):
    """A job's row as read after a round."""

    id: str
    state: str
    preemptions: int
    pending_reason: str | None
    allocation: list[dict[str, Any]] | None


def _jobs(db: Database, ids: list[str]) -> list[_Seen]:
    with db.read_session() as s:
        rows: list[Job] = [jobs.get_job(s, job_id) for job_id in ids]
        return [_Seen(j.id, j.state, j.preemptions, j.pending_reason, j.allocation) for j in rows]


def test_a_share_refused_by_the_quota_preempts_nobody(db: Database, tmp_path: Path) -> None:
    """repro2: a 30 GiB share of project ``p`` (quota 0.5 GPU) placed on the V100 holds
    0.938 of it: refused every round. The ``q`` job the plan preempted for it used to wait
    for ever while the V100 stayed idle."""
    nodes = (Node("a100", 1, gpu_type("A100-80GB")), Node("v100", 1, gpu_type("V100")))
    loop, world = _loop(db, tmp_path, nodes)
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        projects.create_project(s, "p", quota_gpus=0.5, now=NOW)
        projects.create_project(s, "q", now=NOW)
    try:
        low: list[str] = []
        for i in range(2):  # one after the other: the first lands on the first GPU
            with db.session() as s:
                low.append(jobs.submit(s, _low(f"low{i}"), alice, now=NOW).id)
            _rounds(loop, world, 1)
        assert {j.state for j in _jobs(db, low)} == {JobState.RUNNING.value}
        with db.session() as s:
            body = _high("high-sh30", {"gpus": 1, "gpu_memory": "30GiB"})
            high = jobs.submit(s, body, alice, now=NOW + world.clock()).id
        _rounds(loop, world, ROUNDS)
        (share,) = _jobs(db, [high])
        victims = [j for j in _jobs(db, low) if j.preemptions]
        if share.state != JobState.RUNNING.value:
            # not started (refused by the quota where placed on the V100, or not placed):
            # nobody was stopped for it, both GPUs are still busy
            assert [v.id for v in victims] == [], victims
            assert {j.state for j in _jobs(db, low)} == {JobState.RUNNING.value}
        else:  # placed within the quota (0.375 of the A100): one victim, for it
            assert len(victims) == 1, victims
    finally:
        loop.stop()


def test_two_starts_over_the_quota_preempt_one_job(db: Database, tmp_path: Path) -> None:
    """repro4: two 1-GPU jobs of project ``p`` (quota 1 GPU) arrive together on a full
    cluster: one of them may start, so one ``q`` job is preempted, not two."""
    nodes = (Node("a100", 2, gpu_type("A100-80GB")), Node("v100", 2, gpu_type("V100")))
    loop, world = _loop(db, tmp_path, nodes)
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        projects.create_project(s, "p", quota_gpus=1, now=NOW)
        projects.create_project(s, "q", now=NOW)
        low = [jobs.submit(s, _low(f"low{i}"), alice, now=NOW).id for i in range(4)]
    try:
        _rounds(loop, world, 2)
        assert {j.state for j in _jobs(db, low)} == {JobState.RUNNING.value}
        with db.session() as s:
            now = NOW + world.clock()
            bodies = [_high(f"high{i}", {"gpus": 1}) for i in (0, 1)]
            high = [jobs.submit(s, body, alice, now=now).id for body in bodies]
        _rounds(loop, world, ROUNDS)
        states = sorted(j.state for j in _jobs(db, high))
        assert states == [JobState.PENDING.value, JobState.RUNNING.value], states
        (waiting,) = [j for j in _jobs(db, high) if j.state == JobState.PENDING.value]
        assert "project 'p' GPU quota" in (waiting.pending_reason or ""), waiting.pending_reason
        preempted = {j.id: j.preemptions for j in _jobs(db, low) if j.preemptions}
        assert sum(preempted.values()) == 1, preempted
        running = [j for j in _jobs(db, low + high) if j.state == JobState.RUNNING.value]
        assert len(running) == 4  # no GPU left idle
    finally:
        loop.stop()


def test_the_record_keeps_the_victim_of_a_refused_start(db: Database) -> None:
    """The recording alone, on a plan made by hand (repro2's numbers): the victim of a start
    the quota refuses stays RUNNING (not preempted), the start is refused with the quota's
    reason, and the preemption for a start that fits the quota is applied."""
    nodes = (Node("a", 1, gpu_type("A100-80GB")), Node("v", 2, gpu_type("V100")))
    memory = gpu_type("V100").memory
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        projects.create_project(s, "p", quota_gpus=0.5, now=NOW)
        projects.create_project(s, "q", now=NOW)
        low = [jobs.submit(s, _low(f"low{i}"), alice, now=NOW).id for i in (0, 1)]
        big = jobs.submit(s, _high("big", {"gpus": 1, "gpu_memory": "30GiB"}), alice, now=NOW).id
        small = jobs.submit(s, _high("small", {"gpu_fraction": 0.25}), alice, now=NOW).id
    with db.session() as s:  # the two q jobs hold one V100 each
        for gpu, job_id in enumerate(low):
            records = [{"node": "v", "gpu": gpu, "milli": 1000, "memory": memory}]
            job = jobs.get_job(s, job_id)
            jobs.change_state(s, job, JobState.RUNNING, "test", NOW, allocation=records)
    plan = Plan(
        preempts=(Preempt(low[0], "for big"), Preempt(low[1], "for small")),
        starts=(  # big holds 0.938 of a V100: past the quota; small then fits
            Start(big, Allocation((GpuShare(1, 0, 938, 30 * GiB),))),
            Start(small, Allocation((GpuShare(1, 1, 250, memory // 4),))),
        ),
    )
    with db.session() as s:
        applied = apply_plan(s, plan, NOW + 1)
    assert [j.id for j in applied.preempted] == [low[1]]
    assert applied.deferred[big] == "project 'p' GPU quota: 0 in use + 0.938 asked > 0.5"
    assert "not preempted" in applied.skipped[low[0]] and big in applied.skipped[low[0]]
    assert "checkpoint" in applied.deferred[small]  # waits for its victim to exit
    with db.read_session() as s:
        kept, stopped = (jobs.get_job(s, job_id) for job_id in low)
        assert (kept.state, kept.preemptions) == (JobState.RUNNING.value, 0)
        assert stopped.state == JobState.PREEMPTING.value
        assert jobs.get_job(s, big).pending_reason == applied.deferred[big]


def _running(db: Database, nodes: tuple[Node, ...], project: str, count: int) -> list[str]:
    """``count`` preemptible jobs of ``project`` RUNNING on the first GPUs of ``nodes[0]``
    (a whole V100 each), submitted by ``alice``, whom this makes."""
    memory = gpu_type("V100").memory
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        projects.create_project(s, "p", quota_gpus=1, now=NOW)
        projects.create_project(s, "q", now=NOW)
        ids = []
        for gpu in range(count):
            job = jobs.submit(s, {**_low(f"low{gpu}"), "project": project}, alice, now=NOW)
            records = [{"node": nodes[0].name, "gpu": gpu, "milli": 1000, "memory": memory}]
            jobs.change_state(s, job, JobState.RUNNING, "test", NOW, allocation=records)
            ids.append(job.id)
    return ids


def test_a_victim_of_the_same_project_makes_room_for_its_start(db: Database) -> None:
    """A preemption frees its victim's room in the quota check: project ``p`` at its quota
    (1 GPU) preempts its own job for a higher one, which waits for the victim to exit (it
    is not refused by the quota, and the victim is stopped)."""
    nodes = (Node("v", 1, gpu_type("V100")),)
    (victim,) = _running(db, nodes, "p", 1)
    with db.session() as s:
        alice = users.get_user(s, "alice")
        high = jobs.submit(s, _high("high", {"gpus": 1}), alice, now=NOW).id
    memory = gpu_type("V100").memory
    plan = Plan(
        preempts=(Preempt(victim, "for high"),),
        starts=(Start(high, Allocation((GpuShare(0, 0, 1000, memory),))),),
    )
    with db.session() as s:
        applied = apply_plan(s, plan, NOW + 1)
    assert [j.id for j in applied.preempted] == [victim]
    assert "checkpoint" in applied.deferred[high], applied.deferred


def test_a_start_past_the_users_quota_preempts_nobody(db: Database) -> None:
    """The user's quota is checked before the preemptions as the project's is: alice (1
    GPU, all in use) cannot start another job, so the ``q`` job is not preempted for it."""
    nodes = (Node("v", 2, gpu_type("V100")),)
    _running(db, nodes, "q", 1)  # alice's, on GPU 0
    with db.session() as s:
        users.set_quota(s, "alice", 1)
        bob = users.create_user(s, "bob", now=NOW)
        bobs = jobs.submit(s, _low("bobs"), bob, now=NOW)
        records = [{"node": "v", "gpu": 1, "milli": 1000, "memory": gpu_type("V100").memory}]
        jobs.change_state(s, bobs, JobState.RUNNING, "test", NOW, allocation=records)
        victim = bobs.id
        body = {**_high("high", {"gpus": 1}), "project": "q"}
        high = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
    memory = gpu_type("V100").memory
    plan = Plan(
        preempts=(Preempt(victim, "for high"),),
        starts=(Start(high, Allocation((GpuShare(0, 1, 1000, memory),))),),
    )
    with db.session() as s:
        applied = apply_plan(s, plan, NOW + 1)
    assert applied.preempted == []
    assert applied.deferred[high] == "user 'alice' GPU quota: 1 in use + 1 asked > 1"
    assert "kept waiting by a quota" in applied.skipped[victim]
    with db.read_session() as s:
        assert jobs.get_job(s, victim).state == JobState.RUNNING.value
