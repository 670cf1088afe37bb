"""GPUs a held job grew into are lent: while another job waits, the danlu policy may shrink
the held job back to its size before it grew (not below, and not when nobody waits)."""

from __future__ import annotations

import dataclasses

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_alloc import Option, walk
from danlu.sched.policies.danlu_place import GREW_FROM, MOVES
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}
CLUSTER = Cluster.homogeneous(2, 4)


def grown(grew_from: float) -> JobStatus:
    """Runs on all 8 GPUs since t=0 (held until 360 s: one move), measured there."""
    seen = {
        **LIMITS,
        "target_batch": 1024.0,
        "progress": 0.1,
        "step_time": 0.20,
        "sync_time": 0.05,
        "local_bsz": 128.0,
        "accum_steps": 0.0,
        "batch_size": 1024.0,
        "num_replicas": 8.0,
        "num_nodes": 2.0,
        "grad_sqr": 1.0,
        "grad_var": 50.0,
        "adaptive": 1.0,
    }
    marks = {**dm.remembered({}, seen), MOVES: 1.0, GREW_FROM: grew_from}
    alloc = Allocation.whole_gpus([(n, g) for n in range(2) for g in range(4)])
    request = JobRequest(id="big", submit_time=0.0, gpus=4, seq=0)
    return JobStatus(request=request, allocation=alloc, last_start=0.0, observed=seen, marks=marks)


def waiting() -> JobStatus:
    request = JobRequest(id="small", submit_time=100.0, gpus=4, seq=1, expected_duration=60.0)
    return JobStatus(request=request)


def plan(job: JobStatus, pending: tuple[JobStatus, ...], lend: bool = True) -> Plan:
    view = ClusterView(time=200.0, cluster=CLUSTER, running=(job,), pending=pending)
    return DanluPolicy(lend=lend).schedule(view)


def test_a_waiting_job_gets_the_lent_gpus() -> None:
    out = plan(grown(4.0), (waiting(),))
    assert [(r.job_id, r.allocation.num_gpus) for r in out.resizes] == [("big", 4)]
    assert [(s.job_id, s.allocation.num_gpus) for s in out.starts] == [("small", 4)]
    assert not out.preempts  # shrunk back, never preempted while held
    assert out.marks["big"][GREW_FROM] == 0.0  # a shrink: nothing is lent any more


def test_no_lending_without_a_waiting_job_or_growth() -> None:
    assert not plan(grown(4.0), ()).resizes  # nobody waits: it keeps what it grew into
    held = plan(grown(0.0), (waiting(),))  # its last move was no growth: held as it is
    assert not held.resizes and not held.starts
    off = plan(grown(4.0), (waiting(),), lend=False)
    assert not off.resizes and not off.starts


def test_spare_gpus_need_a_clear_gain() -> None:
    """A job that has GPUs grows into GPUs nobody took (the walk's second pass) only for a
    gain of more than ``spare_gain`` over keeping."""
    keep = Option(4, 1000.0, keep=True)  # costs 900 with the 10 % hysteresis discount
    behind = [Option(16, 50.0)]  # ranked behind (prices GPUs in the first pass), never fits
    jobs = [[keep, Option(8, 870.0)], behind]  # growing is 3 % cheaper than keeping
    grow = {"pinned": [0, -1], "may_grow": [True, False]}
    assert walk(jobs, [0, 1], 8, **grow) == [1, -1]  # type: ignore[arg-type]
    assert walk(jobs, [0, 1], 8, spare_gain=0.05, **grow) == [0, -1]  # type: ignore[arg-type]
    clear = [[keep, Option(8, 800.0)], behind]  # 11 % cheaper: worth the lent GPUs
    assert walk(clear, [0, 1], 8, spare_gain=0.05, **grow) == [1, -1]  # type: ignore[arg-type]


def stuck(moves: float) -> JobStatus:
    """``grown`` with ``moves`` moves and nothing lent: held for good once ``moves`` reaches
    ``max_moves``; its hold, 200 * (1 + moves / 5) s from t = 0, is over at t = 3,000 s for
    ``moves`` up to 70."""
    job = grown(0.0)
    return dataclasses.replace(job, marks={**job.marks, MOVES: moves})


def test_a_job_held_for_good_is_shrunk_not_preempted_while_jobs_wait() -> None:
    def at(time: float, moves: float, **knobs: object) -> Plan:
        view = ClusterView(
            time=time, cluster=CLUSTER, running=(stuck(moves),), pending=(waiting(),)
        )
        return DanluPolicy(max_moves=20, **knobs).schedule(view)  # type: ignore[arg-type]

    shrunk = at(3000.0, 20.0, shrink_stuck=True)
    assert [(r.job_id, r.allocation.num_gpus < 8) for r in shrunk.resizes] == [("big", True)]
    assert [s.job_id for s in shrunk.starts] == ["small"] and not shrunk.preempts
    kept = at(3000.0, 20.0, shrink_stuck=False)  # it keeps the size it has
    assert not kept.resizes and not kept.preempts and not kept.starts
    held = at(600.0, 20.0, shrink_stuck=True)  # within its hold (1,000 s at 20 moves)
    assert not held.resizes and not held.preempts and not held.starts
    # a job that needs all 8 GPUs: one not held for good (19 moves) is preempted for it
    wide = JobStatus(
        request=JobRequest(id="wide", submit_time=100.0, gpus=8, seq=1, expected_duration=60.0)
    )
    for moves, preempted in ((19.0, ["big"]), (20.0, [])):
        view = ClusterView(time=3000.0, cluster=CLUSTER, running=(stuck(moves),), pending=(wide,))
        out = DanluPolicy(max_moves=20, shrink_stuck=True).schedule(view)
        assert [p.job_id for p in out.preempts] == preempted
