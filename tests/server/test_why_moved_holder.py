"""``danlu why`` of a job placed on a whole GPU that another job's move left, whose old run
still holds it while it checkpoints within its grace: the store records that run on no GPU
(the moved job's allocation is its new one), so ``why`` said ``launching`` for as long as the
grace. The launch step now records, in the job's ``pending_reason``, the jobs the executor
said hold its GPUs when it refused the launch, and ``why`` names them: by id a job of the
same user, by project another user's (as the scheduler's reasons name other jobs); cleared
once the launch goes through. Against the fake executor, with the SQLite store."""

from __future__ import annotations

from pathlib import Path

from helpers import ScriptedPolicy, user_and_nodes
from helpers import one_gpu as _gpu

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.view import Plan, Resize, Start
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects, users

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 2, "H100")
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _loop(db: Database, tmp_path: Path, mover_owner: str) -> tuple[Reconciler, FakeWorld, str, str]:
    """A loop whose policy starts ``mover`` (of ``mover_owner``, in project ``vision``) on
    GPU 0, then moves it to GPU 1 and starts alice's ``newcomer`` on GPU 0 in one plan (the
    mover checkpoints in 30 s of a 120 s grace), after those two passes; the loop, its
    world, and the ids of the mover and the newcomer."""
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        owner = alice if mover_owner == "alice" else users.create_user(s, mover_owner, now=NOW)
        projects.create_project(s, "vision", now=NOW)
        mover = jobs.submit(s, {"name": "mover", "project": "vision", **BODY}, owner, now=NOW).id
        newcomer = jobs.submit(s, {"name": "newcomer", **BODY}, alice, now=NOW).id
    world = FakeWorld()
    world.script(mover, duration=1000, checkpoint_seconds=30)
    world.script(newcomer, duration=1000)
    policy = ScriptedPolicy(
        [
            Plan(starts=(Start(mover, _gpu(0)),)),
            Plan(resizes=(Resize(mover, _gpu(1)),), starts=(Start(newcomer, _gpu(0)),)),
        ]
    )
    executor = FakeExecutor(INVENTORY, world)
    settings = load_settings(home=tmp_path)
    loop = Reconciler(db, executor, settings, policy=policy, preempt_grace=120.0)
    loop.run_once(now=NOW + 10)  # the mover starts on GPU 0
    loop.run_once(now=NOW + 70)  # moved to GPU 1: its old run checkpoints on GPU 0
    return loop, world, mover, newcomer


def _why(db: Database, job_id: str, t: float) -> tuple[str, str | None]:
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        return jobs.why(s, job, now=t), job.pending_reason


def test_a_gpu_another_user_s_move_left_names_that_job_s_project(
    sqlite_db: Database, tmp_path: Path
) -> None:
    loop, world, _, newcomer = _loop(sqlite_db, tmp_path, mover_owner="bob")
    try:
        said = "not launched yet: waiting for a job of project vision to free node-0:0"
        assert _why(sqlite_db, newcomer, NOW + 71) == (f"placed on node-0:0, {said}", said)
        world.clock.advance(30)  # the old run checkpointed and exited
        assert newcomer in loop.run_once(now=NOW + 100).launched
        assert _why(sqlite_db, newcomer, NOW + 101) == ("running on node-0:0", None)
    finally:
        loop.stop()


def test_a_gpu_the_same_user_s_move_left_names_that_job(
    sqlite_db: Database, tmp_path: Path
) -> None:
    loop, _, mover, newcomer = _loop(sqlite_db, tmp_path, mover_owner="alice")
    try:
        assert _why(sqlite_db, newcomer, NOW + 71)[0] == (
            f"placed on node-0:0, not launched yet: waiting for job {mover} to free node-0:0"
        )
    finally:
        loop.stop()


def test_a_stopping_job_of_another_user_on_a_shared_gpu_is_named_by_its_project(
    sqlite_db: Database,
) -> None:
    """The stopping jobs the store records on a memory share's GPU are named by the same
    rule: they named another user's job by its id, which its owner may not see."""
    share = {"node": "node-0", "gpu": 0, "milli": 250, "memory": 20 * GiB}
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1, "gpu_memory": "20GiB"}}
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        bob = users.create_user(s, "bob", now=NOW)
        projects.create_project(s, "vision", now=NOW)
        theirs = jobs.submit(s, {"name": "theirs", "project": "vision", **body}, bob, now=NOW)
        mine = jobs.submit(s, {"name": "mine", **body}, alice, now=NOW)
        waiting = jobs.submit(s, {"name": "waiting", **body}, alice, now=NOW)
        for job in (theirs, mine, waiting):
            jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=[share])
        for job in (theirs, mine):
            job.launched_attempt = job.attempt
            jobs.change_state(s, job, JobState.PREEMPTING, "a higher priority", NOW + 1)
        assert jobs.why(s, waiting, now=NOW + 2) == (
            "placed on node-0:0 (20.0GiB), not launched yet: waiting for a job of project "
            f"vision to free node-0:0 and job {mine.id} to free node-0:0"
        )
