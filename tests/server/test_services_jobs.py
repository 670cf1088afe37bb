"""Job services: submit/admission, list/get/cancel, change_state and its events, why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danlu.core.errors import InvalidTransitionError, SpecError
from danlu.core.state import TRANSITIONS, JobState
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.errors import AdmissionError, ConflictError, NotFoundError, PermissionDenied
from danlu.server.services import events, jobs, projects, users

NOW = 1_000_000.0  # the same clock as conftest.NOW

SHARE = [{"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]


def spec(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "hello",
        "command": ["python", "-c", "print('hello')"],
        "resources": {"gpus": 1, "gpu_memory": "20GiB"},
        "priority": 0,
    }
    base.update(over)
    return base


def test_submit_minimal_spec(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, spec(), alice, now=NOW)
        job_id = job.id
    with seeded.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.state == "PENDING" and job.restarts == 0
        assert job.gpu_memory_per_gpu == 20 * GiB
        assert job.user.name == "alice" and job.project.name == "default"
        assert jobs.job_spec(job).command == ["python", "-c", "print('hello')"]
        (event,) = events.list_events(s, job_id)
        assert (event.old, event.new) == (None, "PENDING")


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"resources": {"gpus": 7}}, "resources.gpus", "the cluster has 6"),
        ({"resources": {"gpus": 1, "gpu_memory": "100GiB"}}, "resources.gpu_memory", "largest"),
        ({"resources": {"gpus": 5, "gpu_memory": "40GiB"}}, "resources.gpus", "4 such GPUs"),
        ({"resources": {"gpus": 1, "gpu_type": "B300"}}, "resources.gpu_type", "unknown"),
        ({"resources": {"gpus": 1, "gpu_type": "A100"}}, "resources.gpu_type", "no GPUs"),
        ({"resources": {"gpus": 3, "gpu_type": "l4"}}, "resources.gpus", "has 2"),
    ],
)
def test_admission_rejects_what_can_never_fit(
    seeded: Database, over: dict[str, Any], field: str, words: str
) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        with pytest.raises(AdmissionError, match=words) as err:
            jobs.submit(s, spec(**over), alice, now=NOW)
        assert err.value.field == field


def test_invalid_specs_name_the_field(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        for bad, field in [
            (spec(command="python x.py"), "command"),
            (spec(resources={"gpus": -1}), "resources.gpus"),
            (spec(resources={"gpus": 0}), "resources.gpus"),
            (spec(project="nope"), "project"),
            (spec(resources={"gpus": 2, "gpu_fraction": 0.5}), "resources.gpu_fraction"),
        ]:
            with pytest.raises(SpecError) as err:
                jobs.submit(s, bad, alice, now=NOW)
            assert err.value.field == field


def test_quota_rejects_and_defers(seeded: Database) -> None:
    with seeded.session() as s:
        projects.create_project(s, "small", priority=5, quota_gpus=2, now=NOW)
        alice = users.get_user(s, "alice")
        with pytest.raises(AdmissionError, match="quota") as err:
            jobs.submit(s, spec(project="small", resources={"gpus": 3}), alice, now=NOW)
        assert err.value.field == "resources.gpus"
        jobs.submit(s, spec(project="small", resources={"gpus": 2}), alice, now=NOW)


def test_users_see_and_cancel_only_their_jobs(seeded: Database) -> None:
    with seeded.session() as s:
        alice, bob, root = (users.get_user(s, n) for n in ("alice", "bob", "root"))
        a = jobs.submit(s, spec(), alice, now=NOW).id
        b = jobs.submit(s, spec(name="b"), bob, now=NOW + 1).id
        assert [j.id for j in jobs.list_jobs(s, viewer=alice)] == [a]
        assert [j.id for j in jobs.list_jobs(s, viewer=root)] == [b, a]
        with pytest.raises(PermissionDenied):
            jobs.get_job(s, b, alice)
        with pytest.raises(PermissionDenied):
            jobs.cancel_job(s, b, alice, now=NOW)
        with pytest.raises(PermissionDenied):
            jobs.submit(s, spec(user="bob"), alice, now=NOW)
        on_behalf = jobs.submit(s, spec(user="bob"), root, now=NOW)
        assert on_behalf.user.name == "bob"
        with pytest.raises(NotFoundError):
            jobs.get_job(s, "ffffffffffff")
        assert jobs.get_job(s, a[:6]).id == a


def test_a_user_may_have_at_most_max_unfinished_jobs(seeded: Database) -> None:
    with seeded.session() as s:
        alice, bob, root = (users.get_user(s, n) for n in ("alice", "bob", "root"))
        first = jobs.submit(s, spec(), alice, max_unfinished=2, now=NOW).id
        jobs.submit(s, spec(), alice, max_unfinished=2, now=NOW)
        with pytest.raises(ConflictError, match="user alice has 2 unfinished jobs") as info:
            jobs.submit(s, spec(), alice, max_unfinished=2, now=NOW)
        assert "DANLU_MAX_JOBS_PER_USER" in str(info.value)
        with pytest.raises(ConflictError, match="user alice has 2"):  # an admin's on her behalf
            jobs.submit(s, spec(user="alice"), root, max_unfinished=2, now=NOW)
        jobs.submit(s, spec(), bob, max_unfinished=2, now=NOW)  # everyone has their own
        jobs.submit(s, spec(), alice, now=NOW)  # no limit given: a sweep's trial
        jobs.cancel_job(s, first, alice, now=NOW + 1)  # a finished job does not count
        with pytest.raises(ConflictError):  # two unfinished
            jobs.submit(s, spec(), alice, max_unfinished=2, now=NOW + 2)
        jobs.submit(s, spec(), alice, max_unfinished=3, now=NOW + 2)


def test_the_api_refuses_a_submission_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_MAX_JOBS_PER_USER", "1")
    with live_server(tmp_path, start_loops=False) as live, live.client() as c:
        assert c.post("/jobs", json=spec()).status_code == 201
        refused = c.post("/jobs", json=spec(name="more"))
        assert refused.status_code == 409
        assert "has 1 unfinished jobs" in refused.json()["error"]["message"]


def test_list_filters_and_paging(seeded: Database) -> None:
    with seeded.session() as s:
        projects.create_project(s, "p2", now=NOW)
        alice, bob = users.get_user(s, "alice"), users.get_user(s, "bob")
        ids = [jobs.submit(s, spec(name=f"j{i}"), alice, now=NOW + i).id for i in range(5)]
        other = jobs.submit(s, spec(project="p2"), bob, now=NOW + 9).id
        jobs.cancel_job(s, ids[0], alice, now=NOW + 10)
        assert [j.id for j in jobs.list_jobs(s, states=["cancelled"])] == [ids[0]]
        assert [j.id for j in jobs.list_jobs(s, project="p2")] == [other]
        assert len(jobs.list_jobs(s, user="alice")) == 5
        page = jobs.list_jobs(s, user="alice", limit=2, offset=1)
        assert [j.id for j in page] == [ids[3], ids[2]]
        with pytest.raises(SpecError, match="state"):
            jobs.list_jobs(s, states=["DONE"])
        with pytest.raises(SpecError, match="limit"):
            jobs.list_jobs(s, limit=0)


def test_cancel_running_records_intent_then_settles(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, spec(), alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.cancel_job(s, job.id, alice, now=NOW + 2)
        assert job.state == "RUNNING" and job.cancel_requested_at == NOW + 2
        assert [j.id for j in jobs.cancellations(s)] == [job.id]
        assert "cancellation requested" in jobs.why(s, job, NOW + 2)
        jobs.settle_exit(s, job, succeeded=False, exit_code=-15, reason="killed", now=NOW + 3)
        assert job.state == "CANCELLED" and job.allocation is None and job.finished_at == NOW + 3
        assert job.attained_service == pytest.approx(2.0)
        with pytest.raises(ConflictError):
            jobs.cancel_job(s, job.id, alice, now=NOW + 4)


def test_failure_restarts_with_backoff_then_fails(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, spec(max_restarts=1), alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=SHARE)
        jobs.settle_exit(s, job, succeeded=False, exit_code=1, reason="exit 1", now=NOW + 5)
        assert (job.state, job.restarts, job.next_attempt_at) == ("PENDING", 1, NOW + 15)
        assert "backing off" in jobs.why(s, job, NOW + 6)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 20, allocation=SHARE)
        jobs.settle_exit(s, job, succeeded=False, exit_code=1, reason="exit 1", now=NOW + 30)
        assert job.state == "FAILED" and job.exit_code == 1 and job.attempt == 2
        states = [(e.old, e.new) for e in events.list_events(s, job.id)]
        assert states[-1] == ("RUNNING", "FAILED")
        assert events.replay(events.list_events(s, job.id)) is JobState.FAILED


def test_preempted_job_requeues(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, spec(), alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=SHARE)
        job.launched_attempt = job.attempt  # the executor took it: it ran
        jobs.change_state(s, job, JobState.PREEMPTING, "higher priority", NOW + 1)
        assert job.allocation == SHARE  # still held while checkpointing
        jobs.settle_exit(s, job, succeeded=False, exit_code=75, reason="checkpointed", now=NOW + 2)
        assert (job.state, job.preemptions, job.allocation) == ("PENDING", 1, None)
        assert "preempted" in jobs.why(s, job, NOW + 3)


def test_a_job_lost_with_its_node_requeues_without_a_restart(seeded: Database) -> None:
    with seeded.session() as s:
        job = jobs.submit(s, spec(max_restarts=0), users.get_user(s, "alice"), now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=SHARE)
        job.launched_attempt = job.attempt  # the executor took it: it ran
        jobs.settle_exit(
            s, job, succeeded=False, exit_code=None, reason="node n3 left", node_lost=True
        )
        assert (job.state, job.preemptions, job.restarts, job.allocation) == (
            "PENDING",
            1,
            0,
            None,
        )
        states = [(e.old, e.new, e.reason) for e in events.list_events(s, job.id)][-2:]
        assert states == [
            ("RUNNING", "PREEMPTING", "node n3 left"),
            ("PREEMPTING", "PENDING", jobs.RESUME_REASON),
        ]
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 10, allocation=SHARE)
        jobs.cancel_job(s, job.id, now=NOW + 11)  # a cancelled one ends, lost or not
        jobs.settle_exit(s, job, succeeded=False, exit_code=None, reason="lost", node_lost=True)
        assert job.state == "CANCELLED"


def test_job_that_finishes_while_being_preempted_succeeds(seeded: Database) -> None:
    with seeded.session() as s:
        job = jobs.submit(s, spec(), users.get_user(s, "alice"), now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW, allocation=SHARE)
        jobs.change_state(s, job, JobState.PREEMPTING, "higher priority", NOW + 1)
        jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="exited 0", now=NOW + 2)
        assert (job.state, job.allocation) == ("SUCCEEDED", None)  # not re-run


def test_concurrent_change_is_a_conflict(seeded: Database) -> None:
    with seeded.session() as s:
        job_id = jobs.submit(s, spec(), users.get_user(s, "alice"), now=NOW).id
    with seeded.sessionmaker() as one, seeded.sessionmaker() as two:
        second = jobs.get_job(two, job_id)  # loaded earlier (objects outlive the commit)
        two.commit()
        first = jobs.get_job(one, job_id)
        jobs.change_state(one, first, JobState.CANCELLED, "by one", NOW)
        one.commit()
        with pytest.raises(ConflictError):
            jobs.change_state(two, second, JobState.RUNNING, "by two", NOW, allocation=SHARE)
        two.rollback()
    with seeded.read_session() as s:
        assert [e.new for e in events.list_events(s, job_id)] == ["PENDING", "CANCELLED"]


STATES = list(JobState)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from(STATES), min_size=1, max_size=12))
def test_random_state_changes_follow_the_table(seeded: Database, moves: list[JobState]) -> None:
    """Random attempted changes: only table edges happen, and events replay to the state."""
    with seeded.session() as s:
        job = jobs.submit(s, spec(), users.get_user(s, "alice"), now=NOW)
        for i, new in enumerate(moves):
            old = JobState(job.state)
            allowed = new in TRANSITIONS[old]
            try:
                jobs.change_state(s, job, new, f"move {i}", NOW + i, allocation=SHARE)
            except InvalidTransitionError:
                assert not allowed
                assert job.state == old.value
            else:
                assert allowed
        history = events.list_events(s, job.id)
        assert all(
            e.old is None or JobState(e.new) in TRANSITIONS[JobState(e.old)] for e in history
        )
        assert events.replay(history) == JobState(job.state)
        assert (job.allocation is not None) == (job.state in ("RUNNING", "PREEMPTING"))


@pytest.mark.parametrize("succeeded", [True, False])
def test_a_run_s_end_revokes_its_token(seeded: Database, succeeded: bool) -> None:
    """A run's ``DANLU_TOKEN`` dies with the run (its exit settled: SUCCEEDED, or re-queued
    after a failure), so it cannot write into the job once it has ended; a user's token
    stays."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        mine = users.issue_token(s, alice, "laptop", now=NOW)
        job = jobs.submit(s, spec(max_restarts=1), alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        run = users.issue_token(s, alice, f"job {job.id}#1", now=NOW + 1, job_id=job.id)
        assert users.find_token(s, run) is not None
        code = 0 if succeeded else 1
        jobs.settle_exit(s, job, succeeded=succeeded, exit_code=code, reason="exit", now=NOW + 2)
        assert job.state == ("SUCCEEDED" if succeeded else "PENDING")
    with seeded.read_session() as s:
        assert users.find_token(s, run) is None
        assert users.find_token(s, mine) is not None
