"""What a run of the Slurm executor is submitted as (:class:`~danlu.executors.slurm.SlurmExecutor`):
its batch script (``srun`` of the per-node task, :mod:`~danlu.executors.slurm_task`), the
``sbatch`` options that place it and name its log, and what a failed ``sbatch`` says of
whether anything reached Slurm.

The log is written by Slurm (``slurmstepd``, ``--output`` with ``--open-mode=append``, so that
a truncation leaves the appends going on at its new end): one file for the run, to which
``srun`` on its first node appends every node's output. Its cap (``DANLU_LOG_MAX_MB``) is
kept by the task of that node (:func:`~danlu.executors.slurm_task.log_cap`); the cluster's own
means (logrotate's ``copytruncate``, docs/slurm.md) can bound it too, and danlu's readers
follow a log truncated meanwhile (:func:`~danlu.executors.records.log_tail`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from danlu.executors import slurm_task
from danlu.executors.base import Outcome, StopReason
from danlu.executors.errors import ExecutorError, LaunchError, PartitionClosedError
from danlu.executors.slurm_names import run_name
from danlu.executors.slurmctl import SlurmError

TASK_SCRIPT = Path(slurm_task.__file__).resolve()
"""The per-node task each run's ``srun`` starts on its nodes."""
BATCH = "batch.sh"
"""The batch script's name in the run directory."""
_UNSENT = re.compile(r"connect failure|Connection refused", re.IGNORECASE)
"""What ``sbatch`` says when it could not reach the controller at all (nothing was sent)."""
_PARTITION_CLOSED = re.compile(
    r"Required partition not available|Invalid partition name", re.IGNORECASE
)
"""What ``sbatch`` says when the partition takes no job (Slurm's ``State=DRAIN`` or
``INACTIVE``) or is gone: no fault of the job's."""


def batch_script(srun: str, python: str, run_dir: Path, nodes: int, workdir: str) -> str:
    """The batch script of the run recorded in ``run_dir``: ``srun`` (the program's path)
    starting the per-node task (:data:`TASK_SCRIPT`, run by ``python -I``) once on each of
    its ``nodes`` nodes, ending the run on every node when one node's task fails.

    It first enters ``workdir`` itself and exits 127 at once, naming it, when it cannot:
    ``slurmd`` runs a job whose ``--chdir`` it cannot enter in ``/tmp`` instead (it only
    logs so), and a job must never run in another directory than its own. (Another node
    may have the directory: a run failure, not a refused launch. The per-node task checks
    it again on every node, :mod:`~danlu.executors.slurm_task`.)"""
    where = shlex.quote(workdir)
    said = shlex.quote(
        "danlu: cannot enter the workdir '%s' on %s; create it there, or submit the job "
        "again with a workdir that exists\\n"  # printf writes the newline
    )
    return (
        "#!/bin/sh\n"
        f"cd -- {where} || {{ printf {said} {where} "
        '"${SLURMD_NODENAME:-$(hostname)}" >&2; exit 127; }\n'
        f"exec {shlex.quote(srun)} --kill-on-bad-exit=1 --nodes={nodes} --ntasks={nodes} "
        f"--ntasks-per-node=1 --export=ALL {shlex.quote(python)} -I "
        f"{shlex.quote(str(TASK_SCRIPT))} {shlex.quote(str(run_dir))}\n"
    )


def sbatch_options(
    admin: Sequence[str],
    name: str,
    names: Sequence[str],
    log_path: Path,
    workdir: str,
    partition: str | None,
    token: bool,
) -> list[str]:
    """The ``sbatch`` options of a run named ``name`` on nodes ``names``: the ``admin``'s
    first (``DANLU_SLURM_SBATCH_OPTIONS``: sbatch lets a later option win, and the run's
    must), its output appended to ``log_path``, started in ``workdir``, in ``partition``
    (None: Slurm's default one), exporting the job's token alone when it has one
    (``token``), else nothing."""
    count = max(1, len(names))
    return [
        *admin,
        f"--job-name={name}",
        f"--nodes={count}",
        "--ntasks-per-node=1",
        "--oversubscribe",
        "--no-requeue",
        "--export=DANLU_TOKEN" if token else "--export=NONE",
        f"--output={slurm_pattern(str(log_path))}",  # --chdir is no pattern
        "--open-mode=append",
        f"--chdir={workdir}",
        *([f"--partition={partition}"] if partition else []),
        *([f"--nodelist={','.join(names)}"] if names else []),
    ]


