"""Checks of what :class:`~danlu.sim.engine.Simulator` is built from, through the Python
API: an argument of the wrong type or an impossible value is a :class:`ConfigError` naming
the argument and the fix when the simulator is built. Before, a wrong type failed deep
inside :meth:`~danlu.sim.engine.Simulator.run` (a policy name given as a string raised
``AttributeError: 'str' object has no attribute 'schedule'`` at the first round, a list of
jobs for the workload an AttributeError on ``jobs``), a ``config`` or ``profiles`` that
happened to be empty was silently replaced by the defaults, and jobs out of submission
order were let in only when every job listed before them had arrived."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.core.values import quoted
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile
from danlu.sim.interference import Interference
from danlu.sim.setting_types import check_real
from danlu.sim.simjob import model_of
from danlu.sim.workload_jobs import ProfiledWork, RigidWork, Workload, WorkloadJob


def _got(value: Any) -> str:
    """How a message shows a refused ``value``: its text, cut short, and its type."""
    return f"got {quoted(value)} ({type(value).__name__})"


def check_simulator_inputs(
    cluster: Any,
    policy: Any,
    workload: Any,
    config: Any,
    profiles: Any,
    on_progress: Any,
) -> None:
    """Refuse :class:`~danlu.sim.engine.Simulator`'s arguments unless ``cluster`` is a
    :class:`Cluster`, ``policy`` a scheduling policy (a ``name`` and a ``schedule(view)``
    method), ``workload`` a :class:`Workload` whose jobs are :class:`WorkloadJob` s in
    submission order, ``config`` a :class:`SimConfig` or None, ``profiles`` a mapping of
    application names to :class:`ApplicationProfile` s or None, and ``on_progress`` a
    callable or None; the :class:`ConfigError` names the argument and the fix."""
    if not isinstance(cluster, Cluster):
        raise ConfigError(
            f"Simulator: cluster must be a Cluster, e.g. Cluster.homogeneous(16, 4); "
            f"{_got(cluster)}"
        )
    if not (
        callable(getattr(policy, "schedule", None))
        and isinstance(getattr(policy, "name", None), str)
    ):
        raise ConfigError(
            "Simulator: policy must be a scheduling policy (an object with a name and a "
            f"schedule(view) method), e.g. make_policy('fifo'); {_got(policy)}"
        )
    _check_workload(workload)
    if config is not None and not isinstance(config, SimConfig):
        raise ConfigError(
            "Simulator: config must be a SimConfig, e.g. SimConfig(interval=60.0), or None "
            f"for the defaults; {_got(config)}"
        )
    _check_profiles(profiles)
    if on_progress is not None and not callable(on_progress):
        raise ConfigError(
            "Simulator: on_progress must be a function called as (sim_time, finished_jobs, "
            f"total_jobs), or None; {_got(on_progress)}"
        )


def _check_workload(workload: Any) -> None:
    """Refuse a workload that is no :class:`Workload`, whose ``jobs`` are no list or tuple
    of :class:`WorkloadJob` s, that repeats a job id, or whose jobs are out of submission
    order (the simulator lets jobs in in list order: one listed before an earlier
    submission held it back), or whose requests' ``seq`` do not increase in list order (the
    engine's queue is ordered by it)."""
    if not isinstance(workload, Workload):
        raise ConfigError(
            "Simulator: workload must be a Workload, e.g. load_workload(path) or "
            f"synthetic_workload(); {_got(workload)}"
        )
    jobs = workload.jobs
    if not isinstance(jobs, tuple | list):
        raise ConfigError(
            "Simulator: workload.jobs must be a tuple of WorkloadJobs in submission order; "
            f"{_got(jobs)}"
        )
    for index, job in enumerate(jobs):
        if not isinstance(job, WorkloadJob):
            raise ConfigError(
                f"Simulator: workload.jobs[{index}] must be a WorkloadJob; {_got(job)}"
            )
        _check_job(index, job)
    counts = Counter(job.request.id for job in jobs)
    repeated = sorted(name for name, n in counts.items() if n > 1)
    if repeated:
        raise ConfigError(
            f"Simulator: workload: job ids must be unique; {', '.join(repeated[:5])} repeat"
        )
    previous: WorkloadJob | None = None
    for job in jobs:
        if previous is not None and job.request.submit_time < previous.request.submit_time:
            raise ConfigError(
                f"Simulator: workload.jobs must be in submission order, but job "
                f"{job.request.id!r} (submitted at {job.request.submit_time:g} s) comes after "
                f"job {previous.request.id!r} (at {previous.request.submit_time:g} s); sort "
                "the jobs by request.submit_time"
            )
        if previous is not None and job.request.seq <= previous.request.seq:
            # the engine keeps its queue ordered by seq: two of one seq (JobRequest's
            # default is 0) made it drop the wrong job from the queue, and a policy that
            # started any but the oldest was then told 'started X, which is not pending'
            raise ConfigError(
                f"Simulator: workload.jobs[*].request.seq must increase in list order, but "
                f"job {job.request.id!r} has seq {job.request.seq} after job "
                f"{previous.request.id!r}'s {previous.request.seq}; number the jobs with "
                "in_submission_order(jobs), as load_workload does"
            )
        previous = job


