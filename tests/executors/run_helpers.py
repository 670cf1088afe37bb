"""What the cluster executors' tests share: waiting for a run to end or to print, a launch of
``python -c CODE``, and a job that prints its environment."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from danlu.executors import ExecStatus, Executor, Handle, JobLaunch
from danlu.executors.ray_actor import NodeRun

PY = sys.executable

ENV_DUMP = (
    "import os, json; print('ENV', json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('DANLU_', 'CUDA_', 'PET_', 'MY_', 'RAY_', 'SLURMD_NODENAME', "
    "'SLURM_JOB_ID'))}), flush=True)"
)
"""A job that prints one line, ``ENV {...}``, of the variables the tests look at."""

SHELL_CHECKPOINT = (
    "import os, pathlib, signal, sys, time\n"
    "def save(*_):\n"
    "    time.sleep(float(sys.argv[3]))  # writing the checkpoint\n"
    "    pathlib.Path(sys.argv[2]).write_text('saved')\n"
    "    sys.exit(75)\n"
    "signal.signal(signal.SIGTERM, save)\n"
    "pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\n"
    "time.sleep(60)\n"
)
"""A program a shell wrapper starts, run as ``python train.py PID_FILE SAVED SECONDS``: it
writes its pid, and on SIGTERM takes SECONDS to write SAVED, then exits 75."""


GANG_CHECKPOINT = (
    "import os, signal, sys, time\n"
    "terms = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: terms.append(1))\n"
    "print('ready', flush=True)\n"
    "while not terms:\n"
    "    time.sleep(0.05)\n"
    "if os.environ['PET_NODE_RANK'] == '0':\n"
    "    time.sleep(2.5)  # writing its checkpoint: longer than the tests' cancel grace\n"
    "print('checkpointed after', len(terms), 'SIGTERM', flush=True)\n"
    "sys.exit(75)\n"
)
"""A job of several nodes that checkpoints and exits 75 on SIGTERM: at once on all but the
node of rank 0, which takes 2.5 s; each prints how many SIGTERMs it got by then."""


def wait(ex: Executor, handle: Handle, timeout: float = 60.0) -> ExecStatus:
    """The run's status once it has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ex.poll(handle)
        if not status.running:
            return status
        time.sleep(0.1)
    raise AssertionError(f"{handle} still running after {timeout}s")


def wait_text(
    ex: Executor, handle: Handle, text: str, count: int = 1, timeout: float = 60.0
) -> str:
    """The run's log once ``text`` is in it ``count`` times (polling meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ex.poll(handle)
        log = ex.logs(handle)[0].decode()
        if log.count(text) >= count:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never in the log of {handle}: {ex.logs(handle)[0]!r}")


def launch(job_id: str, code: str, **kwargs: Any) -> JobLaunch:
    """A launch of ``python -c code``."""
    return JobLaunch(job_id, (PY, "-c", code), **kwargs)


def envs(log: str) -> list[dict[str, str]]:
    """The environments the ``ENV_DUMP`` lines of ``log`` print."""
    return [json.loads(line[4:]) for line in log.splitlines() if line.startswith("ENV ")]


def until_exit(run: NodeRun, timeout: float = 15) -> dict[str, Any]:
    """A Ray node run's last status once its command has exited and all its output was
    handed out, with ``output`` all of it (asked from where each answer left off)."""
    deadline = time.monotonic() + timeout
    out, offset = b"", 0
    while time.monotonic() < deadline:
        status = run.status(offset)
        out += status["output"]
        offset = status["offset"]
        if status["exit_code"] is not None and not status["more"]:
            return {**status, "output": out}
        time.sleep(0.05)
    raise AssertionError("still running")
