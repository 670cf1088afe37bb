"""One job as the simulator tracks it (:class:`SimJob`), and the checks a workload job
passes before it is simulated."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from danlu.core.cluster import MILLI_PER_GPU, Allocation
from danlu.core.errors import ConfigError, DataError
from danlu.core.state import JobState
from danlu.sched.view import JobRequest, JobStatus
from danlu.sim.elastic import ApplicationProfile
from danlu.sim.metrics import FINISHED, REJECTED, JobRecord
from danlu.sim.progress import Progress
from danlu.sim.workload_jobs import ProfiledWork, RigidWork, Workload, WorkloadJob


@dataclass(eq=False, slots=True)
class SimJob:
    """A job in the simulator: its request, progress model, state and what it used."""

    request: JobRequest
    progress: Progress
    state: JobState = JobState.PENDING
    allocation: Allocation = field(default_factory=Allocation)
    attained: float = 0.0
    run_time: float = 0.0
    last_start: float | None = None
    first_start: float | None = None
    end_time: float | None = None
    released_at: float | None = None
    """When the last of its runs that ended let its GPUs go (None: none ended yet)."""
    preemptions: int = 0
    resizes: int = 0
    failures: int = 0
    """Runs lost with a failing node (:mod:`danlu.sim.failures`)."""
    lost_seconds: float = 0.0
    """Seconds of training those runs lost (redone by the next ones)."""
    marks: dict[str, float] = field(default_factory=dict)
    version: int = 0
    cached: JobStatus | None = None
    model: str = ""
    """The model it trains as the interference data names it (``RigidWork.model``)."""
    time_limit: float | None = None
    """Seconds it may hold GPUs over all its runs (:attr:`WorkloadJob.time_limit`)."""
    timed_out: bool = False
    """It was cancelled on reaching its time limit."""

    @property
    def id(self) -> str:
        return self.request.id

    def run_gpu_seconds(self, at: float) -> float:
        """GPU-seconds of its current run up to ``at`` (0 with no GPUs held, or never
        started): the engine adds them to :attr:`attained` when the run ends."""
        if self.last_start is None:
            return 0.0
        return max(0.0, at - self.last_start) * self.allocation.gpu_milli / MILLI_PER_GPU

    def status(self) -> JobStatus:
        observed = self.progress.observe()
        if self.cached is None or self.cached.observed is not observed:
            self.cached = JobStatus(
                request=self.request,
                allocation=self.allocation,
                attained_service=self.attained,
                run_time=self.run_time,
                last_start=self.last_start,
                preemptions=self.preemptions + self.failures,  # as the control plane counts
                marks=dict(self.marks),
                observed=observed,
            )
        return self.cached


def check_in_profile(
    job: WorkloadJob, work: ProfiledWork, profile: ApplicationProfile, node_gpus: int
) -> None:
    """Raise :class:`DataError` naming the job when its own batch, or its micro-batch at the
    GPUs its trace asked for, lies outside what its application's profile measured, and
    :class:`ConfigError` when the cluster's nodes (at most ``node_gpus`` GPUs) are larger
    than any the profile measured on: no run of it could be simulated (or not every run a
    policy may choose), and the error would otherwise name the policy that ran it."""
    if node_gpus > profile.max_node_replicas:
        raise ConfigError(
            f"job {job.request.id}: {profile.name}'s profile measured at most "
            f"{profile.max_node_replicas} GPUs of one node, and this cluster has nodes of "
            f"{node_gpus}; simulate its workload on nodes of at most "
            f"{profile.max_node_replicas} GPUs (--gpus-per-node {profile.max_node_replicas})"
        )
    lo, hi = profile.init_batch_size, profile.max_batch_size
    if not lo <= work.batch_size <= hi:
        raise DataError(
            f"job {job.request.id}: batch_size {work.batch_size} is outside the batches "
            f"{profile.name}'s profile validated ({lo}..{hi}); use one in that range"
        )
    replicas = job.request.gpus
    micro = profile.rigid_config(replicas, work.batch_size).atomic_bsz
    if not profile.min_local_bsz <= micro <= profile.max_local_bsz:
        raise DataError(
            f"job {job.request.id}: batch_size {work.batch_size} on its {replicas} GPUs "
            f"gives each a micro-batch of {micro}, outside the {profile.min_local_bsz}.."
            f"{profile.max_local_bsz} {profile.name}'s profile measured; ask for fewer "
            "GPUs or a larger batch"
        )


def model_of(job: WorkloadJob) -> str:
    """The model a workload job names for the interference data ("" for none)."""
    return job.work.model if isinstance(job.work, RigidWork) else ""


def job_record(job: SimJob, gpu_seconds: float, state: str = FINISHED) -> JobRecord:
    """``job``'s record, holding ``gpu_seconds`` GPU-seconds, in ``state``."""
    return JobRecord(
        id=job.id,
        submit_time=job.request.submit_time,
        start_time=job.first_start,
        end_time=job.end_time,
        released_at=job.released_at,
        gpus=job.request.gpus,
        gpu_seconds=gpu_seconds,
        restart_gpu_seconds=job.progress.restart_gpu_seconds,
        preemptions=job.preemptions,
        resizes=job.resizes,
        interference_seconds=job.progress.interference_seconds,
        interference_gpu_seconds=job.progress.interference_gpu_seconds,
        timed_out=job.timed_out,
        failures=job.failures,
        lost_seconds=job.lost_seconds,
        project=job.request.project,
        user=job.request.user,
        state=state,
    )


def rejected_records(
    rejected: Sequence[tuple[str, str]], failed: Iterable[SimJob], workload: Workload
) -> list[JobRecord]:
    """The records (state ``rejected``) of the ``rejected`` jobs, (id, reason) pairs, in
    their order: of the job among ``failed`` (the engine failed it after its submission; it
    holds any GPU time it had before), or else of its request in ``workload`` (rejected at
    its submission, :func:`~danlu.sim.admission.admit`: it never ran)."""
    by_id = {job.id: job for job in failed}
    requests = {wj.request.id: wj.request for wj in workload.jobs}
    out: list[JobRecord] = []
    for job_id, _ in rejected:
        job = by_id.get(job_id)
        if job is not None:
            out.append(job_record(job, job.attained, REJECTED))
            continue
        request = requests[job_id]
        out.append(
            JobRecord(
                id=job_id,
                submit_time=request.submit_time,
                start_time=None,
                end_time=None,
                gpus=request.gpus,
                gpu_seconds=0.0,
                restart_gpu_seconds=0.0,
                preemptions=0,
                project=request.project,
                user=request.user,
                state=REJECTED,
            )
        )
    return out
