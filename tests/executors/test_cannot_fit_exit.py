"""A run that ``danlu.train``'s OOM guard found cannot fit its memory (out of memory even at
the smallest micro-batch) is told apart from another out-of-memory exit by the end of its log,
``Outcome.CANNOT_FIT``: on the local and Ray executors (real processes), on the Slurm
executor's reading of an ended job, and through torchrun, whose agent exits 1 after its
workers' tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

import danlu
from danlu.core.cluster import Cluster
from danlu.executors import LocalExecutor, Outcome, StopReason, classify_exit
from danlu.executors.slurm_exits import run_result
from danlu.executors.slurmctl import SlurmJob

SRC = str(Path(danlu.__file__).resolve().parents[1])
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}

# what the OOM guard raises once the micro-batch is down to 1 and runs out of memory again
GIVES_UP = (
    "from danlu.train.batch import BatchController\n"
    "BatchController(8, micro=1).on_oom(RuntimeError('CUDA out of memory. Tried to allocate'))\n"
)

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 40, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "Traceback (most recent call last):\n"
    '  File "danlu/train/batch.py", line 130, in on_oom\n'
    "danlu.train.batch.MicroBatchOutOfMemoryError: out of memory even at micro-batch 1, the "
    "smallest the OOM recovery halves to: the model does not fit this GPU's memory limit.\n"
)
TORCHRUN_AGENT = (
    "E0101 12:00:00.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: 1) local_rank: 0 (pid: 1235) of binary: /usr/bin/python3\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/bin/torchrun", line 8, in <module>\n'
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    "============================================================\n"
    "train.py FAILED\n"
)


def _real_traceback() -> str:
    """The output of a process the guard's error ended, as a job's log holds it."""
    done = subprocess.run(
        [sys.executable, "-c", GIVES_UP], env=ENV, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done
    return done.stdout + done.stderr


def test_the_guards_own_traceback_is_the_verdict() -> None:
    """The contract between danlu.train's message and the executors' reading of it."""
    assert classify_exit(1, _real_traceback()) is Outcome.CANNOT_FIT


@pytest.mark.parametrize(
    ("code", "tail", "stop", "outcome"),
    [
        (1, TRACEBACK, None, Outcome.CANNOT_FIT),
        (1, TRACEBACK + TORCHRUN_AGENT, None, Outcome.CANNOT_FIT),  # the agent's 1 and summary
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", None, Outcome.OOM),
        (
            1,
            "OptimizerStepOutOfMemoryError: out of memory in the optimizer step",
            None,
            Outcome.OOM,
        ),
        (0, TRACEBACK, None, Outcome.SUCCEEDED),  # caught, and the script went on to finish
        (75, TRACEBACK, None, Outcome.PREEMPTED),
        (143, TRACEBACK, StopReason.PREEMPT, Outcome.PREEMPTED),
        (1, "ValueError: shapes do not match", None, Outcome.FAILED),
    ],
    ids=["verdict", "torchrun", "oom", "optimizer-oom", "exit-0", "exit-75", "preempted", "other"],
)
def test_an_exit_is_classified_by_the_guards_verdict_in_its_log(
    code: int, tail: str, stop: StopReason | None, outcome: Outcome
) -> None:
    assert classify_exit(code, tail, stop) is outcome


def test_a_local_run_that_cannot_fit_is_read_so_also_after_adoption(tmp_path: Path) -> None:
    cluster = Cluster.homogeneous(1, 1, "A100-80GB")
    ex = LocalExecutor(cluster, tmp_path / "state", base_env=ENV)
    status = wait(ex, ex.submit(launch("big", GIVES_UP)), 120)
    assert (status.outcome, status.exit_code) == (Outcome.CANNOT_FIT, 1)
    again = LocalExecutor(cluster, tmp_path / "state", base_env=ENV)  # a restarted plane
    (handle,) = again.adopt()
    assert again.poll(handle).outcome is Outcome.CANNOT_FIT


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()


def test_a_ray_run_that_cannot_fit_is_read_so(fake_ray: FakeRay, tmp_path: Path) -> None:
    from danlu.executors.ray_executor import RayExecutor

    ex = RayExecutor(tmp_path / "state", address=None, base_env=ENV)
    status = wait(ex, ex.submit(launch("big", GIVES_UP)), 120)
    assert (status.outcome, status.exit_code) == (Outcome.CANNOT_FIT, 1)
    again = RayExecutor(tmp_path / "state", address=None, base_env=ENV)  # as recorded
    (handle,) = again.adopt()
    assert again.poll(handle).outcome is Outcome.CANNOT_FIT


def test_a_slurm_job_that_cannot_fit_is_read_so(tmp_path: Path) -> None:
    """Slurm's record of the ended batch job (FAILED, exit 1) and the end of its output."""
    job = SlurmJob(7, "FAILED", exit_code=1, started_at=10.0, finished_at=20.0)
    launch_record = {"launched_at": 5.0, "nodes": []}
    result = run_result(
        tmp_path,
        launch_record,
        7,
        job,
        None,
        now=30.0,
        log_tail=lambda: TRACEBACK + TORCHRUN_AGENT,
        log_dir=tmp_path,
    )
    assert (result["outcome"], result["exit_code"]) == (Outcome.CANNOT_FIT.value, 1)


def test_a_limit_no_larger_than_the_cuda_context_cannot_fit() -> None:
    """danlu.train refuses a GPU memory limit that leaves nothing beside the CUDA context
    before training: a run with the same limit fails the same way, so it cannot fit (no
    restart), unlike a plain out-of-memory exit."""
    from danlu.train.memory_cap import ContextOutOfMemoryError, memory_cap

    with pytest.raises(ContextOutOfMemoryError) as refused:
        memory_cap(700 * 2**20, 80 * 2**30, 750 * 2**20)
    tail = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        f"danlu.train.memory_cap.ContextOutOfMemoryError: {refused.value}\n"
    )
    assert classify_exit(1, tail) is Outcome.CANNOT_FIT
    plain = tail.replace("ContextOutOfMemoryError", "OutOfMemoryError")
    assert classify_exit(1, plain) is Outcome.OOM
