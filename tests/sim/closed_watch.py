"""A policy wrapper for the failure tests: it checks that no plan places work on a node or
GPU out of service."""

from __future__ import annotations

from danlu.sched.policies.base import Policy
from danlu.sched.view import ClusterView, Plan


class WatchingClosed:
    """``inner``, counting the rounds with closed nodes or GPUs and checking that its plan's
    starts and resizes avoid them (its other attributes are ``inner``'s)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.closed_rounds = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name

    def schedule(self, view: ClusterView) -> Plan:
        plan = self.inner.schedule(view)
        if view.closed_nodes or view.closed_gpus:
            self.closed_rounds += 1
        placed = [s.allocation for s in plan.starts] + [r.allocation for r in plan.resizes]
        for allocation in placed:
            assert not set(allocation.nodes) & view.closed_nodes
            flat = {view.cluster.gpu_offset(s.node) + s.gpu for s in allocation.shares}
            assert not flat & view.closed_gpus
        return plan
