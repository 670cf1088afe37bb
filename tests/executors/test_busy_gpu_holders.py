"""The launch check's refusal (:func:`~danlu.executors.base.busy_gpus`) names every other
job whose live run holds some of the launch's GPUs, with those GPUs, in
:attr:`~danlu.executors.GpusBusyError.holders`: the control plane names them in the job's
reason (a run a move left is recorded on no GPU in its store). Its message names the first,
as before."""

from __future__ import annotations

import pytest

from danlu.executors import GpusBusyError
from danlu.executors.base import GpuSlot, HeldGpus, JobLaunch, busy_gpus


def test_every_run_holding_a_gpu_of_the_launch_is_named_with_its_gpus() -> None:
    launch = JobLaunch("new", ("true",), gpus=(GpuSlot(0, 0), GpuSlot(0, 1), GpuSlot(1, 0)))
    held = [
        HeldGpus("moved", [(0, 1), (0, 3)], shared=False, stopping=True),
        HeldGpus("elsewhere", [(1, 1)], shared=False, stopping=True),
        HeldGpus("new", [(0, 0)], shared=False, stopping=True),  # its own: JobAlreadyRunning's
        HeldGpus("cancelled", [(1, 0), (0, 0)], shared=True, stopping=True),
    ]
    with pytest.raises(GpusBusyError, match="still held by job moved, which is stopping") as e:
        busy_gpus(launch, held)
    assert e.value.holders == {"moved": ((0, 1),), "cancelled": ((0, 0), (1, 0))}
    assert GpusBusyError("GPU busy").holders == {}  # an executor that does not say
