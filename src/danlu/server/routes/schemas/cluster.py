"""The models of the cluster: its nodes and their GPUs with what is allocated on them, a
cordon or drain, a node's history, the GPU shares running jobs hold and the control plane's
liveness; and the functions that turn the inventory and a node's events into them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.metric_record import MAX_TIME
from danlu.server.db import Node, NodeEvent, User
from danlu.server.routes.schemas.base import _In, _no_boolean
from danlu.server.services.cluster import ABSENT, ShareRecord
from danlu.server.services.nodes import state as node_state

MAX_GPU_INDEX = 1023
"""The highest GPU index a request may name (a node has far fewer)."""


class GpuOut(BaseModel):
    """One GPU of a node with what is allocated on it. ``state``: ``ready``, ``cordoned``
    (this GPU alone closed to new work, by an admin or the health check; its jobs run on) or
    ``draining`` (closed, and its preemptible jobs preempted by checkpoint)."""

    index: int
    type: str
    memory: int
    allocated_memory: int
    allocated_milli: int
    jobs: list[str]
    """The ids of the jobs holding a share of it: for a non-admin, their own jobs' only
    (``GET /jobs`` shows them no other user's job); ``other_jobs`` counts the rest."""
    other_jobs: int = 0
    """The jobs of other users holding a share of it, whose ids ``jobs`` leaves out for a
    non-admin (0 for an admin, who sees every id)."""
    state: str = "ready"
    cordoned_at: float | None = None
    cordon_reason: str = ""
    uuid: str | None = None
    """NVML's UUID (``GPU-...``, as ``nvidia-smi -L`` and DCGM's ``UUID`` label show it);
    null for GPUs danlu knows only by count (fake GPUs, a cluster's)."""


class NodeOut(BaseModel):
    """A node of the inventory. ``state``: ``ready``, ``cordoned`` (closed to new work; its
    jobs run on) or ``draining`` (closed, and its preemptible jobs preempted by checkpoint)."""

    name: str
    gpu_type: str
    rack: str
    fake: bool
    gpus: list[GpuOut]
    state: str = "ready"
    cordoned_at: float | None = None
    cordon_reason: str = ""
    launch_failures: int = 0
    """Launches in a row that failed there for the node's reasons."""
    close_at: float | None = None
    """When a scheduled cordon or drain takes effect (null: none scheduled)."""
    close_action: str | None = None
    """``cordon`` or ``drain``: what is scheduled (null: nothing)."""
    close_reason: str = ""
    close_until: float | None = None
    """When the scheduled cordon or drain ends (null: none scheduled, or it has no end)."""
    open_at: float | None = None
    """When the node's cordon or drain ends: it is uncordoned then (null: it lasts until
    uncordoned)."""


class NodeEventOut(BaseModel):
    """One thing that happened to a node (``GET /cluster/nodes/{name}/events``), by
    ``actor`` (null: the control plane itself), ``detail`` saying what in words: a close's
    reason and end, what it was before an uncordon, the GPUs before and after a change."""

    id: int
    node: str
    time: float
    kind: Literal[
        "joined",
        "lost",
        "back",
        "gpus_changed",
        "changed",
        "cordoned",
        "drained",
        "scheduled",
        "uncordoned",
    ]
    actor: str | None
    detail: str


class CordonIn(_In):
    """Why a node is cordoned or drained (shown by ``danlu nodes``), and when: ``at`` (POSIX
    seconds) in the future schedules it for then; left out or past, it is done now.
    ``until`` (POSIX seconds, later than now and than ``at``): it ends then, the node
    uncordoned (left out: it lasts until uncordoned). ``gpu``: only the node's GPU at that
    index (now; not with a future ``at``, nor ``until``)."""

    reason: str = Field(default="", max_length=500)
    at: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    until: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)

    _numbers = field_validator("at", "until", "gpu", mode="before")(_no_boolean)

    @field_validator("at", "until")
    @classmethod
    def _seconds(cls, value: float | None) -> float | None:
        if value is not None and value >= MAX_TIME:
            raise ValueError(
                f"must be POSIX seconds before the year 9999 (below {MAX_TIME:.0f}), got "
                f"{value:g}: a time in milliseconds is 1000 times too large"
            )
        return value


class UncordonIn(_In):
    """``gpu``: open only the node's GPU at that index (left out: the node)."""

    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)

    _numbers = field_validator("gpu", mode="before")(_no_boolean)


class AllocationOut(BaseModel):
    """One GPU share held by a running job."""

    job_id: str
    node: str
    gpu: int
    milli: int
    memory: int


class HealthOut(BaseModel):
    """Liveness."""

    status: Literal["ok"]
    version: str


def nodes_out(
    nodes: list[Node], shares: list[ShareRecord], viewer: User | None = None
) -> list[dict[str, Any]]:
    """The inventory with, per GPU, the memory and compute allocated and the jobs holding it.
    A GPU the last reading lacked, kept for an admin's cordon (memory
    :data:`~danlu.server.services.cluster.ABSENT`), is left out, as ``GET /cluster/nodes``
    leaves it out: a cordon's reply listed it with ``memory: -1``. A non-admin ``viewer``
    sees the ids of their own jobs only, the others' counted in ``other_jobs`` (as
    ``GET /jobs`` lists them no other user's job); None or an admin: every id."""
    by_gpu: dict[tuple[str, int], list[ShareRecord]] = {}
    for share in shares:
        by_gpu.setdefault((share.node, share.gpu), []).append(share)
    out = []
    for node in nodes:
        gpus = []
        for gpu in node.gpus:
            if gpu.memory == ABSENT:
                continue
            held = by_gpu.get((node.name, gpu.index), [])
            holders = {s.job_id for s in held}
            shown = {s.job_id for s in held if sees_holder(viewer, s)}
            gpus.append(
                {
                    "index": gpu.index,
                    "type": gpu.gpu_type,
                    "memory": gpu.memory,
                    "allocated_memory": sum(s.memory for s in held),
                    "allocated_milli": min(MILLI_PER_GPU, sum(s.milli for s in held)),
                    "jobs": sorted(shown),
                    "other_jobs": len(holders - shown),
                    "state": node_state(gpu),
                    "cordoned_at": gpu.cordoned_at,
                    "cordon_reason": gpu.cordon_reason,
                    "uuid": gpu.uuid,
                }
            )
        out.append(
            {
                "name": node.name,
                "gpu_type": node.gpu_type,
                "rack": node.rack,
                "fake": node.fake,
                "gpus": gpus,
                "state": node_state(node),
                "cordoned_at": node.cordoned_at,
                "cordon_reason": node.cordon_reason,
                "launch_failures": node.launch_failures,
                "close_at": node.close_at,
                "close_action": None
                if node.close_at is None
                else ("drain" if node.close_drain else "cordon"),
                "close_reason": node.close_reason,
                "close_until": node.close_until,
                "open_at": node.open_at,
            }
        )
    return out


def node_event_out(event: NodeEvent) -> dict[str, Any]:
    """``event``, one of a node's, as the API's NodeEvent object."""
    return {
        "id": event.id,
        "node": event.node,
        "time": event.time,
        "kind": event.kind,
        "actor": event.actor,
        "detail": event.detail,
    }


def sees_holder(viewer: User | None, share: ShareRecord) -> bool:
    """Whether ``viewer`` (None: the control plane itself) may see the id of the job holding
    ``share``: an admin, or the job's owner."""
    return viewer is None or viewer.is_admin or share.user_id == viewer.id
