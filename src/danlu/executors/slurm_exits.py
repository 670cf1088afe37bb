"""How a run of the Slurm executor ended: the exits its nodes' tasks recorded, and Slurm's
record of its batch job (:class:`~danlu.executors.slurm.SlurmExecutor`'s results)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from danlu.executors import records, slurm_task, supervise
from danlu.executors.base import PREEMPTED_EXIT_CODE, gang_exit
from danlu.executors.slurmctl import SlurmJob


def node_exits(run_dir: Path, launch: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """(when, status) of the exit the task on each of the run's nodes recorded, by node (those
    that recorded none yet absent). A record's fields are checked as an exit record's
    (:data:`~danlu.executors.records.EXIT_FIELDS`): one whose ``exit_code`` is not a whole
    number (``true``, ``"1"``, ``null``) is no exit, and a ``finished_at`` that is not a
    finite number is unknown (0). A node name that is not a plain name
    (:func:`~danlu.executors.slurm_task.is_plain_name`: a damaged launch record) has none."""
    exits: dict[str, tuple[float, int]] = {}
    for name in launch.get("nodes") or []:
        if not slurm_task.is_plain_name(name):
            continue
        data = supervise.read_json(slurm_task.exit_path(run_dir, name))
        done = records.checked(data, records.EXIT_FIELDS) or {}
        code = done.get("exit_code")
        if code is not None:
            exits[name] = (float(done.get("finished_at", 0.0)), code)
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
