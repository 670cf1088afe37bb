"""What a non-admin sees of other users' jobs on the cluster's GPUs: ``GET /cluster/nodes``
shows that a GPU is taken and by how much, with the ids of the caller's own jobs only (as
``GET /jobs`` lists no other user's job), the others counted; ``GET /cluster/allocations``
lists the caller's own jobs' shares. An admin sees every id."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from helpers import record_round

from conftest import NOW
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.routes import admin as admin_routes
from danlu.server.services import jobs, users


def _one_gpu_job(name: str) -> dict[str, Any]:
    return {"name": name, "command": ["true"], "resources": {"gpus": 1, "gpu_type": "L4"}}


def _two_owners(db: Database) -> tuple[str, str]:
    """A job of alice's and one of bob's, each running on a GPU of ``node-1``."""
    with db.session() as s:
        alice_job = jobs.submit(s, _one_gpu_job("a"), users.get_user(s, "alice"), now=NOW).id
        bob_job = jobs.submit(s, _one_gpu_job("b"), users.get_user(s, "bob"), now=NOW).id
    applied = record_round(db, make_policy("priority"), NOW + 1)
    assert {job.id for job in applied.started} == {alice_job, bob_job}
    return alice_job, bob_job


def _caller(db: Database, name: str) -> Any:
    """The user ``name`` as a route sees its caller (its id and role)."""
    with db.read_session() as s:
        user = users.get_user(s, name)
        return SimpleNamespace(id=user.id, name=user.name, is_admin=user.is_admin)


def _l4_gpus(db: Database, caller: str) -> list[dict[str, Any]]:
    state: Any = SimpleNamespace(db=db)
    listed = admin_routes.list_nodes(_caller(db, caller), state)
    (node,) = (n for n in listed if n["name"] == "node-1")
    gpus: list[dict[str, Any]] = node["gpus"]
    return gpus


def test_a_non_admin_sees_that_a_gpu_is_taken_but_not_by_which_job_of_another_user(
    seeded: Database,
) -> None:
    alice_job, bob_job = _two_owners(seeded)
    for gpu in _l4_gpus(seeded, "bob"):
        assert gpu["allocated_milli"] == 1000 and gpu["allocated_memory"] > 0  # taken
        assert alice_job not in gpu["jobs"]
    seen = {job for gpu in _l4_gpus(seeded, "bob") for job in gpu["jobs"]}
    assert seen == {bob_job}  # their own job's id is shown
    assert sum(gpu["other_jobs"] for gpu in _l4_gpus(seeded, "bob")) == 1
    admin_seen = {job for gpu in _l4_gpus(seeded, "root") for job in gpu["jobs"]}
    assert admin_seen == {alice_job, bob_job}
    assert all(gpu["other_jobs"] == 0 for gpu in _l4_gpus(seeded, "root"))


def test_a_non_admin_lists_only_their_own_jobs_allocations(seeded: Database) -> None:
    alice_job, bob_job = _two_owners(seeded)
    state: Any = SimpleNamespace(db=seeded)
    bob, root = _caller(seeded, "bob"), _caller(seeded, "root")
    assert [a["job_id"] for a in admin_routes.list_allocations(bob, state)] == [bob_job]
    every = {a["job_id"] for a in admin_routes.list_allocations(root, state)}
    assert every == {alice_job, bob_job}
