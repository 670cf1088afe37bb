"""Where jobs run: the :class:`Executor` interface, an in-memory fake for tests, and the local
process executor. Imports only :mod:`danlu.core` of danlu; nothing heavy at import."""

from danlu.executors.base import (
    PREEMPTED_EXIT_CODE,
    ExecStatus,
    Executor,
    GpuSharingExecutor,
    GpuSlot,
    Handle,
    JobLaunch,
    MultiNodeExecutor,
    Outcome,
    RunState,
    StopReason,
    classify_exit,
    validate_job_id,
)
from danlu.executors.errors import (
    ExecutorError,
    ExecutorUnavailableError,
    GpusBusyError,
    InvalidLaunchError,
    JobAlreadyRunningError,
    LaunchError,
    NodeLaunchError,
    PartitionClosedError,
    UnknownHandleError,
    is_node_fault,
)
from danlu.executors.fake import FakeExecutor, FakeWorld, ManualClock, Script
from danlu.executors.local import LocalExecutor

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "ExecStatus",
    "Executor",
    "ExecutorError",
    "ExecutorUnavailableError",
    "FakeExecutor",
    "FakeWorld",
    "GpuSharingExecutor",
    "GpuSlot",
    "GpusBusyError",
    "Handle",
    "InvalidLaunchError",
    "JobAlreadyRunningError",
    "JobLaunch",
    "LaunchError",
    "LocalExecutor",
    "ManualClock",
    "MultiNodeExecutor",
    "NodeLaunchError",
    "Outcome",
    "PartitionClosedError",
    "RunState",
    "Script",
    "StopReason",
    "UnknownHandleError",
    "classify_exit",
    "is_node_fault",
    "validate_job_id",
]
