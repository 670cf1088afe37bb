"""A project's or a user's quota lowered below what its running jobs hold: they keep their
GPUs (no preemption for it), and its waiting jobs wait until the use falls under the new
quota; a member removed from a project keeps the jobs they have there."""

from __future__ import annotations

import pytest
from helpers import record_round, user_and_nodes
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.errors import PermissionDenied
from danlu.server.services import jobs, members, projects, users
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
BIG = Node("a", 8, gpu_type("H100"))
GPU = 80 * GiB
BODY = {"command": ["python", "train.py"], "project": "vision"}


def _gpu(g: int) -> dict[str, object]:
    return {"node": "a", "gpu": g, "milli": 1000, "memory": GPU}


def _withheld(db: Database, job_id: str, t: float) -> str:
    """Why the snapshot at ``t`` leaves the pending job ``job_id`` out (a KeyError if not)."""
    with db.read_session() as s:
        return build_snapshot(s, t).withheld[job_id]


LOWERED = {
    "project": "project 'vision' GPU quota: {used} in use + 1 asked > 2",
    "project memory": (
        f"project 'vision' GPU memory quota: {{used_bytes}} bytes in use + {GPU} asked > {2 * GPU}"
    ),
    "user": "user 'alice' GPU quota: {used} in use + 1 asked > 2",
}


def _lower(s: Session, whose: str, gpus: int) -> None:
    """Set the quota ``whose`` names to ``gpus`` GPUs' worth."""
    if whose == "project":
        projects.update_project(s, "vision", quota_gpus=gpus)
    elif whose == "project memory":
        projects.update_project(s, "vision", quota_gpu_memory=gpus * GPU)
    else:
        users.set_quota(s, "alice", gpus)


@pytest.mark.parametrize("whose", sorted(LOWERED))
def test_running_jobs_keep_their_gpus_and_new_ones_wait_under_a_lowered_quota(
    db: Database, whose: str
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (BIG,), T)
        projects.create_project(s, "vision", now=T)
        _lower(s, whose, 4)
        running = []
        for i in range(2):
            job = jobs.submit(s, {"name": f"r{i}", "resources": {"gpus": 2}, **BODY}, alice, now=T)
            jobs.change_state(
                s, job, JobState.RUNNING, "go", T, allocation=[_gpu(2 * i), _gpu(2 * i + 1)]
            )
            running.append(job.id)
        waiting = jobs.submit(
            s, {"name": "w", "resources": {"gpus": 1}, **BODY}, alice, now=T + 1
        ).id
        _lower(s, whose, 2)
    applied = record_round(db, make_policy("fifo"), T + 10)
    assert applied.started == [] and applied.preempted == [] and applied.resized == []
    said = LOWERED[whose]
    assert _withheld(db, waiting, T + 10) == (
        "waiting for quota: " + said.format(used=4, used_bytes=4 * GPU)
    )
    with db.read_session() as s:
        assert {jobs.get_job(s, j).state for j in running} == {"RUNNING"}
    with db.session() as s:  # one ends: 2 in use, still no room for 1 more
        jobs.change_state(s, jobs.get_job(s, running[0]), JobState.SUCCEEDED, "done", T + 20)
    applied = record_round(db, make_policy("fifo"), T + 30)
    assert applied.started == []
    assert _withheld(db, waiting, T + 30).endswith(said.format(used=2, used_bytes=2 * GPU))
    with db.session() as s:
        jobs.change_state(s, jobs.get_job(s, running[1]), JobState.SUCCEEDED, "done", T + 40)
    applied = record_round(db, make_policy("fifo"), T + 50)
    assert [j.id for j in applied.started] == [waiting]


def test_a_member_removed_keeps_the_jobs_they_have_but_submits_no_more(db: Database) -> None:
    with db.session() as s:
        admin = user_and_nodes(s, (BIG,), T)
        bob = users.create_user(s, "bob", now=T)
        vision = projects.create_project(s, "vision", now=T)
        members.set_members(s, vision, ["bob"])
        run = jobs.submit(s, {"name": "run", "resources": {"gpus": 1}, **BODY}, bob, now=T)
        jobs.change_state(s, run, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        queued = jobs.submit(s, {"name": "q", "resources": {"gpus": 1}, **BODY}, bob, now=T).id
        members.set_members(s, vision, [admin.name])
    applied = record_round(db, make_policy("fifo"), T + 10)
    assert [j.id for j in applied.started] == [queued] and applied.preempted == []
    with db.session() as s, pytest.raises(PermissionDenied, match="not a member"):
        jobs.submit(
            s,
            {"name": "new", "resources": {"gpus": 1}, **BODY},
            users.get_user(s, "bob"),
            now=T + 20,
        )
