"""danlu's policy inside the Pollux artifact's own simulator: a cross-check of danlu's.

    python benchmarks/artifact_crosscheck.py --artifact DIR [--loads 0.5,1.0,1.5]
        [--workloads 1,2,3,4] [--set KNOB=VALUE ...] [--by-application]

Pollux's published averages come from the simulator of its OSDI'21 artifact (public
``petuum/adaptdl``, branch ``osdi21-artifact``, folder ``simulator``). ``danlu_pollux.py``
compares danlu against them in danlu's own simulator. This script runs the same ``danlu``
policy in the artifact's simulator instead, so a ratio to Pollux's figures can be read on
the very simulator that produced them, next to the ratio in danlu's simulator for the same
run (``ours/art``: how danlu's simulator's average compares with the artifact's).

In the artifact's runs the artifact decides everything but the allocations: its jobs pick
their batch with its own model (as under Pollux), restarts cost its 30 s, epochs end and
JCTs are measured as in its published runs. danlu's policy sees what it sees in production
(``JobStatus.observed``: the job's limits, its progress, its step and sync times and
gradient statistics at its current placement and batch) and its GPU counts and placements
become the artifact's allocations; the batch sizes in its plan are not used.

DIR is the artifact's ``simulator`` folder. It needs a Python with autograd, pandas and
scipy (its requirements less pymoo and seaborn: the artifact's Pollux policy is not run; a
stand-in replaces its module). Prints figures; asserts nothing. A 1.0x run takes a few
minutes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from danlu_pollux import (
    DATA,
    FOLDERS,
    POLLUX,
    add_knob_option,
    add_workload_options,
    knob_settings,
    per_application,
    simulate,
)

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Resize, Start
from danlu.sim.elastic import ApplicationProfile, load_profiles

NODES, GPUS_PER_NODE, INTERVAL = 16, 4, 60


class _PolicyStandIn:
    """Takes the place of the artifact's ``PolluxPolicy`` class, whose module needs pymoo.

    The artifact's ``Cluster`` sets its jobs up the Pollux way (adaptive batch, NCF at its
    fixed batch) for instances of that class, so the bridge below derives from it."""


def load_artifact(folder: Path) -> types.ModuleType:
    """Import the artifact's ``simulator`` module from ``folder``."""
    if not (folder / "simulator.py").is_file() or not (folder / "traces").is_dir():
        raise SystemExit(
            f"--artifact: {folder} is not the artifact's simulator folder (it needs "
            "simulator.py and traces/); pass the 'simulator' folder of petuum/adaptdl's "
            "osdi21-artifact branch"
        )
    stand_in = types.ModuleType("pollux")
    stand_in.PolluxPolicy = _PolicyStandIn  # type: ignore[attr-defined]
    sys.modules["pollux"] = stand_in
    sys.path.insert(0, str(folder.resolve()))
    try:
        import pandas

        if not hasattr(pandas.DataFrame, "append"):  # removed in pandas 2; the artifact uses it
            pandas.DataFrame.append = _append
        return importlib.import_module("simulator")
    except ImportError as exc:
        raise SystemExit(
            f"--artifact: importing the artifact failed ({exc}); it needs autograd, pandas "
            "and scipy: pip install autograd pandas scipy"
        ) from None


def _append(frame: Any, other: Any, ignore_index: bool = False) -> Any:
    import pandas

    return pandas.concat([frame, other], ignore_index=ignore_index)


