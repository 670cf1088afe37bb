"""How a run of the Slurm executor ended: the exits its nodes' tasks recorded, and Slurm's
record of its batch job (:class:`~danlu.executors.slurm.SlurmExecutor`'s results)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from danlu.executors import slurm_task, supervise
from danlu.executors.base import PREEMPTED_EXIT_CODE, gang_exit
from danlu.executors.slurmctl import SlurmJob


def node_exits(run_dir: Path, launch: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """(when, status) of the exit the task on each of the run's nodes recorded, by node (those
    that recorded none yet absent)."""
    exits: dict[str, tuple[float, int]] = {}
    for name in launch.get("nodes") or []:
        data = supervise.read_json(slurm_task.exit_path(run_dir, name))
        if data and isinstance(data.get("exit_code"), int):
            when = data.get("finished_at")
            at = float(when) if isinstance(when, int | float) else 0.0
            exits[name] = (at, int(data["exit_code"]))
    return exits


def recorded_exit(exits: Mapping[str, tuple[float, int]], nodes: int) -> int | None:
    """The run's exit from its ``nodes`` nodes' recorded ``exits`` (:func:`node_exits`), as
    :func:`~danlu.executors.base.gang_exit` gives it (the first failure in time that is not a
    checkpoint, else 75 or 0): once every node recorded one, or as soon as one recorded a
    failure (a node ``srun --kill-on-bad-exit`` killed because of it records none, and its
    SIGKILL, Slurm's exit of the job, must not hide the cause). None: not known yet."""
    failed = any(code not in (0, PREEMPTED_EXIT_CODE) for _, code in exits.values())
    if not exits or (len(exits) < nodes and not failed):
        return None
    return gang_exit(code for _, code in sorted(exits.values()))


def never_ran(job: SlurmJob) -> bool:
    """Whether Slurm cancelled ``job`` before it started (while ``PENDING``): Slurm then
    records its cancel time as both its ``StartTime`` and its ``EndTime``."""
    start, end = job.started_at, job.finished_at
    return job.state == "CANCELLED" and start is not None and end is not None and end <= start


def slurm_exit(job: SlurmJob) -> tuple[int | None, int | None]:
    """The exit code and signal of the ended Slurm job ``job`` as Slurm recorded them
    (``ExitCode``), but for the ``0:0`` Slurm records for jobs that did not exit: a job
    ``CANCELLED`` was killed (137, signal 9) unless it never started (:func:`never_ran`: no
    exit), and one lost with its node (``NODE_FAIL``) has none (None, None: it was killed
    with its node, no exit was seen)."""
    code, sig = job.exit_code, job.signal
    if sig is None and not code:
        if job.state == "CANCELLED":
            return (None, None) if never_ran(job) else (128 + 9, 9)
        if job.state == "NODE_FAIL":
            return None, None
    return code, sig
