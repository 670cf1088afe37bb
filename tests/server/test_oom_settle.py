"""How the reconcile loop settles a run that ran out of memory, against the in-memory
executor: one that cannot fit even at its smallest micro-batch (``Outcome.CANNOT_FIT``) ends
the job FAILED at once, also while it is being preempted, unless its cancellation was asked;
another out-of-memory exit is restarted as ever, its reason naming the memory the run had,
which the restart gets again. And the words for that memory (:func:`memory_had`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import one_gpu_loop

from danlu.core.units import GiB
from danlu.executors import FakeWorld, Outcome
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.run_exits import NO_RESTART, memory_had
from danlu.server.services import events, jobs, users

NOW = 1_000_000.0
SHARE = {"command": ["python", "train.py"], "resources": {"gpus": 1, "gpu_memory": "20GiB"}}


def _loop(db: Database, tmp_path: Path, policy: str = "fifo") -> tuple[Reconciler, FakeWorld]:
    """A loop of ``policy`` over a fake executor of one 1-GPU node, its clock at NOW."""
    return one_gpu_loop(db, tmp_path, NOW, policy)


def _submit(db: Database, t: float, **spec: Any) -> str:
    with db.session() as s:
        return jobs.submit(s, {**SHARE, **spec}, users.get_user(s, "alice"), now=t).id


def _job(db: Database, job_id: str) -> tuple[str, int]:
    """(state, restarts) of the job."""
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        return job.state, job.restarts


def _reasons(db: Database, job_id: str) -> list[str]:
    with db.read_session() as s:
        return [event.reason for event in events.list_events(s, job_id)]


def test_a_run_that_cannot_fit_ends_the_job_failed_with_no_restart(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="big", max_restarts=3)
    world.script(job_id, duration=5, outcome=Outcome.CANNOT_FIT)
    try:
        loop.run_once(now=NOW)
        loop.run_once(now=world.clock.advance(5))
        assert _job(db, job_id) == ("FAILED", 0)
        last = _reasons(db, job_id)[-1]
        assert last.startswith("cannot fit its GPU memory: "), last
        assert "it had a 20.0GiB share of 1 GPU: " in last, last
        assert "resources.gpu_memory" in last and last.endswith(NO_RESTART), last
        loop.run_once(now=world.clock.advance(60))
        assert _job(db, job_id) == ("FAILED", 0)  # never launched again
    finally:
        loop.stop()


def test_another_oom_on_a_share_is_restarted_with_the_same_share_and_says_so(
    db: Database, tmp_path: Path
) -> None:
    """An OOM the guard did not judge (a script without danlu.train): restarted, as any
    failure, with the memory it asked for; the reason names it."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="oom", max_restarts=3)
    world.script(job_id, duration=5, outcome=Outcome.OOM)
    try:
        loop.run_once(now=NOW)
        loop.run_once(now=world.clock.advance(5))
        assert _job(db, job_id) == ("PENDING", 1)
        reasons = _reasons(db, job_id)
        assert reasons[-2] == (
            "out of memory (exit code 1); it had a 20.0GiB share of 1 GPU, which a restart "
            "gets again"
        ), reasons
    finally:
        loop.stop()


def test_a_run_that_cannot_fit_while_being_preempted_fails_the_job_too(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _loop(db, tmp_path, "priority")
    low = _submit(db, NOW, name="low", max_restarts=2, resources={"gpus": 1})
    world.script(low, duration=10, outcome=Outcome.CANNOT_FIT, checkpoint_seconds=None)
    try:
        loop.run_once(now=NOW)
        high = _submit(db, NOW + 5, name="high", priority=10, resources={"gpus": 1})
        world.script(high, duration=1000)
        assert loop.run_once(now=world.clock.advance(5)).preempted == [low]
        loop.run_once(now=world.clock.advance(5))  # it ran out of memory within its grace
        assert _job(db, low) == ("FAILED", 0)
        last = _reasons(db, low)[-1]
        assert "it had 1 whole GPU of " in last and "resources.gpu_type" in last, last
        assert last.endswith("during its preemption"), last
    finally:
        loop.stop()


def test_a_run_that_cannot_fit_after_its_cancel_was_asked_ends_the_job_cancelled(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="big", max_restarts=3)
    world.script(job_id, duration=10, outcome=Outcome.CANNOT_FIT, checkpoint_seconds=None)
    try:
        loop.run_once(now=NOW)
        with db.session() as s:
            jobs.cancel_job(s, job_id, now=NOW + 1)
        loop.run_once(now=world.clock.advance(1))
        loop.run_once(now=world.clock.advance(10))
        assert _job(db, job_id) == ("CANCELLED", 0)
    finally:
        loop.stop()


@pytest.mark.parametrize(
    ("rows", "gpu_memory", "words"),
    [
        (
            [{"node": "a", "gpu": 0, "milli": 1000, "memory": 20 * GiB}],
            20 * GiB,
            "a 20.0GiB share of 1 GPU",
        ),
        (
            [{"node": "a", "gpu": g, "milli": 500, "memory": 40 * GiB} for g in (0, 1)],
            None,
            "a 40.0GiB share of each of its 2 GPUs",
        ),
        (
            [{"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB}],
            None,
            "1 whole GPU of 80.0GiB",
        ),
        (
            [{"node": n, "gpu": 0, "milli": 1000, "memory": 80 * GiB} for n in ("a", "b")],
            None,
            "2 whole GPUs of 80.0GiB",
        ),
        (
            [
                {"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB},
                {"node": "b", "gpu": 0, "milli": 1000, "memory": 40 * GiB},
            ],
            None,
            "2 whole GPUs, the smallest of 40.0GiB",
        ),
    ],
    ids=["memory-share", "fraction-shares", "whole", "two-whole", "mixed-sizes"],
)
def test_the_memory_a_run_had_in_words(
    rows: list[dict[str, Any]], gpu_memory: int | None, words: str
) -> None:
    had = memory_had(rows, gpu_memory)
    assert had is not None and had[0] == words
    assert had[1] is ("share" in words)


@pytest.mark.parametrize("rows", [None, [], [{"node": "a", "gpu": 0}], [{"memory": "x"}]])
def test_an_allocation_without_memory_says_nothing(rows: list[dict[str, Any]] | None) -> None:
    assert memory_had(rows, None) is None
