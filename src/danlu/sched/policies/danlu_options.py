"""The GPU counts a job may take under the :mod:`danlu <.danlu>` policy and the rules it reads
off a job's options: the sizes it chooses from (:func:`gpu_counts`, :func:`gpu_range`), the
duration it prices an unmodelled job at (:func:`expected_seconds`), since when a waiting job
has waited (:func:`waiting_since`), which running jobs explore idle GPUs (:func:`explorers`)
and which regret their last move (:func:`regrets`)."""

from __future__ import annotations

import math
import sys

from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.policies.danlu_place import STOPPED
from danlu.sched.view import JobRequest, JobStatus


def gpu_counts(cap: int, gpn: int, floor: int = 1) -> list[int]:
    """GPU counts a job may get: ``floor``..one node, then whole nodes (up to ``cap``)."""
    out = list(range(max(floor, 1), min(cap, gpn) + 1))
    out.extend(n for n in range(2 * gpn, cap + 1, gpn) if n >= floor)
    if floor > gpn and floor <= cap and floor not in out:
        out.insert(0, floor)  # an elastic minimum that is not a whole number of nodes
    return out


def expected_seconds(req: JobRequest) -> float | None:
    """The request's ``expected_duration`` when it is finite; None (unknown: the job is
    priced at ``new_job_seconds``) for an infinite one, which :class:`JobRequest` accepts:
    priced at infinite seconds, no option of the job ever beat leaving it waiting, and it
    waited for ever on an idle cluster as "shorter-ranked jobs hold the GPUs"."""
    duration = req.expected_duration
    return duration if duration is None or duration < math.inf else None


def gpu_range(req: JobRequest) -> tuple[int, int]:
    """The GPU counts the job's request allows the policy to choose from: ``gpus..max_gpus``
    for a request that names a range (an elastic spec such as ``gpus: 2..8``), else any
    count (``1..`` the cluster: the simulated traces' requests name one count, which the
    policy treats as a starting point, as Pollux does)."""
    if req.max_gpus > 0:
        return req.gpus, max(req.max_gpus, req.gpus)
    return 1, sys.maxsize


def waiting_since(job: JobStatus) -> float:
    """Since when a pending job has waited without a break: its submission, or the last
    time the policy preempted it (a job that ran is not starving again right away)."""
    return max(job.request.submit_time, job.marks.get(STOPPED, -math.inf))


def explorers(jobs: list[JobStatus], options: list[list[Option]]) -> list[bool] | None:
    """Which running jobs may take idle GPUs as an exploration move (``None``: none), for
    :func:`danlu_alloc.spare_pass`: measured at no size above the one they run at (their
    bigger options rest on the model's priors alone), and with nothing else to tell the
    sizes apart -- no gradient statistics (a flat gain) and no in-process batch adaptation
    (``observed["adaptive"]``). Such a job's one-point prior predicts a gain that the
    ``hysteresis`` keep discount cancels, so without this it never measures a second
    size; the ``regret`` rule undoes the move if it measured worse."""
    out = [False] * len(jobs)
    for i, job in enumerate(jobs):
        seen = job.observed
        if "grad_sqr" in seen or "grad_var" in seen or seen.get("adaptive") == 1:
            continue
        opts = options[i]
        cur = job.allocation.num_gpus
        bigger = [o for o in opts if o.gpus > cur]
        out[i] = any(o.keep for o in opts) and bool(bigger) and not any(o.measured for o in bigger)
    return out if any(out) else None


def regrets(options: list[Option], factor: float) -> bool:
    """Whether keeping is ``factor`` times slower than the best other option."""
    keep = min((o.seconds for o in options if o.keep), default=math.inf)
    other = min((o.seconds for o in options if not o.keep), default=math.inf)
    return keep < math.inf and keep > factor * other
