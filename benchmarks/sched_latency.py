"""Latency of one scheduling round at scale: 1,000 nodes x 8 GPUs, 10,000 pending and 2,000
running jobs. Prints p50/p99 milliseconds per policy over repeats (never asserted in tests).

"first" is the round right after the random state was made: it may start and preempt
thousands of jobs at once (the median of ``--first-repeats`` such rounds, each by a new
policy object, so that nothing is cached). "steady" rounds follow one another as in a
running control plane: each applies the previous plan, advances the clock by 60 s, finishes
``--churn`` running jobs and submits as many new ones, and hands the policy a new view (new
tuples; the status objects of unchanged jobs are reused, as danlu's adapters do). One policy
object serves all steady rounds, so policies that keep state across rounds (their rank
order) are measured with it. Building the views is not timed (the adapter's cost, not the
policy's).

    python benchmarks/sched_latency.py [--repeats 100] [--churn 20] [--first-repeats 5]
        [--policies fifo,priority,sjf,tiresias,value-density,danlu] [--fresh-statuses]
        [--preempting] [--default-gc] [--shared FRACTION] [--option KEY=VALUE ...]

The garbage collector runs as in the server's process (:mod:`danlu.server.reconcile`):
the control plane's thresholds (``tune_collector``) and the cyclic collector off in each
timed round and back on between rounds (``collector_paused``), so a full collection lands
between rounds, as it does in the reconcile loop. ``--default-gc``: Python's thresholds and
the collector on throughout, as in a library caller's process; a full collection of the
heap (the statuses, the options and the policy's caches) may then land in a timed round.
``--pause-collector`` pauses the collector in the timed rounds (the default; with
``--default-gc``, Python's thresholds and the rounds paused).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from dataclasses import replace

from danlu.config import parse_option_pairs
from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.spec import MODEL_FAMILIES
from danlu.core.units import GiB
from danlu.sched import ClusterView, JobRequest, JobStatus, Plan, make_policy
from danlu.sched.placement.gang import FreeMap
from danlu.server.reconcile import collector_paused, tune_collector

SIZES = [1, 1, 1, 1, 2, 2, 4, 8]
RUNNING_SIZES = [1, 2, 4, 4, 4, 8]
"""Running jobs average 3.8 GPUs, so 2,000 of them fill ~95% of 8,000 GPUs: a queue of 10,000
jobs exists only when the cluster is (nearly) full, which is the state this measures."""


def shared_request(request: JobRequest, rng: random.Random, fraction: float) -> JobRequest:
    """``request``, or with probability ``fraction`` a request for part of one GPU instead:
    8-36 GiB of its memory, by a model of a family drawn uniformly."""
    if not fraction or rng.random() >= fraction:
        return request
    memory = rng.randint(8, 36) * GiB
    return replace(request, gpus=1, gpu_memory=memory, family=rng.choice(MODEL_FAMILIES))


def build_view(
    nodes: int, gpus: int, pending: int, running: int, seed: int = 0, shared: float = 0.0
) -> ClusterView:
    rng = random.Random(seed)
    cluster = Cluster.homogeneous(nodes, gpus, nodes_per_rack=32)
    empty = ClusterView(time=0.0, cluster=cluster)
    free = FreeMap(empty, "first-fit")
    now = 100_000.0
    running_jobs: list[JobStatus] = []
    for i in range(running):
        size = min(rng.choice(RUNNING_SIZES), free.total_free)
        if size <= 0:
            break
        request = JobRequest(
            id=f"r{i}",
            submit_time=rng.uniform(0, now / 2),
            gpus=size,
            priority=rng.choice([0, 0, 1, 2]),
            seq=i,
            expected_duration=rng.uniform(600, 86_400),
        )
        alloc = free.place(request)
        if alloc is None:
            break
        start = rng.uniform(request.submit_time, now)
        running_jobs.append(
            JobStatus(
                request=request,
                allocation=alloc,
                attained_service=rng.uniform(0, 100_000),
                run_time=rng.uniform(0, 10_000),
                last_start=start,
            )
        )
    pending_jobs = sorted(
        (
            JobStatus(
                request=JobRequest(
                    id=f"p{i}",
                    submit_time=rng.uniform(now / 2, now),
                    gpus=rng.choice(SIZES),
                    priority=rng.choice([0, 0, 1, 2]),
                    seq=running + i,
                    expected_duration=rng.uniform(600, 86_400),
                ),
                attained_service=rng.choice([0.0, 0.0, rng.uniform(0, 200_000)]),
            )
            for i in range(pending)
        ),
        key=lambda j: j.request.submit_time,
    )
    # Adapters number jobs in submission order (JobRequest.seq): renumber after sorting.
    ordered = tuple(
        replace(j, request=shared_request(replace(j.request, seq=running + i), rng, shared))
        for i, j in enumerate(pending_jobs)
    )
    return ClusterView(time=now, cluster=cluster, running=tuple(running_jobs), pending=ordered)


def _take(
    milli: dict[tuple[int, int], int], memory: dict[tuple[int, int], int], alloc: Allocation
) -> None:
    """Count ``alloc``'s shares in the per-GPU compute and memory taken."""
    for share in alloc.shares:
        key = (share.node, share.gpu)
        milli[key] = milli.get(key, 0) + share.milli
        memory[key] = memory.get(key, 0) + share.memory


