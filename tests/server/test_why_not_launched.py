"""``danlu why`` (:func:`~danlu.server.services.job_reasons.why`) of a RUNNING job whose current
run is not launched yet (``launched_attempt`` below ``attempt``): placed, it holds its GPUs
but nothing runs, as ``danlu ls`` and ``show`` read ``RUNNING (not launched)``. It said
``running on n1:0``; it now says ``placed on n1:0`` and why nothing runs yet: ``launching``
(the executor's next pass), the run a move left that it waits for, or the stopping jobs
that still hold one of its GPUs. ``running on`` once the run is launched."""

from __future__ import annotations

from typing import Any

from helpers import user_and_nodes
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database, Job, User
from danlu.server.services import jobs
from danlu.server.services.bulk import EventBatch

NOW = 1_000_000.0
NODES = (Node("a", 2, gpu_type("H100")),)


def _share(gpu: int, memory: int = 80 * GiB) -> dict[str, Any]:
    return {"node": "a", "gpu": gpu, "milli": 1000 if memory == 80 * GiB else 250, "memory": memory}


def _placed(
    s: Session, alice: User, name: str, shares: list[dict[str, Any]], launched: bool
) -> Job:
    """A job of ``name`` started on ``shares``, its run launched or not."""
    memory = f"{shares[0]['memory'] // GiB}GiB"
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1, "gpu_memory": memory}}
    job = jobs.submit(s, {"name": name, **body}, alice, now=NOW)
    jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=shares)
    if launched:
        job.launched_attempt = job.attempt
    return job


def test_a_placed_job_says_launching_until_its_run_is_launched(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        job = _placed(s, alice, "fresh", [_share(0)], launched=False)
        assert jobs.why(s, job, now=NOW + 1) == "placed on a:0, launching"
        job.launched_attempt = job.attempt  # the executor's pass took it
        assert jobs.why(s, job, now=NOW + 1) == "running on a:0"


def test_a_not_launched_job_names_the_stopping_jobs_still_on_its_gpus(
    sqlite_db: Database,
) -> None:
    """A memory share placed beside a preempted one (or one being cancelled) waits for it
    to exit; a share beside one that runs on does not."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        preempted = _placed(s, alice, "preempted", [_share(0, 20 * GiB)], launched=True)
        jobs.change_state(s, preempted, JobState.PREEMPTING, "a higher priority", NOW + 1)
        cancelled = _placed(s, alice, "cancelled", [_share(0, 20 * GiB)], launched=True)
        jobs.cancel_job(s, cancelled.id, alice, now=NOW + 1)
        _placed(s, alice, "runs-on", [_share(0, 20 * GiB)], launched=True)
        elsewhere = _placed(s, alice, "elsewhere", [_share(1, 20 * GiB)], launched=True)
        jobs.change_state(s, elsewhere, JobState.PREEMPTING, "a higher priority", NOW + 1)
        waiting = _placed(s, alice, "waiting", [_share(0, 20 * GiB)], launched=False)
        assert jobs.why(s, waiting, now=NOW + 2) == (
            f"placed on a:0 (20.0GiB), not launched yet: waiting for job {preempted.id} to "
            f"free a:0 and job {cancelled.id} to free a:0"
        )
        # its own cancellation is said after it, as for a running job
        jobs.cancel_job(s, waiting.id, alice, now=NOW + 3)
        assert jobs.why(s, waiting, now=NOW + 3).endswith(
            f"job {cancelled.id} to free a:0; cancellation requested"
        )


def test_a_moved_job_says_it_waits_for_the_run_it_left(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        job = _placed(s, alice, "moved", [_share(0)], launched=True)
        jobs.resize(s, job, [_share(1)], now=NOW + 5, events=EventBatch())
        assert job.moved_from is not None
        assert jobs.why(s, job, now=NOW + 6) == (
            "placed on a:1, not launched yet: moved, waiting for the run it left to exit"
        )
