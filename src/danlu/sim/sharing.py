"""Which jobs share each GPU, and the speed each runs at with its neighbours, for the
simulator's interference model (:mod:`danlu.sim.interference`)."""

from __future__ import annotations

from collections.abc import Sequence

from danlu.core.cluster import MILLI_PER_GPU, Allocation
from danlu.sim.interference import Interference
from danlu.sim.simjob import SimJob

MIN_RATE = 1e-6
"""The slowest a shared job runs, however many neighbours it has (a product of measured
rates, which could otherwise reach 0)."""


class GpuSharers:
    """The jobs on each GPU (flat index) that ask for part of a GPU or hold part of one,
    and the GPUs whose sharers changed since their jobs' rates were last set."""

    def __init__(self, model: Interference | None, offsets: Sequence[int]) -> None:
        """``model``: the interference model (None: jobs never slow each other, and
        nothing is kept); ``offsets``: each node's first flat GPU index."""
        self.model = model
        self._offsets = offsets
        self._on_gpu: dict[int, dict[str, SimJob]] = {}
        self._touched: set[int] = set()

    @property
    def touched(self) -> bool:
        """Whether some GPU's sharers changed since :meth:`rerate` last ran."""
        return bool(self._touched)

    def share(self, job: SimJob, alloc: Allocation, sign: int) -> None:
        """Record that ``job`` joins (+1) or leaves (-1) the GPUs of ``alloc`` when it asks
        for part of a GPU or holds part of one (with an interference model)."""
        if self.model is None:
            return
        if not job.request.shares_gpu and all(s.milli >= MILLI_PER_GPU for s in alloc.shares):
            return
        for share in alloc.shares:
            index = self._offsets[share.node] + share.gpu
            on_gpu = self._on_gpu.setdefault(index, {})
            if sign > 0:
                on_gpu[job.id] = job
            else:
                on_gpu.pop(job.id, None)
                if not on_gpu:
                    del self._on_gpu[index]
            self._touched.add(index)

    def rerate(self, at: float) -> list[SimJob]:
        """Set, from ``at``, the speed of every job on a GPU whose sharers changed; the
        closed-form (not stepwise) jobs whose speed changed, whose completions move. A job
        on several GPUs runs at the speed of its slowest one."""
        model = self.model
        touched, self._touched = self._touched, set()
        if model is None:
            return []
        jobs = {
            job_id: job
            for index in sorted(touched)
            for job_id, job in sorted(self._on_gpu.get(index, {}).items())
        }
        moved: list[SimJob] = []
        for job in jobs.values():
            progress = job.progress
            rate = 1.0
            for share in job.allocation.shares:
                on_gpu = self._on_gpu.get(self._offsets[share.node] + share.gpu, {})
                others = [(o.model, o.request.family) for i, o in on_gpu.items() if i != job.id]
                rate = min(rate, model.rate((job.model, job.request.family), others))
            rate = min(1.0, max(rate, MIN_RATE))
            if rate == progress.rate:
                continue
            progress.set_rate(at, rate)
            if not progress.stepwise:
                moved.append(job)
        return moved