def moves_that_fit(
    view: ClusterView, plan: Plan, leaving: set[str]
) -> tuple[dict[str, Allocation], dict[str, Allocation]]:
    """The starts and resizes of ``plan`` that can be placed now, each by job id, as the
    server's ``apply_plan`` defers the rest: the jobs ``plan`` preempts keep their GPUs this
    round (they drain), ``leaving`` (preempted a round before) have given theirs back. A move
    that does not fit on what is left of a GPU (its compute or its memory) waits: a start
    stays pending, a resized job keeps its old GPUs (which may hold up another move, and so
    on: to a fixed point). The plan's moves are tried in its order, resizes first."""
    capacity = {
        (n, g): node.gpu_type.memory
        for n, node in enumerate(view.cluster.nodes)
        for g in range(node.gpus)
    }
    moving = {r.job_id for r in plan.resizes}
    olds = {j.id: j.allocation for j in view.running if j.id in moving}
    gone = leaving | moving
    staying = [j.allocation for j in view.running if j.id not in gone]
    order = [(r.job_id, r.allocation) for r in plan.resizes if r.job_id in olds]
    order += [(s.job_id, s.allocation) for s in plan.starts]
    waiting: set[str] = set()
    while True:
        milli: dict[tuple[int, int], int] = {}
        memory: dict[tuple[int, int], int] = {}
        for alloc in [*staying, *(olds[job_id] for job_id in waiting & olds.keys())]:
            _take(milli, memory, alloc)
        placed: list[tuple[str, Allocation]] = []
        for job_id, alloc in order:
            if job_id in waiting:
                continue
            fits = all(
                milli.get((s.node, s.gpu), 0) + s.milli <= MILLI_PER_GPU
                and memory.get((s.node, s.gpu), 0) + s.memory <= capacity[(s.node, s.gpu)]
                for s in alloc.shares
            )
            if not fits:
                waiting.add(job_id)
                if job_id in olds:  # its old GPUs stay its own: count again with them
                    break
                continue
            _take(milli, memory, alloc)
            placed.append((job_id, alloc))
        else:
            starts = {s.job_id for s in plan.starts}
            return (
                {job_id: a for job_id, a in placed if job_id in starts},
                {job_id: a for job_id, a in placed if job_id not in starts},
            )


