"""What a job reports becomes what the policy sees: danlu.train's records -> one measurement
per configuration (observe), stored by metrics.ingest, shown in the snapshot's
JobStatus.observed (on SQLite and PostgreSQL) and learned by the danlu policy."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from sqlalchemy import update

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan, Resize, Start
from danlu.server.db import Database, Job
from danlu.server.services import jobs, metrics, observe, users, view
from danlu.server.services.record import apply_plan

NOW = 1_000_000.0
H100 = 80 * GiB


def record(step: int, step_time: float, **over: Any) -> dict[str, Any]:
    """A danlu.train record of one GPU, no accumulation, batch 32."""
    base = {
        "step": step,
        "loss": 1.0,
        "step_time_s": step_time,
        "micro_batch": 32,
        "accumulation": 1,
        "global_batch": 32,
        "world_size": 1,
        "sync_time_s": 0.0,
    }
    return {**base, **over}


def test_a_micro_step_is_the_step_over_its_micro_batches_plus_the_sync() -> None:
    recs = [record(i, t, accumulation=4, global_batch=128) for i, t in enumerate((0.5, 9.0, 0.5))]
    seen = observe.measurement(recs)
    assert seen == {
        "local_bsz": 32.0,
        "accum_steps": 3.0,
        "batch_size": 128.0,
        "num_replicas": 1.0,
        "step_time": 0.125,  # the median step (0.5 s, not the 9 s outlier) over 4 micro-steps
        "sync_time": 0.0,
    }
    two = [record(1, 0.5, world_size=2, accumulation=2, global_batch=128, sync_time_s=0.1)]
    seen2 = observe.measurement(two)
    assert seen2 is not None
    assert seen2["step_time"] == pytest.approx(0.3) and seen2["sync_time"] == pytest.approx(0.1)


def test_a_multi_gpu_step_without_a_measured_sync_is_not_a_measurement() -> None:
    recs = [record(1, 0.5, world_size=2)]
    del recs[0]["sync_time_s"]
    seen = observe.measurement(recs)
    assert seen is not None and "step_time" not in seen and seen["num_replicas"] == 2.0


def test_the_last_configuration_counts_and_unusable_records_are_skipped() -> None:
    recs = [
        record(1, 0.2),
        record(2, 0.4, micro_batch=64, global_batch=64),
        record(3, float("nan")),
        record(4, 0.5, micro_batch=True),
        {"step": 5, "loss": 0.3},
        record(6, 0.6, micro_batch=64, global_batch=64, grad_sqr=2.0, grad_var=8.0),
        {"step": 7, "progress": 0.25, "grad_sqr": 0.0, "grad_var": 1.0},
    ]
    seen = observe.measurement(recs)
    assert seen is not None
    assert (seen["local_bsz"], seen["step_time"]) == (64.0, pytest.approx(0.5))
    assert (seen["grad_sqr"], seen["grad_var"], seen["progress"]) == (2.0, 8.0, 0.25)
    assert observe.measurement([{"step": 1, "loss": 0.1}, record(2, 0.0)]) is None


def test_a_gradient_noise_probe_is_not_the_run_s_configuration_but_its_statistics_count() -> None:
    recs = [
        record(9, 0.4),
        record(10, 0.5, micro_batch=16, accumulation=2, probe=1, grad_sqr=3.0, grad_var=12.0),
    ]
    seen = observe.measurement(recs)
    assert seen is not None
    assert (seen["local_bsz"], seen["accum_steps"], seen["step_time"]) == (32.0, 0.0, 0.4)
    assert (seen["grad_sqr"], seen["grad_var"]) == (3.0, 12.0)
    only = observe.measurement([recs[1]])
    assert only == {"grad_sqr": 3.0, "grad_var": 12.0}


def test_jitter_is_not_stored_again_but_a_move_or_a_new_configuration_is() -> None:
    stored = observe.measurement([record(1, 0.2, grad_sqr=1.0, grad_var=4.0)])
    assert stored is not None
    assert observe.merged(None, stored) == stored
    jitter = observe.measurement([record(2, 0.205)])
    assert jitter is not None and observe.merged(stored, jitter) is None
    slower = observe.measurement([record(3, 0.25)])
    assert slower is not None
    moved = observe.merged(stored, slower)
    assert moved is not None and moved["step_time"] == 0.25 and moved["grad_sqr"] == 1.0
    other = observe.measurement([record(4, 0.205, micro_batch=16, accumulation=2)])
    assert other is not None
    changed = observe.merged(stored, other)
    assert changed is not None
    assert (changed["local_bsz"], changed["grad_var"]) == (16.0, 4.0)
    assert observe.merged(stored, {"progress": 0.5}) == {**stored, "progress": 0.5}


def test_limits_come_from_an_elastic_spec_with_a_global_batch() -> None:
    def spec(**over: Any) -> Any:
        return parse_spec({"name": "j", "command": ["true"], **over})

    assert observe.limits(spec(resources={"gpus": 4}, training={"global_batch_size": 64})) == {}
    assert observe.limits(spec(resources={"gpus": "1..4"})) == {}
    elastic = spec(resources={"gpus": "1..4"}, training={"global_batch_size": 64})
    assert observe.limits(elastic)["init_batch"] == 64.0
    assert observe.limits(elastic)["max_batch"] == 64.0
    wide = spec(
        resources={"gpus": "1..4"}, training={"global_batch_size": 64, "max_batch_size": 512}
    )
    assert (observe.limits(wide)["max_batch"], observe.limits(wide)["max_local_bsz"]) == (
        512.0,
        512.0,
    )
    stored = {"num_replicas": 2.0, "step_time": 0.1, "sync_time": 0.01, "progress": 0.3}
    on_two = [{"node": "a", "gpu": 0}, {"node": "b", "gpu": 0}]
    seen = observe.observed(elastic, stored, on_two)
    assert (seen["step_time"], seen["num_nodes"], seen["init_batch"]) == (0.1, 2.0, 64.0)
    stale = observe.observed(elastic, stored, on_two[:1])  # measured on 2 GPUs, runs on 1
    assert "step_time" not in stale and stale["progress"] == 0.3


def test_the_policy_reads_the_reported_variance_in_its_own_units() -> None:
    """danlu.train reports tr(Sigma) per sample; the policy's gain needs the variance of an
    init_batch gradient. Its gain must then be the AdaScale gain danlu.train applies itself."""
    from danlu.sched.policies.danlu_model import build, remembered
    from danlu.train.scaling import lr_factor

    elastic = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": "1..4"},
            "training": {"global_batch_size": 64, "max_batch_size": 1024},
        }
    )
    stored = observe.measurement([record(1, 0.2, grad_sqr=0.5, grad_var=40.0)])
    assert stored is not None and stored["grad_var"] == 40.0  # stored as reported
    seen = observe.observed(elastic, stored, [{"node": "a", "gpu": 0}])
    assert seen["grad_var"] == pytest.approx(40.0 / 64)
    model = build(remembered({}, {**seen, "num_nodes": 1.0}), seen)
    assert model is not None
    for batch in (64, 128, 512, 1024):
        own = lr_factor("adascale", batch, 64, sigma2=40.0, mu2=0.5)
        assert model.gain(batch) == pytest.approx(own, rel=0.06)  # the model's 5 % steps
    assert model.gain(1024) < 2.2  # the raw tr(Sigma) read as the variance gave 13.5


def test_a_job_that_adapts_its_batch_in_process_is_seen_as_adaptive() -> None:
    """danlu.train's goodput-adaptive batch reports ``adaptive``; the policy then starts the
    job with ``adaptive`` and leaves its batch to it."""
    elastic = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": "1..4"},
            "training": {"global_batch_size": 64, "max_batch_size": 512},
        }
    )
    stored = observe.measurement([record(1, 0.2, adaptive=1)])
    assert stored is not None and stored["adaptive"] == 1.0
    assert "adaptive" not in (observe.measurement([record(1, 0.2)]) or {})
    later = observe.merged(stored, observe.measurement([record(2, 0.2, micro_batch=16)]) or {})
    assert later is not None and later["adaptive"] == 1.0  # kept over a new configuration
    two = [{"node": "a", "gpu": 0}, {"node": "a", "gpu": 1}]
    seen = observe.observed(elastic, stored, two)  # measured on 1 GPU, runs on 2
    assert seen["adaptive"] == 1.0 and "step_time" not in seen
    pending = JobStatus(JobRequest("j", 0.0, gpus=1), observed=observe.limits(elastic) | seen)
    cluster = Cluster.homogeneous(1, 4)
    plan = make_policy("danlu").schedule(ClusterView(60.0, cluster, pending=(pending,)))
    assert [s.adaptive for s in plan.starts] == [True]
    plain = dataclasses.replace(pending, observed=observe.limits(elastic))
    plan = make_policy("danlu").schedule(ClusterView(60.0, cluster, pending=(plain,)))
    assert [s.adaptive for s in plan.starts] == [False]


def _elastic(name: str, gpus: str = "1..4", batch: int | None = 64) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "command": ["true"], "resources": {"gpus": gpus}}
    if batch is not None:
        body["training"] = {"global_batch_size": batch}
    return body


def _on(*gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(0, g, 1000, H100) for g in gpus))


def test_absurd_step_times_and_statistics_are_not_measurements() -> None:
    # a goodput over a step of 1e-320 s, or a gain from statistics of 1e300, is not finite
    assert observe.measurement([record(1, 1e-320)]) is None
    seen = observe.measurement([record(1, 0.2, grad_sqr=1e300, grad_var=1e300)])
    assert seen is not None and "grad_sqr" not in seen and seen["step_time"] == 0.2


def test_a_round_commits_whatever_progress_a_job_reports(seeded: Database) -> None:
    # progress 1e-320 once made the policy's work estimate infinite; the round then
    # failed to commit on PostgreSQL (no infinity in its JSON), for every job, every round
    with seeded.session() as s:
        job_id = jobs.submit(s, _elastic("e"), users.get_user(s, "alice"), now=NOW).id
        apply_plan(s, Plan(starts=(Start(job_id, _on(0), 64),)), NOW)
    policy = make_policy("danlu")
    over = {"global_batch": 64, "micro_batch": 64, "grad_sqr": 1.0, "grad_var": 4.0}
    for step, t, progress in ((1, 100.0, 1e-320), (2, 200.0, 1e-320)):
        with seeded.session() as s:
            reports = [record(step, 0.2, progress=progress, **over)]
            metrics.ingest(s, jobs.get_job(s, job_id), reports, NOW + t)
        with seeded.session() as s:
            snap = view.build_snapshot(s, NOW + t + 1)
            apply_plan(s, policy.schedule(snap.view), NOW + t + 1, snap.withheld, snap)
    with seeded.read_session() as s:
        marks = jobs.get_job(s, job_id).marks
        assert marks and all(math.isfinite(v) for v in marks.values())


def test_a_policy_mark_that_is_not_finite_is_not_stored(seeded: Database) -> None:
    with seeded.session() as s:
        job_id = jobs.submit(s, _elastic("e"), users.get_user(s, "alice"), now=NOW).id
        plan = Plan(starts=(Start(job_id, _on(0), 64),), marks={job_id: {"a": 1.0, "b": math.inf}})
        apply_plan(s, plan, NOW)
    with seeded.read_session() as s:
        assert jobs.get_job(s, job_id).marks == {"a": 1.0}


def test_reports_reach_the_policy_through_the_store(seeded: Database) -> None:
    cache = view.StatusCache()
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job_id = jobs.submit(s, _elastic("e"), alice, now=NOW).id
        rigid = jobs.submit(s, _elastic("r", gpus="2"), alice, now=NOW + 1).id
        apply_plan(s, Plan(starts=(Start(job_id, _on(0, 1), 64),)), NOW + 2)
        apply_plan(s, Plan(starts=(Start(rigid, _on(2, 3)),)), NOW + 2)
        # launched, as the launch loop records it: a run waiting for its launch has run 0 s
        # at each snapshot, a status of its time, never reused
        s.execute(update(Job).values(launched_attempt=Job.attempt))

    def status(t: float, job: str = job_id) -> JobStatus:
        with seeded.session() as s:
            snap = view.build_snapshot(s, t, cache)
            fresh = view.build_snapshot(s, t)
            assert snap.view.running == fresh.view.running  # the cache never goes stale
        return next(j for j in snap.view.running if j.id == job)

    before = status(NOW + 3)
    assert "step_time" not in before.observed and before.observed["init_batch"] == 64.0

    def report(step: int, step_time: float, job: str = job_id) -> None:
        with seeded.session() as s:
            over = {"world_size": 2, "global_batch": 64, "sync_time_s": 0.05}
            metrics.ingest(s, jobs.get_job(s, job), [record(step, step_time, **over)], NOW + step)

    report(10, 0.2)
    first = status(NOW + 11)
    assert first is not before
    assert first.observed["step_time"] == pytest.approx(0.2)
    assert (first.observed["sync_time"], first.observed["num_nodes"]) == (0.05, 1.0)
    report(12, 0.203)  # jitter: the status (and the policy's memo) is reused
    assert status(NOW + 13) is first
    report(14, 0.3)
    slower = status(NOW + 15)
    assert slower is not first and slower.observed["step_time"] == pytest.approx(0.3)

    report(16, 0.3, job=rigid)  # a rigid job is measured but the policy gets nothing
    assert status(NOW + 17, rigid).observed == {}

    with seeded.session() as s:
        snap = view.build_snapshot(s, NOW + 400, cache)
        plan = make_policy("danlu").schedule(snap.view)
    assert plan.marks[job_id]["danlu.c:32"] == pytest.approx(0.25)  # compute = step - sync
    for resize in plan.resizes:
        assert 1 <= resize.allocation.num_gpus <= 4

    with seeded.session() as s:  # a new allocation: the old measurement is gone
        apply_plan(s, Plan(resizes=(Resize(job_id, _on(0), 64),)), NOW + 500)
        assert jobs.get_job(s, job_id).observed is None
    moved = status(NOW + 501)
    assert "step_time" not in moved.observed and moved.observed["max_batch"] == 64.0


def test_the_memory_model_s_micro_batch_limit_bounds_the_policy_s_micro_batches(
    seeded: Database,
) -> None:
    wide = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": "1..4"},
            "training": {"global_batch_size": 64, "max_batch_size": 512},
        }
    )
    assert observe.limits(wide, 48)["max_local_bsz"] == 48.0
    assert observe.limits(wide, 4096)["max_local_bsz"] == 512.0  # never above the batch
    assert observe.limits(wide, None)["max_local_bsz"] == 512.0
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        body = _elastic("m")
        body["training"]["max_batch_size"] = 512
        job_id = jobs.submit(s, body, alice, micro_batch_limit=24, now=NOW).id
        other = jobs.submit(s, _elastic("n"), alice, micro_batch_limit=0, now=NOW + 1).id
        assert jobs.get_job(s, job_id).micro_batch_limit == 24
        assert jobs.get_job(s, other).micro_batch_limit is None
        snap = view.build_snapshot(s, NOW + 2)
    pending = {j.id: j for j in snap.view.pending}
    assert pending[job_id].observed["max_local_bsz"] == 24.0
    assert pending[other].observed["max_local_bsz"] == 64.0
