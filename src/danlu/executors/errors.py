"""Errors of the executors, all in the :class:`~danlu.core.errors.DanluError` tree::

DanluError
└── ExecutorError                   an executor could not do what was asked
    ├── InvalidLaunchError (SpecError)  a launch request is invalid (job id, argv, paths)
    ├── UnknownHandleError          a handle this executor has never seen (or forgot)
    ├── JobAlreadyRunningError      a second run of a job id that still runs
    ├── GpusBusyError               a launch onto GPUs that a stopping run still holds
    └── LaunchError                 the job could not be started (missing program, ...)
"""

from __future__ import annotations

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
    yet. Submit again once that run has exited."""


class LaunchError(ExecutorError):
    """The job could not be started; the message says why."""
