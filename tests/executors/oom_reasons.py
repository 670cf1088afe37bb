"""The reason the control plane gives a job's failed run from its executor's status (what the
reconcile loop's poll writes: :func:`~danlu.server.run_exits.describe_exit` and
:func:`~danlu.server.run_exits.memory_note`), for a job on a 20 GiB share of one GPU."""

from __future__ import annotations

from typing import Any

from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.executors import ExecStatus
from danlu.server.db import Job
from danlu.server.run_exits import describe_exit, memory_note

SHARE = [{"node": "n1", "gpu": 0, "milli": 250, "memory": 20 * GiB}]
"""The job row's allocation: a 20 GiB share of GPU 0 of n1."""
GPU_NOTE = "it had a 20.0GiB share of 1 GPU, which a restart gets again"
"""What the reason of a run that ran out of GPU memory says of that share."""


def reason(status: ExecStatus, **resources: Any) -> str:
    """The reason of ``status``'s run of a job asking for ``resources`` (besides its 20 GiB
    of GPU memory): its exit, then what it says of memory."""
    spec = {
        "name": "train",
        "command": ["python", "train.py"],
        "resources": {"gpu_memory": "20GiB", **resources},
    }
    job = Job(spec=parse_spec(spec).model_dump(mode="json"), gpu_memory_per_gpu=20 * GiB)
    return describe_exit(status)[2] + memory_note(status, job, SHARE)
