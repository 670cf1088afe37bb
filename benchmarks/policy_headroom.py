"""Headroom of the ``danlu`` policy on the Pollux workloads: how much of its gap to the
issue's target (average JCT <= 0.8 x Pollux's) an oracle or free restarts would close.

A diagnostic, not a policy: with ``--oracle`` the policy's online model of each job (compute
and sync times fitted to what the job measured, the gradient statistics it last reported) is
replaced by the simulator's own profile of the job's application: the true step and sync
times of every placement and micro-batch, and the true gradient statistics of the epoch the
job is in (not of later epochs: the oracle does not see the noise grow). Everything else is
the policy as it runs: ranking, prices, holds, the remaining-work estimate it integrates from
the goodput the job reports. ``--oracle future`` is ``both`` and, in place of that estimate,
every option's remaining time read off the profile: the job's remaining epochs, each at the
best global batch on that many GPUs (packed on the fewest nodes) for that epoch's true
statistics, so the noise growing over training is seen too. ``--restart-cost`` sets the
restart cost of both the simulator and the policy (0: every move is free). ``--solo`` runs
every job of a workload alone on the cluster, in a simulation of its own, with a fresh
policy: what is left of the gap without contention (the job's own ramp, model and moves).

    PYTHONPATH=src python benchmarks/policy_headroom.py
        [--oracle none|throughput|stats|both|future] [--restart-cost 30] [--solo]
        [--loads 0.5,1.0,1.5] [--workloads 1,2,3,4]

Prints, per run, danlu's average JCT over Pollux's published one and how often the jobs
restarted (resizes plus resumes after a preemption: the mean per job and the most of one job),
then the mean ratio over the runs; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from danlu_pollux import (
    DATA,
    FOLDERS,
    POLLUX,
    add_knob_option,
    add_workload_options,
    knob_settings,
)
from jct_bound import count_rows, epoch_seconds, fastest_iteration

from danlu.core.cluster import Cluster
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.view import JobStatus
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, OutOfProfileError, load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.metrics import JobRecord
from danlu.sim.workload import ProfiledWork, Workload, load_workload

ORACLES = ("none", "throughput", "stats", "both", "future")
_Table = dict[int, tuple[float, int]]  # the policy's per-model table: GPUs -> (goodput, batch)


@dataclass(frozen=True)
class OracleModel(dm.JobModel):
    """A job's online model with its goodput read from the true profile: step and sync
    times (``throughput``) and/or the gradient statistics of ``epoch`` (``stats``)."""

    profile: ApplicationProfile
    epoch: int
    throughput: bool
    stats: bool

    def best_batch(
        self, replicas: int, gpus_per_node: int, nodes: int | None = None
    ) -> tuple[float, int]:
        """As :meth:`JobModel.best_batch` (same candidates, split by
        :func:`~danlu.sched.policies.danlu_model.split_batch`), with true times and/or
        statistics; a placement or batch outside the profile is skipped."""
        if nodes is None:
            nodes = max(1, math.ceil(replicas / max(gpus_per_node, 1)))
        placement = tuple(replicas // nodes + (i < replicas % nodes) for i in range(nodes))
        best_good, best_batch = 0.0, 0
        for batch in self._candidates(replicas):
            split = dm.split_batch(replicas, batch, self.max_local, self.init_batch, self.max_batch)
            if split.atomic < self.min_local or split.batch < self.init_batch:
                continue
            try:
                if self.throughput:
                    step, sync = self.profile.step_time(placement, split.atomic)
                    seconds = step + (step - sync) * split.accum
                else:
                    seconds = self.iteration_time(nodes, split)
                gain = self.profile.gain(split.batch, self.epoch) if self.stats else None
            except OutOfProfileError:
                continue
            good = (self.gain(split.batch) if gain is None else gain) / seconds
            if good > best_good:
                best_good, best_batch = good, split.batch
        return best_good, best_batch


@dataclass(frozen=True)
class HeadroomPolicy(DanluPolicy):
    """The ``danlu`` policy with :class:`OracleModel` in place of its online model."""

    oracle: str = "both"
    applications: Mapping[str, ApplicationProfile] = field(default_factory=dict)
    """Each job's application profile, by job id."""
    _oracles: dict[tuple[str, bool, int], tuple[dm.JobModel, OracleModel, _Table]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Oracle models by (job, optimistic, epoch), with the online model they wrap."""
    _epochs: dict[tuple[str, int], dict[int, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """``future``: per (job, GPUs per node), GPU count -> seconds of each epoch there."""

    def _model(
        self, job: JobStatus, marks: Mapping[str, float], optimistic: bool = False
    ) -> tuple[dm.JobModel | None, _Table]:
        model, table = super()._model(job, marks, optimistic)
        if model is None or self.oracle == "none":
            return model, table
        profile = self.applications[job.id]
        done = job.observed.get("progress", 0.0) * profile.target_progress
        epoch = min(profile.epoch_at(done), profile.max_epochs - 1)
        key = (job.id, optimistic, epoch)
        hit = self._oracles.get(key)
        if hit is not None and hit[0] is model:
            return hit[1], hit[2]
        values = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)}
        throughput = self.oracle in ("throughput", "both", "future")
        if throughput:
            values["max_replicas_seen"] = 1 << 20  # no growth cap: nothing to explore
        oracle = OracleModel(
            **values,
            profile=profile,
            epoch=epoch,
            throughput=throughput,
            stats=self.oracle in ("stats", "both", "future"),
        )
        fresh: _Table = {}
        self._oracles[key] = (model, oracle, fresh)
        return oracle, fresh

    def _options(
        self,
        job: JobStatus,
        marks: Mapping[str, float],
        work: float | None,
        capacity: int,
        gpn: int,
        now: float,
    ) -> list[Option]:
        """With ``future``: the policy's options, each with its remaining time read off the
        profile (restart added unless the option keeps the job's GPUs); options at GPU
        counts the profile cannot run are dropped."""
        options = super()._options(job, marks, work, capacity, gpn, now)
        profile = self.applications.get(job.id)
        if self.oracle != "future" or profile is None:
            return options
        table = self._epochs.setdefault((job.id, gpn), {})
        progress = job.observed.get("progress", 0.0)
        out = []
        for option in options:
            seconds = _remaining(profile, table, progress, option.gpus, gpn)
            if math.isfinite(seconds):
                restart = 0.0 if option.keep or option.in_place else self.restart_cost
                out.append(option._replace(seconds=seconds + restart))
        return out


def _remaining(
    profile: ApplicationProfile,
    table: dict[int, np.ndarray],
    progress: float,
    gpus: int,
    gpn: int,
) -> float:
    """Seconds the job still needs on ``gpus`` GPUs (``gpn`` per node) from ``progress``
    (fraction done); ``table``: the epoch times computed so far, filled in."""
    seconds = table.get(gpus)
    if seconds is None:
        seconds = table[gpus] = _count_epochs(profile, gpus, gpn)
    done = progress * profile.target_progress
    epoch = min(profile.epoch_at(done), profile.max_epochs - 1)
    start = profile.epoch_boundaries[epoch - 1] if epoch else 0.0
    width = profile.epoch_boundaries[epoch] - start
    part = (profile.epoch_boundaries[epoch] - done) / width if width > 0 else 0.0
    return float(part * seconds[epoch] + seconds[epoch + 1 :].sum())


def _count_epochs(profile: ApplicationProfile, gpus: int, gpn: int) -> np.ndarray:
    """Seconds of each epoch on ``gpus`` GPUs packed on ``ceil(gpus / gpn)`` nodes at the
    best (micro-batch, accumulation) for that epoch's statistics (``jct_bound``'s epoch
    times restricted to that one placement); inf where none runs."""
    rows = count_rows(profile, math.ceil(gpus / gpn), gpus)
    return epoch_seconds(profile, fastest_iteration(profile, rows))


def workload_records(
    workload: Workload,
    policy: Callable[[], Policy],
    config: SimConfig,
    profiles: Mapping[str, ApplicationProfile],
    solo: bool = False,
) -> list[JobRecord]:
    """The records of the workload's finished jobs on 16 x 4 GPUs, each policy from
    ``policy()``; ``solo``: every job alone, in a simulation (and with a policy) of its own."""
    parts = (
        [dataclasses.replace(workload, jobs=(job,)) for job in workload.jobs]
        if solo
        else [workload]
    )
    out: list[JobRecord] = []
    for part in parts:
        result = Simulator(Cluster.homogeneous(16, 4), policy(), part, config, profiles).run()
        out.extend(j for j in result.jobs if j.end_time is not None)
    return out


def workload_jcts(
    workload: Workload,
    policy: Callable[[], Policy],
    config: SimConfig,
    profiles: Mapping[str, ApplicationProfile],
    solo: bool = False,
) -> list[float]:
    """The JCTs of :func:`workload_records`."""
    return [j.jct for j in workload_records(workload, policy, config, profiles, solo)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--oracle", choices=ORACLES, default="both")
    parser.add_argument("--restart-cost", type=float, default=30.0)
    parser.add_argument(
        "--solo", action="store_true", help="every job alone on the cluster (no contention)"
    )
    add_workload_options(parser)
    add_knob_option(parser)
    args = parser.parse_args()
    knobs = knob_settings(parser, args)
    if "restart_cost" in knobs:
        parser.error("--set restart_cost: give the restart cost as --restart-cost")
    if args.restart_cost < 0:
        parser.error("--restart-cost: seconds, 0 or more")
    profiles = load_profiles(DATA / "traces")
    print(
        f"oracle {args.oracle}, restart cost {args.restart_cost:g} s, knobs {knobs}"
        + (", every job alone" if args.solo else "")
    )
    ratios: list[float] = []
    for load in args.loads:
        for number in args.workloads:
            workload = load_workload(DATA / FOLDERS[load] / f"workload-{number}.csv")
            apps = {
                job.request.id: profiles[job.work.application]
                for job in workload.jobs
                if isinstance(job.work, ProfiledWork)
            }
            config = SimConfig(interval=60.0, restart_cost=args.restart_cost)
            policy = functools.partial(
                HeadroomPolicy,
                restart_cost=args.restart_cost,
                oracle=args.oracle,
                applications=apps,
                **knobs,
            )
            records = workload_records(workload, policy, config, profiles, solo=args.solo)
            avg = float(np.mean([j.jct for j in records]))
            ratio = avg / POLLUX[(load, number)][0]
            ratios.append(ratio)
            restarts = [j.restarts for j in records]
            print(
                f"{load}x/{number} {avg:8.1f} s  ratio {ratio:.3f}  restarts/job "
                f"{float(np.mean(restarts)):.2f}  max {max(restarts)}",
                flush=True,
            )
    print(f"mean ratio {float(np.mean(ratios)):.3f} (target <= 0.800 on every run)")


if __name__ == "__main__":
    main()
