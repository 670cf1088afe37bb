"""The models of hyper-parameter sweeps (and job arrays) and their trials."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from danlu.server.routes.schemas.base import StateName


class TrialOut(BaseModel):
    """One trial of a sweep."""

    job_id: str
    trial: int
    state: StateName
    parameters: dict[str, Any]
    best: float | None
    """The best value of the sweep's metric the trial reported (null before any)."""
    step: int | None
    """The step of its last report of the metric."""
    stopped_early: bool = False
    """Cancelled by the sweep's early-stopping rule: it ended as the sweep meant it to (a
    DONE sweep whose other trials succeeded succeeded, for ``danlu wait`` and ``--after``)."""


class SweepOut(BaseModel):
    """A hyper-parameter sweep: ``state`` RUNNING, DONE, CANCELLED or FAILED (``reason``)."""

    id: str
    name: str
    user: str
    state: str
    reason: str
    metric: str | None
    """The metric its trials optimise; null for a sweep without one (a job array)."""
    goal: str | None
    array: bool = False
    """A job array (``danlu submit --array``): its trials are the tasks."""
    total: int
    """How many trials it runs in all."""
    submitted: int
    created_at: float
    finished_at: float | None
    spec: dict[str, Any]
    notes: list[str] = []
    """What the submission tells of every trial, as their pending reasons do (how
    ``gpu_memory: auto`` was resolved, or why it could not be: whole GPUs)."""
    trials: list[TrialOut] | None = None
    best: TrialOut | None = None
