"""Free GPUs now and once the draining jobs have exited.

A job the control plane has told to stop (PREEMPTING: it checkpoints, then exits) still holds
its GPUs, so a job a plan puts there has to wait (the server leaves it pending until they are
free, and the next rounds plan it again). If a round gave the GPUs already free among them to
jobs ranked
lower, the waiting job would find them taken when the drain ends, preempt them, wait for
their drain in turn, and so on: two sets of jobs taking turns on the GPUs, each run cut short
(a scheduler's nomination, as Kubernetes' ``nominatedNodeName``, is the usual cure).
:class:`DrainingFree` places a job on the GPUs free now when it fits there, else on the GPUs
free once the drain ends; there it holds the part already free, so that nobody placed after it
in the round takes that part.
"""

from __future__ import annotations

from danlu.core.cluster import Allocation, GpuShare
from danlu.sched.placement.gang import FreeMap
from danlu.sched.view import ClusterView, JobRequest


class DrainingFree:
    """Two free maps of one round: ``now`` and ``soon`` (``now`` plus the GPUs of the view's
    draining jobs; None when there are none, and then everything goes on ``now``).
    Everything placed is taken from both, so on every GPU ``soon`` has at least what ``now``
    has."""

    def __init__(self, now: FreeMap, view: ClusterView) -> None:
        self.now = now
        self.draining = view.draining
        self.soon: FreeMap | None = None
        if view.draining:
            self.soon = now.copy()
            for job in view.running:
                if job.id in view.draining:
                    self.soon.release(job.allocation)

    def place(self, request: JobRequest) -> Allocation | None:
        """Where ``request`` goes: the GPUs free now if it fits there, else GPUs being
        drained (it waits for them; what of them is free now is held for it)."""
        placed = self.place_holding(request)
        return None if placed is None else placed[0]

    def place_holding(self, request: JobRequest) -> tuple[Allocation, Allocation | None] | None:
        """As :meth:`place`, with what was taken from ``now``: the allocation itself when it
        fits there, else the part of the draining GPUs free now that it holds (None when
        none). :meth:`unplace` takes both to undo the placement."""
        now, soon = self.now, self.soon
        alloc = now.place(request) if now.could_fit_now(request) else None
        if soon is None:
            return None if alloc is None else (alloc, alloc)
        if alloc is not None:
            soon.take(alloc)
            return alloc, alloc
        alloc = soon.place(request) if soon.could_fit_now(request) else None
        if alloc is None:
            return None
        held = self._free_now(alloc)
        if held is not None:
            now.take(held)
        return alloc, held

    def _free_now(self, alloc: Allocation) -> Allocation | None:
        """The part of ``alloc`` free on ``now`` (None when none is). A GPU over-committed
        now (its jobs hold more memory than it has: it was reported smaller since) has
        nothing free: its free memory is negative, and a share of that, taken, gave ``now``
        memory back."""
        now = self.now
        cluster = now.cluster
        shares: list[GpuShare] = []
        for share in alloc.shares:
            index = cluster.gpu_offset(share.node) + share.gpu
            free_milli, free_memory = int(now.free_milli[index]), int(now.free_memory[index])
            if free_milli < 0 or free_memory < 0:
                continue  # over-committed: nothing can go there now, nothing to hold
            milli = min(share.milli, free_milli)
            memory = min(share.memory, free_memory)
            if milli > 0 or memory > 0:
                shares.append(GpuShare(share.node, share.gpu, milli, memory))
        return Allocation(tuple(shares)) if shares else None

    def hold(self, alloc: Allocation) -> None:
        """Take ``alloc``, a placement made on an earlier copy of these maps (by
        :meth:`place`, now or after the drain), as that placement took it: all of it from
        ``soon``, and from ``now`` the part of it free now."""
        if self.soon is None:
            self.now.take(alloc)
            return
        self.soon.take(alloc)
        held = self._free_now(alloc)
        if held is not None:
            self.now.take(held)

    def unplace(self, alloc: Allocation, held: Allocation | None) -> None:
        """Undo a :meth:`place_holding` that returned ``(alloc, held)``."""
        if held is not None:
            self.now.release(held)
        if self.soon is not None:
            self.soon.release(alloc)

    def any_room(self) -> bool:
        """Whether anything could still be placed, now or after the drain."""
        room = self.soon or self.now
        return room.total_free > 0 or room.any_capacity()

    def take(self, alloc: Allocation) -> None:
        """Mark ``alloc`` (free now) as used in both maps."""
        self.now.take(alloc)
        if self.soon is not None:
            self.soon.take(alloc)

    def release(self, alloc: Allocation) -> None:
        """Give ``alloc`` back in both maps."""
        self.now.release(alloc)
        if self.soon is not None:
            self.soon.release(alloc)