def _check_job(index: int, job: WorkloadJob) -> None:
    """Refuse a job whose submission time, duration or time limit is no time the clock can
    reach, as a :class:`ConfigError` naming it (the workload files' loaders refuse such
    values; a workload built in code was not checked): a NaN submission time raised a bare
    ValueError, a negative one was let in at the first tick with its wait counted from
    before the clock's start, a NaN or infinite duration left the job running for ever
    with the run ended as if it were done, a negative one ended it before its start, and
    a NaN or non-positive time limit cancelled it at its start."""
    where = f"Simulator: workload.jobs[{index}] (job {job.request.id!r})"
    submit = job.request.submit_time
    clock = " (the simulated clock starts at 0)"
    _check_seconds(f"{where}: request.submit_time", submit, "0.0", after=clock)
    work = job.work
    if isinstance(work, RigidWork):
        _check_seconds(f"{where}: work.duration", work.duration, "3600.0")
    elif not isinstance(work, ProfiledWork):
        raise ConfigError(
            f"{where}: work must be a RigidWork(duration) or a ProfiledWork(application, "
            f"batch_size); {_got(work)}"
        )
    if job.time_limit is not None:  # None: no limit
        limit, none = job.time_limit, ", or None for no limit"
        _check_seconds(f"{where}: time_limit", limit, "3600.0", above_zero=True, after=none)


def _check_seconds(
    field: str, value: float, example: str, *, above_zero: bool = False, after: str = ""
) -> None:
    """Refuse ``value`` of ``field`` unless it is a finite number of seconds, 0 or more (above
    0 with ``above_zero``), as a :class:`ConfigError` naming the field (``after``: more said
    of the bound)."""
    check_real(field, value, f"{example} (seconds)")
    if not (math.isfinite(value) and (value > 0 if above_zero else value >= 0)):
        bound = "above 0" if above_zero else ">= 0"
        raise ConfigError(f"{field} must be a finite number of seconds {bound}{after}, got {value}")


def _check_profiles(profiles: Any) -> None:
    """Refuse ``profiles`` unless it is None or maps application names (strings, as a
    workload's ``application`` column gives them) to :class:`ApplicationProfile` s."""
    if profiles is None:
        return
    if not isinstance(profiles, Mapping):
        raise ConfigError(
            "Simulator: profiles must be a mapping of application names to "
            "ApplicationProfiles, e.g. load_profiles(traces_dir), or None; "
            f"{_got(profiles)}"
        )
    for name, profile in profiles.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"Simulator: profiles: the application name {quoted(name)} must be a string "
                "(a workload's application name), or no job finds its profile"
            )
        if not isinstance(profile, ApplicationProfile):
            raise ConfigError(
                f"Simulator: profiles[{name!r}] must be an ApplicationProfile, e.g. "
                f"load_profile(folder); {_got(profile)}"
            )


def check_named_models(workload: Workload, interference: Interference | None) -> None:
    """With an interference model, every model a job names must be one it measured."""
    if interference is None:
        return
    known = interference.models
    for wj in workload.jobs:
        name = model_of(wj)
        if name and name not in known:
            raise ConfigError(
                f"job {wj.request.id} names model {name!r}, which the interference data "
                f"did not measure; use one of: {', '.join(sorted(known))}, or leave it empty"
            )
