"""The jobs a simulation lets in: each workload job as a :class:`~danlu.sim.simjob.SimJob`
with its progress model, or rejected at its submission when it can never run on the
cluster (:class:`Admission`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.core.units import format_bytes
from danlu.core.values import counted
from danlu.sched.share_size import allowed_sizes
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile
from danlu.sim.progress import ProfiledProgress, Progress, RigidProgress
from danlu.sim.simjob import SimJob, check_in_profile, model_of
from danlu.sim.workload_jobs import ProfiledWork, Workload, WorkloadJob


@dataclass
class Admission:
    """A workload's jobs split into those the simulation runs (:attr:`arrivals`, in
    submission order) and those it rejects (:attr:`rejected`, with the reason)."""

    arrivals: list[tuple[WorkloadJob, SimJob]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    unreached: list[JobRequest] = field(default_factory=list)
    """Jobs that could never run but are submitted after ``SimConfig.max_time``: their
    rejection would come at a submission the clock never reaches, so they are not rejected
    but not submitted (``SimResult.not_submitted``)."""


def admit(
    workload: Workload,
    cluster: Cluster,
    config: SimConfig,
    profiles: Mapping[str, ApplicationProfile],
    sizes_jobs: bool,
) -> Admission:
    """Every job of ``workload``, admitted or rejected on ``cluster`` (or, one that can never
    run submitted after ``config.max_time``, unreached; ``sizes_jobs``: the policy chooses
    profiled jobs' GPU counts). :class:`ConfigError` for a profiled job with
    a time limit, one whose application has no profile, or job ids that repeat."""
    out = Admission()
    never = _NeverFits(cluster, config)
    node_gpus = max((n.gpus for n in cluster.nodes), default=0)
    for wj in workload.jobs:
        elastic = sizes_jobs and isinstance(wj.work, ProfiledWork)
        reason = never.why(wj.request, elastic)
        if reason is not None:
            if wj.request.submit_time > config.max_time:
                out.unreached.append(wj.request)
            else:
                out.rejected.append((wj.request.id, reason))
            continue
        if wj.time_limit is not None and isinstance(wj.work, ProfiledWork):
            raise ConfigError(
                f"job {wj.request.id}: time limits apply to rigid jobs (a duration), not "
                f"to jobs of a profiled application"
            )
        progress = _progress_for(wj, profiles, config.restart_cost, node_gpus)
        job = SimJob(wj.request, progress, model=model_of(wj))
        job.time_limit = wj.time_limit
        out.arrivals.append((wj, job))
    counts = Counter(job.id for _, job in out.arrivals)
    repeated = sorted(name for name, n in counts.items() if n > 1)
    if repeated:
        raise ConfigError(f"job ids must be unique; {', '.join(repeated[:5])} repeat")
    return out


def _progress_for(
    job: WorkloadJob,
    profiles: Mapping[str, ApplicationProfile],
    restart_cost: float,
    node_gpus: int,
) -> Progress:
    """``job``'s progress model: its profile's for a profiled job (checked against the
    cluster's nodes of at most ``node_gpus`` GPUs), else its rigid duration's."""
    work = job.work
    if isinstance(work, ProfiledWork):
        profile = profiles.get(work.application)
        if profile is None:
            known = ", ".join(sorted(profiles)) or "none loaded"
            raise ConfigError(
                f"job {job.request.id} uses application {work.application!r} but no "
                f"measurements for it were loaded (known: {known}); pass --traces DIR"
            )
        check_in_profile(job, work, profile, node_gpus)
        return ProfiledProgress(profile, work.batch_size, restart_cost)
    return RigidProgress(work.duration, restart_cost)


class _NeverFits:
    """Why a request can never run on a cluster (:meth:`why`)."""

    def __init__(self, cluster: Cluster, config: SimConfig) -> None:
        self.cluster = cluster
        self.quotas = config.quotas
        self.total = cluster.total_gpus

    def why(self, request: JobRequest, elastic: bool = False) -> str | None:
        """Why ``request`` can never run on this cluster, or None: it asks for more GPUs
        than the cluster has, or than it has of the types the job may use with the memory
        it asks per GPU (the largest GPU of those types, not of the cluster: a T4-only job
        of 40 GiB per GPU was let in beside A100s and failed only once nothing else could
        run), or a quota it alone passes. ``elastic``: a profiled job under a policy that
        sizes jobs (``sizes_jobs``), which may run it on fewer GPUs than its trace asked
        for (if it does not, the job fails once nothing else can run)."""
        total = self.total
        if request.gpus > total and not elastic:
            return f"asks for {counted(request.gpus, 'GPU')}; the cluster has {total}"
        wanted = sorted({t.lower() for t in request.gpu_types})
        of_types = f" of {wanted}" if wanted else ""
        sizes = {m: n for m, n in allowed_sizes(request, self.cluster).items() if n}
        if wanted and not sizes:
            return f"asks for {counted(request.gpus, 'GPU')}{of_types}; the cluster has 0"
        biggest = max(sizes, default=0)
        if request.gpu_memory > biggest:
            return (
                f"asks for {format_bytes(request.gpu_memory)} per GPU; the largest GPU"
                f"{of_types} has {format_bytes(biggest)}"
            )
        # the GPUs of the types it may use with the memory it asks per GPU
        have = sum(n for memory, n in sizes.items() if memory >= request.gpu_memory)
        if have < request.gpus and (wanted or not elastic):
            each = f" of {format_bytes(request.gpu_memory)} each" if request.gpu_memory else ""
            asked = counted(request.gpus, "GPU")
            return f"asks for {asked}{of_types}{each}; the cluster has {have}"
        quota = self.quotas.never_starts(request, self.cluster, elastic)
        return f"can never start: {quota}" if quota is not None else None
