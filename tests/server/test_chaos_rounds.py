"""The mixed workload of ``test_mixed_rounds`` through the reconcile loop under chaos: the
executor fails one call in twenty (submit, poll, preempt, cancel: as when it is briefly
unreachable), the control plane crashes without giving its lease back and comes back with a
node fewer (the runs there lost with it) or more, quotas and priorities change while jobs run,
and jobs are cancelled. After every pass of the leader no GPU is held by two runs unless both
share it within its memory, no running job is recorded on a GPU the inventory lacks, and no
project grows past its quota; once the arrivals stop and the cluster is whole again, every job
finishes. Nodes are cordoned, drained and uncordoned meanwhile: no job is started or moved onto
a cordoned node, and after a pass no job runs on a drained one. The danlu seeds broke an
earlier loop: a move whose stop request failed left its old run on a GPU given to another job
(4); a job on a lost node whose run could not be polled stayed recorded there (5), and its
GPUs, not counted, let a project past its quota (6)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import TERMINAL, user_and_nodes
from workloads import (
    POLICIES,
    QUOTAS,
    check_gpus,
    check_runs_add_up,
    report_running,
    submit_mixed,
    unfinished,
)

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecStatus,
    ExecutorError,
    FakeExecutor,
    FakeWorld,
    Handle,
    JobLaunch,
)
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs, projects
from danlu.server.services import nodes as node_states
from danlu.server.services.projects import Usage, allocation_usage

NOW = 1_000_000.0
DRAIN_STEP = 60.0
"""Seconds between passes once the arrivals and the changes have stopped (30 before): the
queue drains in fewer passes, each still checked and still failing calls."""
INJECTED = "(injected)"
CASES = [
    # ("danlu", 4, False, "sqlite"): its failed stop request is test_reconcile_moves'
    # test_a_move_whose_stop_request_failed_asks_again_and_its_gpu_stays_busy
    # ("danlu", 5, False, "sqlite"): its unreachable run on a lost node is test_node_loss's
    # test_jobs_on_a_node_gone_are_requeued_without_waiting_on_their_runs
    ("danlu", 6, False, "sqlite"),
    # ("danlu", 6, False, "postgresql"): the same loop as on SQLite; the chaos's SQL on
    # PostgreSQL is value-density's case below
    ("tiresias", 13, False, "sqlite"),
    ("danlu", 21, True, "sqlite"),
    # ("value-density", 22, True, "sqlite"): the same loop as on PostgreSQL; cordons on
    # SQLite are danlu's case above
    ("value-density", 22, True, "postgresql"),
]
"""Danlu's seeds 4, 5 and 6 each broke an earlier loop, one way each (see the module's
docstring): seed 6 runs here, the other two bugs each have a test of their own (named
above); the cases with True cordon, drain and uncordon nodes too (from a random stream of
their own, so the other cases run as they always did). Each case runs on one store: its
loop logic is the same on both, and these are the suite's slowest tests; one chaos case on
PostgreSQL records its crashes, lost nodes, failing calls, quota changes and cordons there
(its locks and types)."""


class _Flaky(FakeExecutor):
    """Fails one call in twenty that reaches a run, before doing anything."""

    def __init__(self, inventory: Cluster, world: FakeWorld, rng: random.Random) -> None:
        super().__init__(inventory, world)
        self.rng = rng
        self.failing = True
        self.failures = 0

    def _maybe_fail(self, what: str) -> None:
        if self.failing and self.rng.random() < 0.05:
            self.failures += 1
            raise ExecutorError(f"{what}: executor unreachable {INJECTED}")

    def submit(self, job: JobLaunch) -> Handle:
        self._maybe_fail("submit")
        return super().submit(job)

    def poll(self, handle: Handle) -> ExecStatus:
        self._maybe_fail("poll")
        return super().poll(handle)

    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        self._maybe_fail("preempt")
        super().preempt(handle, grace_seconds)

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        self._maybe_fail("cancel")
        super().cancel(handle, grace_seconds)


def _held(db: Database, nodes: int | None) -> dict[str, Usage]:
    """What each project holds; with ``nodes``, check no running job is recorded on a node
    the inventory (``node-0`` .. ``node-{nodes - 1}``) lacks."""
    held: dict[str, Usage] = {}
    names = {f"node-{i}" for i in range(nodes or 0)}
    with db.read_session() as s:
        for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"], limit=1000):
            name = job.project.name
            held[name] = held.get(name, Usage()) + allocation_usage(job.allocation)
            if nodes is not None and job.state == "RUNNING":
                assert {share["node"] for share in job.allocation} <= names, job.allocation
    return held


def _runs_on(db: Database, node: str) -> set[tuple[str, int]]:
    """The runs (job id, attempt) holding a GPU of ``node``."""
    with db.read_session() as s:
        held = jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"], limit=1000)
        return {(j.id, j.attempt) for j in held if any(x["node"] == node for x in j.allocation)}


def _check_closed(db: Database, closed: dict[str, set[tuple[str, int]]], drained: set[str]) -> None:
    """Every job running on a cordoned node ran there when it was cordoned, and none runs
    on a drained one (every job of the workload is preemptible)."""
    with db.read_session() as s:
        for job in jobs.list_jobs(s, states=["RUNNING"], limit=1000):
            for node in {share["node"] for share in job.allocation} & closed.keys():
                assert (job.id, job.attempt) in closed[node], (job.id, node)
                assert node not in drained, (job.id, node)


def _change_a_node(
    db: Database,
    rng: random.Random,
    count: int,
    closed: dict[str, set[tuple[str, int]]],
    drained: set[str],
    now: float,
) -> None:
    """Cordon, drain or uncordon a node at random."""
    name, action = f"node-{rng.randrange(count)}", rng.choice(["cordon", "drain", "uncordon"])
    if action == "uncordon":
        with db.session() as s:
            node_states.uncordon(s, name)
        closed.pop(name, None)
        drained.discard(name)
        return
    if name not in closed:
        closed[name] = _runs_on(db, name)
    with db.session() as s:
        node_states.cordon(s, name, "chaos", drain=action == "drain", now=now)
    if action == "drain":
        drained.add(name)


@pytest.mark.parametrize(("policy", "seed", "cordons", "backend"), CASES)
def test_a_workload_survives_crashes_lost_nodes_failing_calls_and_quota_changes(
    db: Database, tmp_path: Path, policy: str, seed: int, cordons: bool
) -> None:
    rng = random.Random(seed)
    node_rng = random.Random(seed + 11)
    full = nodes = rng.randint(2, 3)
    world = FakeWorld()
    with db.session() as s:
        alice = user_and_nodes(s, Cluster.homogeneous(nodes, 4, "H100").nodes, NOW)
        for name, q in QUOTAS.items():
            projects.create_project(
                s, name, quota_gpus=q.gpus, quota_gpu_memory=q.gpu_memory, now=NOW
            )
    quota = dict(QUOTAS)
    settings = load_settings(home=tmp_path)

    def control_plane(count: int) -> tuple[_Flaky, Reconciler]:
        inventory = Cluster.homogeneous(count, 4, "H100")
        executor = _Flaky(inventory, world, random.Random(seed + 7))
        chosen = make_policy(policy, **POLICIES[policy])
        return executor, Reconciler(db, executor, settings, policy=chosen, preempt_grace=60.0)

    executor, loop = control_plane(nodes)
    ids: list[str] = []
    steps: dict[str, int] = {}
    failures = lost_runs = 0
    closed: dict[str, set[tuple[str, int]]] = {}  # cordoned node -> the runs there then
    drained: set[str] = set()
    for turn in range(1200):
        now = NOW + world.clock()
        if turn < 80 and rng.random() < 0.5:
            job_id = submit_mixed(db, rng, alice, world, f"j{turn}", now)
            ids += [job_id] if job_id is not None else []
        if turn < 80 and ids and rng.random() < 0.03:
            with db.session() as s:
                victim = jobs.get_job(s, rng.choice(ids))
                if victim.state not in TERMINAL:
                    jobs.cancel_job(s, victim.id, now=now)
        if turn < 80 and rng.random() < 0.04:
            name, gpus = rng.choice(list(QUOTAS)), rng.choice([1.0, 2.0, 3.0, 4.0, None])
            with db.session() as s:
                projects.update_project(s, name, quota_gpus=gpus, priority=rng.randint(0, 2))
            quota[name] = Usage(1e9 if gpus is None else gpus, QUOTAS[name].gpu_memory)
        if cordons and turn < 80 and node_rng.random() < 0.05:
            _change_a_node(db, node_rng, nodes, closed, drained, now)
        if turn == 80:  # every node open again
            for name in list(closed):
                with db.session() as s:
                    node_states.uncordon(s, name)
            closed.clear()
            drained.clear()
        if turn == 80:  # quotas that every job submitted fits in
            with db.session() as s:
                for name, q in QUOTAS.items():
                    projects.update_project(s, name, quota_gpus=max(q.gpus, 4.0))
            quota = {name: Usage(max(q.gpus, 4.0), q.gpu_memory) for name, q in QUOTAS.items()}
        if (20 <= turn < 80 and rng.random() < 0.03) or (turn == 80 and nodes != full):
            # the control plane dies holding its lease and comes back with its last node
            # gone (the runs there gone with it), or back again
            count = nodes - 1 if nodes == full and turn < 80 else full
            executor.failing = False
            for job_id, run in list(world.runs.items()):
                if any(slot.node >= count for slot in run.launch.gpus):
                    lost_runs += executor.poll(Handle(job_id, run.launch.run_attempt)).running
                    del world.runs[job_id]
            nodes = count
            for name in [n for n in closed if int(n.split("-")[1]) >= count]:
                del closed[name]  # gone with its row; back later as a ready node
                drained.discard(name)
            with db.session() as s:
                inventory = Cluster.homogeneous(nodes, 4, "H100")
                cluster.replace_inventory(s, list(inventory.nodes), fake=True, now=now)
            failures += executor.failures
            executor, loop = control_plane(nodes)
        before = _held(db, None)
        report = loop.run_once(now=now)
        assert all(INJECTED in error for error in report.errors), report.errors
        executor.failing = False
        check_gpus(executor, world)
        after = _held(db, nodes if report.leader else None)
        if report.leader:
            _check_closed(db, closed, drained)
        executor.failing = True
        for name, q in quota.items():
            used, was = after.get(name, Usage()), before.get(name, Usage())
            assert used.gpus <= q.gpus + 1e-9 or used.gpus <= was.gpus + 1e-9, (name, used)
        if not report_running(db, steps, NOW, now) and turn > 80:
            break
        world.clock.advance(DRAIN_STEP if turn > 80 else 30.0)
    assert unfinished(db) == {}
    check_runs_add_up(db)
    assert len(ids) >= 15 and failures + executor.failures >= 20 and lost_runs >= 1
