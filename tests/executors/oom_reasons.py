"""The reason the control plane gives a job's failed run from its executor's status (what the
reconcile loop's poll writes: :func:`~danlu.server.run_exits.describe_exit` and
:func:`~danlu.server.run_exits.memory_note`), for a job on a 20 GiB share of one GPU; and
the end of a torchrun job's log after one of its workers died (:data:`WORKER_SIGKILLED`)."""

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


TORCHRUN_AGENT = """\
E1129 05:58:01.402000 4300 torch/distributed/elastic/multiprocessing/api.py:882] failed \
(exitcode: -9) local_rank: 1 (pid: 4321) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/dist-packages/torch/distributed/launcher/api.py", line 270, in \
launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"""
"""The start of torchrun 2.x's output when one of its workers died: the agent's log line of
the failed attempt, and the traceback its uncaught ``ChildFailedError`` prints before the
report."""


def torchrun_report(exitcode: int, signal_name: str, message: str) -> str:
    """torchrun 2.x's output ending with its ``ChildFailedError`` report (torch's
    ``torch.distributed.elastic.multiprocessing.errors``, laid out as it prints it) of rank 1,
    the one failure it saw, which exited with ``exitcode``."""
    return f"""{TORCHRUN_AGENT}
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_05:58:01
  host      : n1
  rank      : 1 (local_rank: 1)
  exitcode  : {exitcode} (pid: 4321) {signal_name}
  error_file: <N/A>
  traceback : {message}
============================================================
"""


WORKER_SIGKILLED = torchrun_report(-9, " (SIGKILL)", "Signal 9 (SIGKILL) received by PID 4321")
"""torchrun's agent's output when a worker died of SIGKILL (the kernel's OOM killer's, or
someone's ``kill -9``): it then exits 1."""
WORKER_FAILED = torchrun_report(
    1, "", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
)
"""torchrun's agent's output when a worker exited 1."""
