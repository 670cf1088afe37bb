"""A Ray node's command the kernel's OOM killer ended is an out-of-memory exit of the host's
memory, told from a bare SIGKILL as the local executor tells it: the node's actor
(``NodeRun``) counts the OOM kills of its memory cgroup while the command runs and reports
them (``oom_kills`` in its status), and the poll's result (``exit_result``) classifies the
exit with them. Before, such a run read ``failed (signal 9)``.

The cgroup's counter is a file of the test's (a ``/proc`` of its own names it, as
``tests/executors/test_host_oom_local.py`` fakes it), whose count the command raises before
it SIGKILLs itself, as the kernel counts the kill it makes: no root, no Ray cluster."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from oom_reasons import GPU_NOTE, WORKER_SIGKILLED, reason
from run_helpers import until_exit

from danlu.executors import Outcome
from danlu.executors.base import StopReason, exit_signal
from danlu.executors.oom_kills import killed_message
from danlu.executors.ray_actor import NodeRun
from danlu.executors.ray_results import exit_result
from danlu.executors.rundirs import exited
from danlu.server.run_exits import HOST_MEMORY_FIX

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
KILLED = "killed by the kernel's OOM killer: its memory cgroup counted 1 OOM kill while it ran"


def _fake_proc(tmp_path: Path, count: int) -> tuple[Path, Path]:
    """A ``/proc`` whose ``self`` is in cgroup v2's ``/job``, and that cgroup's
    ``memory.events`` with ``oom_kill count``: (the ``/proc``, the counter file)."""
    fs, proc = tmp_path / "cgroup", tmp_path / "proc"
    (fs / "job").mkdir(parents=True)
    events = fs / "job" / "memory.events"
    events.write_text(f"oom 0\noom_kill {count}\n")
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/job\n")
    (proc / "self" / "mountinfo").write_text(f"30 25 0:26 / {fs} rw - cgroup2 cgroup2 rw\n")
    return proc, events


def _sigkilled(events: Path, count: int | None) -> list[str]:
    """A command that sets the counter to ``count`` (None: leaves it), then SIGKILLs
    itself."""
    bump = "" if count is None else f"open({str(events)!r}, 'w').write('oom_kill {count}\\n'); "
    return [PY, "-c", f"import os, signal; {bump}os.kill(os.getpid(), signal.SIGKILL)"]


def _ended(answers: list[dict[str, Any]], tail: str = "") -> dict[str, Any]:
    """The result the poll records of a run whose nodes answered ``answers`` (with the
    signal, as the poll adds it) and whose log ends with ``tail``."""
    result = exit_result(answers, 1.0, lambda: tail, None, 100.0)
    assert result is not None
    return {**result, "signal": exit_signal(result["exit_code"])}


def test_a_node_run_the_oom_killer_ended_ran_out_of_host_memory(tmp_path: Path) -> None:
    """The actor's status counts the kill; the run's result and reason say host memory."""
    proc, events = _fake_proc(tmp_path, 2)
    run = NodeRun(_sigkilled(events, 3), ENV, log_dir=str(tmp_path / "log"), proc_root=proc)
    status = until_exit(run)
    run.close()
    assert (status["exit_code"], status["oom_kills"]) == (137, 1)

    result = _ended([status])
    assert (result["outcome"], result["host_memory"]) == (Outcome.OOM.value, True)
    assert result["error"] == killed_message(1) == KILLED
    said = reason(exited(result, None))
    assert said == f"out of host memory (signal 9; {KILLED}); not GPU memory: {HOST_MEMORY_FIX}"


def test_a_bare_sigkill_on_a_node_stays_a_failure(tmp_path: Path) -> None:
    """No kill counted while it ran (the counter as it was): ``kill -9`` is no evidence."""
    proc, events = _fake_proc(tmp_path, 2)
    run = NodeRun(_sigkilled(events, None), ENV, log_dir=str(tmp_path / "log"), proc_root=proc)
    status = until_exit(run)
    run.close()
    assert (status["exit_code"], status["oom_kills"]) == (137, 0)
    result = _ended([status])
    assert (result["outcome"], result["host_memory"], result["error"]) == (
        Outcome.FAILED.value,
        False,
        "",
    )
    assert reason(exited(result, None)) == "failed (signal 9)"


def _answer(code: int, finished: float, error: str = "", **more: Any) -> dict[str, Any]:
    """A node's recorded final status (``more``: ``oom_kills``, or nothing, as an actor of
    an earlier danlu answers)."""
    return {
        "exit_code": code,
        "started_at": 1.0,
        "finished_at": finished,
        "output": b"",
        "offset": 0,
        "more": False,
        "error": error,
        "stop": None,
        **more,
    }


@pytest.mark.parametrize(
    ("answers", "outcome", "host", "error"),
    [
        (
            [_answer(0, 5.0), _answer(137, 4.0, oom_kills=2)],
            Outcome.OOM.value,
            True,
            killed_message(2),
        ),
        ([_answer(137, 4.0)], Outcome.FAILED.value, False, ""),
        ([_answer(137, 4.0, oom_kills=None)], Outcome.FAILED.value, False, ""),
        ([_answer(137, 4.0, oom_kills=True)], Outcome.FAILED.value, False, ""),
        ([_answer(137, 4.0, "its own", oom_kills=1)], Outcome.OOM.value, True, "its own"),
        ([_answer(137, 4.0), _answer(137, 6.0, oom_kills=1)], Outcome.FAILED.value, False, ""),
        ([_answer(1, 4.0), _answer(137, 6.0, oom_kills=1)], Outcome.FAILED.value, False, ""),
    ],
    ids=[
        "counted-on-the-failing-node",
        "older-actor",
        "unreadable-count",
        "damaged-count",
        "node-error-kept",
        "first-sigkill-uncounted",
        "first-failure-not-a-kill",
    ],
)
def test_the_exit_is_classified_with_the_oom_kills_of_the_node_whose_exit_is_the_runs(
    answers: list[dict[str, Any]], outcome: str, host: bool, error: str
) -> None:
    result = _ended(answers)
    assert (result["outcome"], result["host_memory"], result["error"]) == (outcome, host, error)


def test_a_torchrun_worker_the_oom_killer_ended_on_a_node_ran_out_of_host_memory() -> None:
    """torchrun's agent on the node exits 1 after reporting its worker's SIGKILL: with the
    kill counted there it is the host's memory, said of the worker; without, a failure."""
    counted = _ended([_answer(0, 5.0), _answer(1, 4.0, oom_kills=1)], WORKER_SIGKILLED)
    worker = killed_message(1, worker=True)
    assert (counted["outcome"], counted["host_memory"], counted["error"]) == (
        Outcome.OOM.value,
        True,
        worker,
    )
    said = reason(exited(counted, None))
    assert said == f"out of host memory (exit code 1; {worker}); not GPU memory: {HOST_MEMORY_FIX}"
    bare = _ended([_answer(1, 4.0, oom_kills=0)], WORKER_SIGKILLED)
    assert (bare["outcome"], bare["host_memory"]) == (Outcome.FAILED.value, False)


def test_a_cuda_oom_or_a_preemption_keeps_its_own_outcome() -> None:
    """A CUDA out-of-memory error in the log is the GPU's, even with a kill counted after
    it; a run SIGKILLed during a preemption danlu asked for is preempted."""
    counted = [_answer(137, 4.0, oom_kills=1)]
    cuda = _ended(counted, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert (cuda["outcome"], cuda["host_memory"], cuda["error"]) == (Outcome.OOM.value, False, "")
    assert reason(exited(cuda, None)) == f"out of memory (signal 9); {GPU_NOTE}"
    preempted = exit_result(counted, 1.0, str, StopReason.PREEMPT, 100.0)
    assert preempted is not None
    assert (preempted["outcome"], preempted["host_memory"]) == (Outcome.PREEMPTED.value, False)