class ArtifactBridge(_PolicyStandIn):
    """The artifact's policy interface (``optimize``) answered by a ``DanluPolicy``.

    It keeps what danlu's simulator keeps for a job between rounds (allocation, marks,
    service and run time, preemptions) and builds the policy's view from the artifact's
    jobs each round."""

    def __init__(self, policy: DanluPolicy, workload: Any) -> None:
        self.policy = policy
        self.cluster = Cluster.homogeneous(NODES, GPUS_PER_NODE)
        self.artifact_cluster: Any = None
        self.rows = {row.name: row for row in workload.itertuples()}
        self.allocations: dict[str, Allocation] = {}
        self.marks: dict[str, dict[str, float]] = {}
        self.attained: dict[str, float] = {}
        self.run_time: dict[str, float] = {}
        self.last_start: dict[str, float] = {}
        self.preemptions: dict[str, int] = {}

    def observed(self, job: Any) -> dict[str, float]:
        """What ``danlu.train`` would report for this artifact job (see ``ProfiledProgress``)."""
        app = job.application
        seen = {
            "init_batch": float(app.init_batch_size),
            "max_batch": float(app.max_batch_size),
            "min_local_bsz": float(app.min_local_bsz),
            "max_local_bsz": float(app.max_local_bsz),
            "target_batch": float(job.target_batch_size or self.rows[job.name].batch_size),
            "progress": min(1.0, job.progress / app.get_progress(app.max_epochs)),
        }
        if job.target_batch_size is None:
            seen["adaptive"] = 1.0
        placement = tuple(n for n in job.placement if n)
        if placement and job.completion_time is None:
            step, sync = app.get_throughput(placement, job.atomic_bsz)
            batch = sum(placement) * job.atomic_bsz * (job.accum_steps + 1)
            sqr, var = app.get_grad_stats(batch, min(job.epoch, app.max_epochs - 1))
            seen.update(
                step_time=float(step),
                sync_time=float(sync),
                local_bsz=float(job.atomic_bsz),
                accum_steps=float(job.accum_steps),
                batch_size=float(batch),
                num_replicas=float(sum(placement)),
                num_nodes=float(len(placement)),
                grad_sqr=float(sqr),
                grad_var=float(var),
            )
        return seen

    def optimize(
        self, job_infos: dict[str, Any], node_infos: Any, prev: Any, template: Any
    ) -> tuple[dict[str, list[int]], int]:
        """One round: the artifact's active jobs in, their node lists out."""
        now = float(self.artifact_cluster.current_time)
        running: list[JobStatus] = []
        pending: list[JobStatus] = []
        for seq, job in enumerate(self.artifact_cluster.jobs):
            if job.name not in job_infos:
                self.allocations.pop(job.name, None)  # completed (or not submitted yet)
                continue
            row = self.rows[job.name]
            status = JobStatus(
                request=JobRequest(
                    id=job.name,
                    submit_time=float(job.submission_time),
                    gpus=int(row.num_replicas),
                    seq=seq,
                    batch_size=int(row.batch_size),
                ),
                allocation=self.allocations.get(job.name, Allocation()),
                attained_service=self.attained.get(job.name, 0.0),
                run_time=self.run_time.get(job.name, 0.0),
                last_start=self.last_start.get(job.name),
                preemptions=self.preemptions.get(job.name, 0),
                marks=dict(self.marks.get(job.name, {})),
                observed=self.observed(job),
            )
            (running if status.running else pending).append(status)
        plan = self.policy.schedule(ClusterView(now, self.cluster, tuple(running), tuple(pending)))
        for preempt in plan.preempts:
            self._stop(preempt.job_id, now)
            self.preemptions[preempt.job_id] = self.preemptions.get(preempt.job_id, 0) + 1
        for resize in plan.resizes:
            self._stop(resize.job_id, now)
        changes: list[Resize | Start] = [*plan.resizes, *plan.starts]
        for change in changes:
            self.allocations[change.job_id] = change.allocation
            self.last_start[change.job_id] = now
        for job_id, marks in plan.marks.items():
            self.marks.setdefault(job_id, {}).update(marks)
        nodes = {
            job_id: sorted(share.node for share in alloc.shares)
            for job_id, alloc in self.allocations.items()
        }
        return nodes, NODES

    def _stop(self, job_id: str, now: float) -> None:
        alloc = self.allocations.pop(job_id)
        started = self.last_start.pop(job_id, None)
        if started is not None:
            self.run_time[job_id] = self.run_time.get(job_id, 0.0) + now - started
            self.attained[job_id] = self.attained.get(job_id, 0.0) + alloc.num_gpus * (
                now - started
            )


def run_in_artifact(
    artifact: types.ModuleType, path: Path, knobs: dict[str, Any]
) -> dict[str, float]:
    """Every job's JCT of one workload run by danlu in the artifact's simulator, by name."""
    import pandas

    workload = pandas.read_csv(path)
    bridge = ArtifactBridge(DanluPolicy(**knobs), workload)
    cluster = artifact.Cluster(workload, bridge, NODES, num_gpus=GPUS_PER_NODE)
    bridge.artifact_cluster = cluster
    while not cluster.all_complete():
        cluster.step(INTERVAL)
    return {name: float(jct) for name, jct in cluster.get_jcts().items()}


def run_in_danlu(
    path: Path, knobs: dict[str, Any], profiles: Mapping[str, ApplicationProfile]
) -> dict[str, float]:
    """The same run in danlu's simulator (as ``danlu_pollux.py`` runs it), by job id."""
    result = simulate(path, DanluPolicy(**knobs), profiles)
    return {j.id: j.jct for j in result.jobs if j.end_time is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, metavar="DIR")
    add_workload_options(parser)
    parser.add_argument(
        "--by-application",
        action="store_true",
        help="after each run, each application's mean JCT in the artifact / in danlu's "
        "simulator, and what it adds to the difference of the averages",
    )
    add_knob_option(parser)
    args = parser.parse_args()
    knobs = knob_settings(parser, args)
    artifact = load_artifact(args.artifact)
    profiles = load_profiles(DATA / "traces")
    print(
        f"{'load':>4} {'workload':>8} {'art avg':>9} {'ratio':>6} {'art p99':>9} "
        f"{'p99 ok':>6} {'ours avg':>9} {'ratio':>6} {'ours/art':>8} {'pollux avg':>10} "
        f"{'pollux p99':>10} {'art s':>6}"
    )
    in_artifact: list[float] = []
    in_danlu: list[float] = []
    met = 0
    for load in args.loads:
        for number in args.workloads:
            path = DATA / FOLDERS[load] / f"workload-{number}.csv"
            started = time.perf_counter()
            art_jcts = run_in_artifact(artifact, path, knobs)
            seconds = time.perf_counter() - started
            own_jcts = run_in_danlu(path, knobs, profiles)
            art, ours = np.array(list(art_jcts.values())), np.array(list(own_jcts.values()))
            pavg, pp99 = POLLUX[(load, number)]
            avg, p99, own = float(art.mean()), float(np.percentile(art, 99)), float(ours.mean())
            in_artifact.append(avg / pavg)
            in_danlu.append(own / pavg)
            met += p99 <= pp99
            print(
                f"{load:>4} {number:>8} {avg:>9.1f} {avg / pavg:>6.3f} {p99:>9.1f} "
                f"{'yes' if p99 <= pp99 else 'no':>6} {own:>9.1f} {own / pavg:>6.3f} "
                f"{own / avg:>8.3f} {pavg:>10.1f} {pp99:>10.1f} {seconds:>6.0f}",
                flush=True,
            )
            if args.by_application:
                print(per_application(art_jcts, own_jcts), flush=True)
    print(
        f"in the artifact: mean ratio {float(np.mean(in_artifact)):.3f}, p99 ok "
        f"{met}/{len(in_artifact)}; in danlu's simulator: mean ratio "
        f"{float(np.mean(in_danlu)):.3f}"
    )


if __name__ == "__main__":
    main()
