"""Errors of the executors, all in the :class:`~danlu.core.errors.DanluError` tree::

DanluError
└── ExecutorError                   an executor could not do what was asked
    ├── InvalidLaunchError (SpecError)  a launch request is invalid (job id, argv, paths)
    ├── UnknownHandleError          a handle this executor has never seen (or forgot)
    ├── JobAlreadyRunningError      a second run of a job id that still runs
    ├── GpusBusyError               a launch onto GPUs that a stopping run still holds
    ├── ExecutorUnavailableError    the executor's backend (Slurm's controller) is unreachable
    └── LaunchError                 the job could not be started (missing program, ...)
        └── NodeLaunchError         ... for the node's reasons (disk full, no processes left)
            └── PartitionClosedError    ... as the cluster's partition takes no job now
"""

from __future__ import annotations

import errno
from collections.abc import Collection, Iterable, Mapping

from danlu.core.errors import DanluError, SpecError


class ExecutorError(DanluError):
    """An executor could not do what was asked."""


class InvalidLaunchError(ExecutorError, SpecError):
    """A launch request with an invalid field; ``field`` names it (``job_id``, ``argv``...)."""


class UnknownHandleError(ExecutorError):
    """A handle that this executor does not know (never submitted here, or forgotten)."""


class JobAlreadyRunningError(ExecutorError):
    """A job id submitted again while its previous run still runs."""


class GpusBusyError(ExecutorError):
    """A launch onto GPUs that a run asked to stop (another job's, preempted, moved or
    cancelled) still holds: the control plane already counts them free, the GPUs do not
    yet. Submit again once that run has exited.

    ``holders``: the jobs whose live runs hold some of the launch's GPUs, by job id, each
    with those GPUs as ``(node, gpu)`` indices of the executor's cluster; empty where the
    executor does not say (the control plane names them in the job's reason: a run a move
    left is recorded on no GPU in its store)."""

    def __init__(
        self, message: str, holders: Mapping[str, Iterable[tuple[int, int]]] | None = None
    ) -> None:
        super().__init__(message)
        self.holders: dict[str, tuple[tuple[int, int], ...]] = {
            job: tuple(gpus) for job, gpus in (holders or {}).items()
        }


class ExecutorUnavailableError(ExecutorError):
    """The service the executor runs jobs through (Slurm's controller) cannot be reached or
    did not answer in time: nothing was started. Not the job's fault nor a node's; the
    control plane launches again at a later pass."""


class LaunchError(ExecutorError):
    """The job could not be started; the message says why."""


class NodeLaunchError(LaunchError):
    """The node could not start the job for reasons of its own (its disk full, out of
    processes, memory or file handles, a file system gone read-only): not the job's fault,
    so the control plane re-queues it without counting a restart against it.

    ``nodes`` names the nodes at fault when the executor knows them (Slurm reports one of a
    job's nodes down); None means all of the job's nodes, and an empty tuple none of them (the
    control plane's own files could not be written)."""

    def __init__(self, message: str, nodes: Collection[str] | None = None) -> None:
        super().__init__(message)
        self.nodes: tuple[str, ...] | None = None if nodes is None else tuple(nodes)


class PartitionClosedError(NodeLaunchError):
    """The cluster's partition that danlu runs its jobs in takes no job now (Slurm reports it
    ``DRAIN``, ``INACTIVE`` or ``DOWN``, or it is gone): neither the job's fault nor a node's.
    The control plane re-queues the job with no restart counted and no node blamed, its
    reason saying the partition is closed (the message names it and its state).
    ``partition``: its name (None: the cluster's default one); ``state``: what the cluster
    reports of it (``""``: not known, or no such partition listed)."""

    def __init__(self, message: str, partition: str | None, state: str) -> None:
        super().__init__(message, nodes=())
        self.partition = partition
        self.state = state


NODE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.EAGAIN,
        errno.EROFS,
        errno.EIO,
    }
)
"""The ``errno`` values of an :class:`OSError` that mean the node ran out of something or
its storage failed, not that the job asked for something wrong."""


def is_node_fault(exc: BaseException) -> bool:
    """Whether a failed launch is the node's fault, not the job's: a
    :class:`NodeLaunchError`, or an :class:`OSError` with one of :data:`NODE_ERRNOS`."""
    if isinstance(exc, NodeLaunchError):
        return True
    return isinstance(exc, OSError) and exc.errno in NODE_ERRNOS