def apply_plan(
    view: ClusterView,
    plan: Plan,
    churn: int = 0,
    rng: random.Random | None = None,
    draining: set[str] | None = None,
    shared: float = 0.0,
) -> ClusterView:
    """The view after ``plan``, 60 s later: started jobs run, resized ones run on their new
    GPUs, preempted jobs wait, the plan's marks are kept; then ``churn`` running jobs finish
    (all of them, when fewer run) and ``churn`` new jobs are submitted.

    ``draining`` (updated in place): model the server's PREEMPTING state. A preempted job
    keeps its GPUs for one round as a non-preemptible running job (as the server's snapshot
    shows a PREEMPTING one: its GPUs are not the policy's to move) and waits from the round
    after; the set holds the ids of the jobs draining now."""
    started = {s.job_id: s.allocation for s in plan.starts}
    resized = {r.job_id: r.allocation for r in plan.resizes}
    stopped = {p.job_id for p in plan.preempts}
    if draining is None:  # preempted jobs wait at once
        leaving, holding = stopped, set()
    else:  # last round's preempted jobs wait now; this round's drain for a round
        leaving, holding = set(draining), stopped
        draining.clear()
        draining.update(holding)
        # what the plan places on GPUs a draining job still holds waits, as in the server
        started, resized = moves_that_fit(view, plan, leaving)
    if churn and rng is not None and view.running:
        stopped_or_done = set(
            rng.sample([j.id for j in view.running], min(churn, len(view.running)))
        )
        finished = stopped_or_done - stopped - leaving
    else:
        finished = set()
    now = view.time

    def banked(j: JobStatus) -> JobStatus:
        """``j`` with the service of its current run folded in (it stops or restarts now)."""
        return replace(j, attained_service=j.attained_at(now), run_time=j.run_time_at(now))

    running = [
        replace(banked(j), allocation=resized[j.id], last_start=now) if j.id in resized else j
        for j in view.running
        if j.id not in stopped and j.id not in leaving and j.id not in finished
    ]
    running += [  # draining: still on their GPUs, out of the policy's hands
        replace(j, request=replace(j.request, preemptible=False))
        for j in view.running
        if j.id in holding
    ]
    running += [
        replace(j, allocation=started[j.id], last_start=view.time)
        for j in view.pending
        if j.id in started
    ]
    pending = [j for j in view.pending if j.id not in started]
    pending += [
        replace(
            banked(j),
            request=replace(j.request, preemptible=True),
            allocation=Allocation(),
            last_start=None,
        )
        for j in view.running
        if j.id in leaving
    ]
    pending = [
        replace(j, marks={**j.marks, **plan.marks[j.id]}) if j.id in plan.marks else j
        for j in pending
    ]
    running = [
        replace(j, marks={**j.marks, **plan.marks[j.id]}) if j.id in plan.marks else j
        for j in running
    ]
    if churn and rng is not None:
        seq = 1 + max(j.request.seq for j in (*view.running, *view.pending))
        pending += [
            JobStatus(
                request=shared_request(
                    JobRequest(
                        id=f"n{seq + i}",
                        submit_time=view.time + 60.0,
                        gpus=rng.choice(SIZES),
                        priority=rng.choice([0, 0, 1, 2]),
                        seq=seq + i,
                        expected_duration=rng.uniform(600, 86_400),
                    ),
                    rng,
                    shared,
                )
            )
            for i in range(churn)
        ]
    pending.sort(key=lambda j: j.request.seq)
    return ClusterView(
        time=view.time + 60.0, cluster=view.cluster, running=tuple(running), pending=tuple(pending)
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument(
        "--churn", type=int, default=20, help="jobs that finish (and arrive) between rounds"
    )
    parser.add_argument("--policies", default="fifo,priority,sjf,tiresias,value-density,danlu")
    parser.add_argument(
        "--first-repeats",
        type=int,
        default=5,
        help="first rounds timed, each by a new policy object (the median is printed)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "an option given to every policy measured, which each must have "
            "(repeatable), e.g. --policies priority,sjf --option reserve=true"
        ),
    )
    parser.add_argument(
        "--shared",
        type=float,
        default=0.0,
        help="fraction of the pending and arriving jobs that ask for part of one GPU "
        "(8-36 GiB of its memory, a model family drawn uniformly)",
    )
    parser.add_argument(
        "--fresh-statuses",
        action="store_true",
        help="rebuild every job's status object between rounds (what a control plane without "
        "the server's StatusCache would hand the policy: its per-status memos all miss)",
    )
    parser.add_argument(
        "--preempting",
        action="store_true",
        help="preempted jobs hold their GPUs for one round as PREEMPTING (non-preemptible) "
        "jobs before they wait, as in the server: the capacity changes whenever jobs drain",
    )
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="Python's collector thresholds and the collector on in the timed rounds (a "
        "library caller's process), not the server's",
    )
    parser.add_argument(
        "--pause-collector",
        action="store_true",
        help="the collector off in each timed round, as the server runs it (the default; "
        "with --default-gc: Python's thresholds, paused in the rounds)",
    )
    args = parser.parse_args()
    if not args.default_gc:
        tune_collector()
    pause = args.pause_collector or not args.default_gc
    paused = collector_paused if pause else contextlib.nullcontext

    started = time.perf_counter()
    view = build_view(
        args.nodes, args.gpus_per_node, args.pending, args.running, shared=args.shared
    )
    build_ms = (time.perf_counter() - started) * 1000
    used = int(view.usage()[0].sum()) // 1000
    print(
        f"cluster {args.nodes} x {args.gpus_per_node} GPUs, {len(view.running)} running "
        f"({used} GPUs busy), {len(view.pending)} pending; view built in {build_ms:.0f} ms"
    )
    print(
        f"first: the round right after the random state was made (may preempt/start thousands;"
        f" median of {args.first_repeats}, each by a new policy object);\n"
        f"steady: {args.repeats} successive rounds from there, {args.churn} jobs finishing and "
        f"{args.churn} arriving between rounds (what a running control plane sees)"
    )
    print(
        f"{'policy':<14} {'first':>9} {'steady p50':>11} {'steady p99':>11}  "
        "first starts/preempts, steady starts+preempts per round"
    )
    options = parse_option_pairs(args.option, "--option")
    for name in args.policies.split(","):
        firsts: list[float] = []
        for _ in range(args.first_repeats):  # a new policy object each time: nothing cached
            first_policy = make_policy(name, **options)
            with paused():  # a timed round too
                t0 = time.perf_counter()
                first_plan = first_policy.schedule(view)
                firsts.append((time.perf_counter() - t0) * 1000)
        first_ms = statistics.median(firsts)
        rng = random.Random(1)
        draining: set[str] | None = set() if args.preempting else None
        steady = apply_plan(view, first_plan, draining=draining)
        policy = make_policy(name, **options)
        policy.schedule(steady)  # a control plane's policy has seen earlier rounds
        times: list[float] = []
        plan = first_plan
        moves = 0
        for _ in range(args.repeats):
            with paused():
                t0 = time.perf_counter()
                plan = policy.schedule(steady)
                times.append((time.perf_counter() - t0) * 1000)
            moves += len(plan.starts) + len(plan.preempts)
            steady = apply_plan(steady, plan, args.churn, rng, draining, args.shared)
            if args.fresh_statuses:
                steady = replace(
                    steady,
                    running=tuple(replace(j) for j in steady.running),
                    pending=tuple(replace(j) for j in steady.pending),
                )
        print(
            f"{name:<14} {first_ms:>7.1f}ms {statistics.median(times):>9.2f}ms "
            f"{percentile(times, 99):>9.2f}ms  {len(first_plan.starts)}/{len(first_plan.preempts)}"
            f", then {moves / args.repeats:.1f} per round"
        )


if __name__ == "__main__":
    main()
