"""The ``optimus`` baseline with the study's oracle, on the Pollux workloads, against the
artifact's published Optimus+Oracle+TunedJobs results: whether the baseline's split and
danlu's simulator together reproduce the published Optimus once they know what its oracle
knew. A diagnostic, not a policy. Prints figures; asserts nothing.

    python benchmarks/optimus_oracle.py [--loads 0.5,1.0,1.5] [--workloads 1,2,3,4]

The oracle replaces the two things the ``optimus`` policy learns online with the simulator's
own profile of the job's application: a job's remaining time on ``n`` GPUs is its
remaining iterations at its tuned batch (the progress left in each epoch over that epoch's
true gain per iteration) times the true iteration time of that batch on ``n`` GPUs packed
four to a node. As in the study, ncf jobs get one GPU at most. Everything else is the
policy as it runs (least GPUs in submission order, one GPU at a time by remaining time
saved, placement, no restart cost in the gain). Columns: the oracle baseline's average and
p99 JCT, the published ones, their ratios, and the online baseline's average for reference.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from danlu_pollux import DATA, FOLDERS, OPTIMUS, add_workload_options, jct_figures, simulate

from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.optimus import OptimusPolicy, SplitJob
from danlu.sched.view import JobStatus
from danlu.sim.elastic import ApplicationProfile, OutOfProfileError, load_profiles
from danlu.sim.workload import ProfiledWork, load_workload

GPUS_PER_NODE = 4
NO_MODEL = dm.JobModel(1, 1, 1, 1, 0.0, 0.0, {}, 0.0, 0.0, 1)
"""Stands for a model: the oracle job predicts from its profile, not from a fitted model."""


@dataclass(frozen=True)
class TrueSplitJob(SplitJob):
    """A job whose remaining time is read off its application's profile."""

    profile: ApplicationProfile | None = None
    done: float = 0.0
    """Progress made, in the profile's units."""

    def seconds(self, gpus: int, gpus_per_node: int) -> float:
        profile = self.profile
        if profile is None or gpus <= 0:
            return math.inf
        nodes = math.ceil(gpus / GPUS_PER_NODE)
        placement = tuple(min(GPUS_PER_NODE, gpus - GPUS_PER_NODE * i) for i in range(nodes))
        try:
            config = profile.rigid_config(gpus, self.batch)
            if config.atomic_bsz < profile.min_local_bsz:
                return math.inf
            step = profile.iteration_time(placement, config)
            iterations = remaining_iterations(profile, self.done, config.batch_size)
        except OutOfProfileError:
            return math.inf
        return iterations * step


@functools.lru_cache(maxsize=65536)
def remaining_iterations(profile: ApplicationProfile, done: float, batch: int) -> float:
    """Iterations at global ``batch`` from progress ``done`` to the end of training: the
    progress left in each epoch over that epoch's true gain per iteration (the same for every
    GPU count that runs that batch, so computed once)."""
    iterations = 0.0
    epoch = profile.epoch_at(done)
    start = done
    while epoch < profile.max_epochs:
        end = profile.epoch_boundaries[epoch]
        iterations += (end - start) / profile.gain(batch, epoch)
        start = end
        epoch += 1
    return iterations


@dataclass
class OracleOptimus(OptimusPolicy):
    """The ``optimus`` policy with :class:`TrueSplitJob` inputs for the jobs of a profile."""

    applications: Mapping[str, str] = field(default_factory=dict)
    """Each job's application, by job id."""
    profiles: Mapping[str, ApplicationProfile] = field(default_factory=dict)

    def _job(
        self,
        job: JobStatus,
        now: float,
        new_marks: dict[str, dict[str, float]],
        blocked: dict[str, str],
    ) -> SplitJob:
        online = super()._job(job, now, new_marks, blocked)
        name = self.applications.get(job.id)
        if name is None or job.request.batch_size is None:
            return online
        profile = self.profiles[name]
        batch = job.request.batch_size
        most = 1 if name == "ncf" else max(1, batch // profile.min_local_bsz)
        done = job.observed.get("progress", 0.0) * profile.target_progress
        return TrueSplitJob(job, 1, most, NO_MODEL, batch, 1.0, profile=profile, done=done)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_workload_options(parser)
    args = parser.parse_args()
    profiles = load_profiles(DATA / "traces")
    print(
        f"{'load':>4} {'workload':>8} {'oracle':>8} {'published':>9} {'ratio':>6} "
        f"{'p99':>9} {'pub p99':>9} {'p99 ratio':>9} {'online':>8} {'seconds':>7}"
    )
    ratios: list[float] = []
    for load in args.loads:
        for number in args.workloads:
            path = DATA / FOLDERS[load] / f"workload-{number}.csv"
            began = time.perf_counter()
            apps = {
                job.request.id: job.work.application
                for job in load_workload(path).jobs
                if isinstance(job.work, ProfiledWork)
            }
            oracle = simulate(path, OracleOptimus(applications=apps, profiles=profiles), profiles)
            avg, p99 = jct_figures(oracle)
            online, _ = jct_figures(simulate(path, OptimusPolicy(), profiles))
            published, published_p99 = OPTIMUS[(load, number)]
            ratios.append(avg / published)
            print(
                f"{load:>4} {number:>8} {avg:>8.1f} {published:>9.1f} {avg / published:>6.3f} "
                f"{p99:>9.1f} {published_p99:>9.1f} {p99 / published_p99:>9.3f} {online:>8.1f} "
                f"{time.perf_counter() - began:>7.0f}",
                flush=True,
            )
    print(
        f"oracle / published: mean {float(np.mean(ratios)):.3f}, "
        f"{min(ratios):.3f}-{max(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
