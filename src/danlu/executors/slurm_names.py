"""The Slurm job names of the Slurm executor's runs
(:class:`~danlu.executors.slurm.SlurmExecutor`: ``danlu.JOB_ID.ATTEMPT``), and the look-ups
by name of a run whose launch record (and the Slurm job id in it) is missing or damaged:
which of its Slurm jobs still run, and on which nodes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from danlu.core.cluster import Cluster
from danlu.executors.base import HeldGpus
from danlu.executors.slurmctl import SlurmCommands, SlurmError, SlurmJob, SlurmUnavailableError

log = logging.getLogger(__name__)

STATE_PREFIX = "danlu"
"""The first part of the Slurm job name of every run (``danlu.JOB_ID.ATTEMPT``)."""


def run_name(job_id: str, attempt: int) -> str:
    """The Slurm job name of run ``attempt`` of job ``job_id`` (``danlu.JOB_ID.ATTEMPT``)."""
    return f"{STATE_PREFIX}.{job_id}.{attempt}"


def attempts_prefix(run_dir: Path) -> str:
    """The start of the Slurm job names of the runs of the job of ``run_dir``
    (``danlu.JOB_ID.``)."""
    return f"{STATE_PREFIX}.{run_dir.name}."


def is_attempt(name: str | None, run_dir: Path) -> bool:
    """Whether the Slurm job name ``name`` is that of a run of the job of ``run_dir``
    (``danlu.JOB_ID.ATTEMPT``, any attempt); a name not read (None) is taken as one."""
    if name is None:
        return True
    prefix = attempts_prefix(run_dir)
    attempt = name[len(prefix) :]
    return name.startswith(prefix) and attempt.isdecimal() and attempt.isascii()


def named_live(commands: SlurmCommands, run_dir: Path) -> list[int]:
    """The ids of the Slurm jobs named as a run of the job of ``run_dir``
    (``danlu.JOB_ID.ATTEMPT``, any attempt) that Slurm may still run."""
    return sorted(
        i
        for i, (name, state) in commands.named(attempts_prefix(run_dir)).items()
        if is_attempt(name, run_dir) and SlurmJob(i, state).running
    )


def still_runs(commands: SlurmCommands, run_dir: Path) -> str | None:
    """The Slurm jobs of the run in ``run_dir`` that Slurm may still run, when its
    launch record (and the Slurm job id in it) is missing or damaged: those named as a
    run of its job (``danlu.JOB_ID.ATTEMPT``, any attempt: the record that named it is
    gone). Their records are not deleted while they run: a relaunch would run the job
    twice on its GPUs, the old run's tasks writing into the new run's directory.
    Raises :class:`SlurmUnavailableError` when Slurm cannot be asked (nothing is
    deleted then)."""
    try:
        live = named_live(commands, run_dir)
    except SlurmError as exc:
        raise SlurmUnavailableError(
            f"cannot ask Slurm whether job {run_dir.name} still runs: {exc}"
        ) from exc
    if not live:
        return None
    ids = " ".join(map(str, live))
    return f"Slurm job {ids} of it still runs; stop it (scancel {ids})"


def unread_gpus(
    commands: SlurmCommands, inventory: Callable[[], Cluster], run_dir: Path
) -> HeldGpus | None:
    """Every GPU of the nodes of the Slurm jobs of the run in ``run_dir``, which still runs
    without a readable launch record (:func:`named_live`): the nodes Slurm gave them
    (``NodeList``), or those they asked for while they wait (``ReqNodeList``, the run's
    ``--nodelist``), as numbered in the executor's ``inventory`` (read only when needed).
    Which GPUs of a node the run has is in its run directory (its task file), which the job
    can rewrite, so they are all held, whole. None (the run's GPUs not known: every GPU is
    held) when Slurm names no nodes for one of them or cannot be asked."""
    names: set[str] = set()
    try:
        for slurm_id in named_live(commands, run_dir):
            job = commands.job(slurm_id)
            if job is None or not job.running:
                continue  # ended since
            if not commands.owns(job) or not is_attempt(job.name, run_dir):
                continue  # ended and forgotten since: its id is another job's now
            if not job.node_list:
                return None
            names.update(commands.hostnames(job.node_list))
    except SlurmError as exc:
        log.warning("cannot ask Slurm for the nodes of job %s: %s", run_dir.name, exc)
        return None
    gpus = [
        (n, gpu)
        for n, node in enumerate(inventory().nodes)
        if node.name in names
        for gpu in range(node.gpus)
    ]
    return HeldGpus(run_dir.name, gpus, shared=False, stopping=False)
