"""Scheduling: pure, deterministic policies over a frozen cluster view, placement, registry.

The simulator and the server call exactly this code.
"""

from danlu.sched.policies.base import Policy
from danlu.sched.registry import PolicyRegistry, default_registry, make_policy
from danlu.sched.view import (
    ClusterView,
    JobRequest,
    JobStatus,
    Plan,
    Preempt,
    Rebatch,
    Resize,
    Start,
)

__all__ = [
    "ClusterView",
    "JobRequest",
    "JobStatus",
    "Plan",
    "Policy",
    "PolicyRegistry",
    "Preempt",
    "Rebatch",
    "Resize",
    "Start",
    "default_registry",
    "make_policy",
]
