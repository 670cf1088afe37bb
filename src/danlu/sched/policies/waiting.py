"""Why a job waits: the reasons the round procedures and the policies give a job left
waiting (one shared string per request shape and free count, cached on the round's
:class:`FreeMap`), how a reason names another job (by its project: never by an id its
owner may not see), and the rule for a job that asks for no GPU at all."""

from __future__ import annotations

from functools import lru_cache

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.units import format_bytes
from danlu.core.values import counted
from danlu.sched.placement.gang import FreeMap
from danlu.sched.view import JobRequest, JobStatus

NO_GPU_ASKED = "it asks for no GPU; danlu schedules jobs of 1 GPU or more"
"""Why a job asking for no GPU waits: the placer places nothing for it (the server's
admission refuses such a job; the simulator leaves CPU-only pods out)."""


def job_of_project(job: JobStatus) -> str:
    """How a waiting or preemption reason names ``job``, another job than the one it is
    given to: by its project, never its id. A reason is read by the owner of the job it is
    given to (``danlu jobs``, ``GET /jobs/{id}``), who may not see other users' job ids."""
    return f"a job of project {job.request.project}"


def asks_no_gpu(job: JobStatus) -> bool:
    """Whether ``job`` asks for no GPU: the placer places nothing for it, so it can never
    start (the server's admission refuses such a job; the simulator leaves CPU-only pods
    out). It waits with :data:`NO_GPU_ASKED` and holds back no other job."""
    return job.request.gpus <= 0


@lru_cache(maxsize=256)
def never_starts(reason: str) -> str:
    """Why a job waits that could not start even on the cluster's open GPUs with no job on
    them (:class:`~danlu.sched.policies.reservation.NeverFits`): ``reason`` (what
    :func:`why_not` says), and that no job's end will start it. One shared string per
    reason: a long queue of such jobs holds no copy each."""
    return (
        f"{reason}; it could not start even with every open GPU free: ask for fewer GPUs, "
        "or for GPU types or memory the cluster has"
    )


def beyond_reach(least: int, reach: int) -> str:
    """Why a job that needs ``least`` GPUs gets none from a search over the cluster's GPUs
    (Optimus's split, Pollux's search): only ``reach`` of them are ones it may use."""
    return (
        f"needs {counted(least, 'GPU')} but may use only {reach} (of the GPU types and memory "
        "it asks for, on nodes open to new work, not held by jobs that stay)"
    )


def beyond_batch_limits(least: int, max_batch: int, min_local: int) -> str:
    """Why a job that needs ``least`` GPUs gets none: its batch limits give each of more
    than ``max_batch // min_local`` GPUs less than its least micro-batch."""
    return (
        f"needs {counted(least, 'GPU')} but its batch limits allow at most "
        f"{max_batch // min_local} (max_batch {max_batch} / min_local_bsz {min_local}); ask "
        "for fewer GPUs or allow a larger batch"
    )


def why_not(free: FreeMap, job: JobStatus, gpus: int | None = None) -> str:
    """Why ``job`` could not be placed on ``free`` (one shared string per shape and count);
    ``gpus``: the count it was tried at, when not its request's (as
    :meth:`FreeMap.place` takes it: a policy that sizes jobs places them at their size)."""
    req = job.request
    if asks_no_gpu(job):
        return NO_GPU_ASKED
    count = req.gpus if gpus is None else gpus
    if req.shares_gpu and count == 1:
        return _why_not_share(job)
    if req.gpu_types or req.gpu_memory:
        key: tuple[object, ...] = (count, free.total_free, req.gpu_types, req.gpu_memory)
        reason = free.reasons.get(key)
        if reason is None:
            reason = _why_not_kind(free, req, count)
            free.reasons[key] = reason
        return reason
    key = (count, free.total_free)
    reason = free.reasons.get(key)
    if reason is None:
        reason = (
            f"needs {counted(count, 'GPU')}, {free.total_free} free"
            if free.total_free < count
            else f"needs {counted(count, 'GPU')}; the {free.total_free} free GPUs are fragmented"
        )
        free.reasons[key] = reason
    return reason


def _why_not_share(job: JobStatus) -> str:
    """:func:`why_not` for a request for part of one GPU: what it needs free on one GPU, as
    the placement sizes it (:meth:`FreeMap.place`).

    A share sized by memory (``gpu_milli`` 1000) takes the part of the compute its memory
    is of the GPU's, rounded down (:func:`~danlu.sched.share_size.milli_for_memory`), so it
    fits wherever its memory does (unless shares that name both their compute and their
    memory took more compute than memory there): memory is what it lacks, not a whole GPU's
    compute. One sized by milli-GPU alone takes the memory in proportion to its compute
    (:meth:`~danlu.sched.view.JobRequest.memory_on`), or what the GPU has left when less,
    so it needs its compute and some memory free. One that names both needs both."""
    req = job.request
    by_memory = req.gpu_milli >= MILLI_PER_GPU and req.gpu_memory > 0
    needs = []
    if not by_memory:
        needs.append(f"{req.gpu_milli} milli-GPU")
    needs.append(f"{format_bytes(req.gpu_memory)} of memory" if req.gpu_memory else "some memory")
    kind = f" of type {', '.join(sorted(req.gpu_types))}" if req.gpu_types else ""
    return f"no GPU{kind} has {' and '.join(needs)} free"


def _why_not_kind(free: FreeMap, req: JobRequest, count: int) -> str:
    """:func:`why_not` for a whole-GPU request that names GPU types or a memory size, tried
    at ``count`` GPUs: the free GPUs of that kind counted apart from the others (too few
    free at all is no fragmentation)."""
    kinds = []
    if req.gpu_types:
        kinds.append(f"of type {', '.join(sorted(req.gpu_types))}")
    if req.gpu_memory:
        kinds.append(f"with {format_bytes(req.gpu_memory)}")
    kind = " ".join(kinds)
    fitting = free.free_for(req)
    needs = f"needs {counted(count, 'GPU')} {kind}"
    if free.total_free < count:
        return f"{needs}, {free.total_free} free"
    if fitting < count:
        return f"{needs}; {fitting} of the {free.total_free} free GPUs are"
    return f"{needs}; the {fitting} free GPUs of that kind are fragmented"