def slurm_pattern(path: str) -> str:
    """``path`` as a Slurm filename pattern (``--output``, ``--error``) that names it:
    ``%`` doubled (``%j`` would be the job id). Raises :class:`ExecutorError` for a path
    with a backslash: Slurm drops every backslash of a pattern that has one (and expands
    nothing then), so no pattern names it."""
    if "\\" in path:
        raise ExecutorError(
            f"{path!r} has a backslash, which Slurm drops from --output paths; "
            "use a danlu home without one"
        )
    return path.replace("%", "%%")


def closes(exc: SlurmError) -> bool:
    """Whether Slurm refused an ``sbatch`` (``exc``) as its partition takes no job (drained
    or inactive in Slurm) or is gone: no fault of the job's."""
    return bool(_PARTITION_CLOSED.search(str(exc)))


def refused(
    job_id: str,
    exc: SlurmError,
    partition: str | None,
    admin: Sequence[str],
    state: str | None = None,
) -> LaunchError:
    """The launch error of job ``job_id`` whose ``sbatch`` Slurm refused (``exc``). A
    partition that takes no job (:func:`closes`: drained or inactive in Slurm, or gone) is no
    fault of the job's nor of a node's: a :class:`PartitionClosedError`, which the control
    plane re-queues without counting a restart (a partition drained for maintenance failed
    every job submitted meanwhile, each after its restarts), its message naming the
    partition and ``state``, what Slurm reports of it just after the refusal (``sinfo``'s
    ``%a``: ``DRAIN``, ``INACTIVE``, ``DOWN``; ``""``: no such partition listed; None: not
    read), and the fix. Otherwise the job's launch failed; when the submission carried the
    ``admin``'s options (``DANLU_SLURM_SBATCH_OPTIONS``), which Slurm may be refusing
    (``--time=abc``), the error names them: a user who never gave them could not tell why."""
    name = f"partition {partition}" if partition else "Slurm's default partition"
    said = f"Slurm refused job {job_id}: {exc}"
    if closes(exc):
        fix = (
            f"scontrol update PartitionName={partition} State=UP"
            if partition
            else "scontrol update PartitionName=... State=UP"
        )
        if state and state != "UP":
            why = f"Slurm reports {name} {state}: it takes no job until {fix}"
        elif state == "UP":
            why = f"{name} took no job then (Slurm reports it UP again now)"
        elif state == "" and partition:
            why = (
                f"sinfo lists no {name}: it is gone (DANLU_SLURM_PARTITION names one that "
                "sinfo lists)"
            )
        else:
            why = (
                f"{name} takes no job now: it is drained or inactive in Slurm ({fix} "
                "opens it) or gone (DANLU_SLURM_PARTITION names one that sinfo lists)"
            )
        return PartitionClosedError(f"{why}; {said}", partition, state or "")
    if admin:
        said += (
            f" (the submission carried DANLU_SLURM_SBATCH_OPTIONS={shlex.join(admin)!r}; "
            "check them)"
        )
    return LaunchError(said)


def unsent(exc: SlurmError) -> bool:
    """Whether the failed ``sbatch`` of ``exc`` surely submitted nothing: it could not be
    started, or it could not connect to the controller (a timeout leaves it unknown)."""
    return isinstance(exc.__cause__, OSError) or bool(_UNSENT.search(str(exc)))


def unsubmitted(launch: Mapping[str, Any], reason: StopReason | None) -> dict[str, Any]:
    """The result of a run Slurm never listed: the control plane stopped before its
    ``sbatch``, a failed launch; or its ``sbatch`` timed out and Slurm did not take it
    (:meth:`~danlu.executors.slurm.SlurmExecutor._unconfirmed`), no fault of the job's:
    re-queued as a preemption is, but when it was being cancelled."""
    if "sbatch_failed_at" not in launch:
        return {"outcome": Outcome.FAILED.value, "error": "never reached Slurm"}
    requeued = reason is not StopReason.CANCEL
    return {
        "outcome": (Outcome.PREEMPTED if requeued else Outcome.FAILED).value,
        "error": f"{launch.get('sbatch_error', 'sbatch failed')}; Slurm never listed job "
        f"{run_name(launch['job_id'], launch['attempt'])}: it was not submitted"
        + ("; re-queued" if requeued else ""),
    }
