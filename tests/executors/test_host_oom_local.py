"""A local run the kernel's OOM killer ended (the host's memory, or its cgroup's limit, ran out)
is an out-of-memory exit of the host's memory, told from a bare SIGKILL by the OOM kill count
of the job's memory cgroup, which its supervisor reads before and after the job
(:mod:`danlu.executors.oom_kills`). Before, such a run read ``failed (signal 9)``, and one
whose log said "out of memory" read ``out of memory (signal 9); it had a 20.0GiB share of 1
GPU, which a restart gets again``: GPU memory, which was not what ran out.

The real kill needs a memory cgroup of the test's own (root, and a cgroup file system with
the memory controller: skipped elsewhere, as the tests that start jobs as other accounts
are); the supervisor runs in it from its start, as a control plane run with a memory limit
(systemd's ``MemoryMax``) runs its supervisors. The counter's reading and the
classification are tested on their own everywhere."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from oom_reasons import GPU_NOTE, TORCHRUN_AGENT, WORKER_FAILED, WORKER_SIGKILLED, reason
from run_helpers import launch, wait

from danlu.core.cluster import Cluster
from danlu.executors import ExecStatus, LocalExecutor, Outcome, RunState, classify_exit
from danlu.executors.base import host_oom
from danlu.executors.oom_kills import OomKills, counter_file, killed_message, read_count
from danlu.server.run_exits import HOST_MEMORY_FIX

LIMIT = 64 << 20
"""The test cgroup's memory limit: the supervisor and a bare Python fit, the job's 1 GiB not."""
HOG = "chunks = [bytearray(16 << 20) for _ in range(64)]"
"""A job that wants 1 GiB, 16 MiB at a time (each written: bytearray zeroes its memory)."""
SELF_KILLED = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"

STEPD = "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks\n"
CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup paths: ``""`` for v2's, ``"memory"`` for v1's."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" or "memory" in controllers.split(","):
            found["memory" if controllers else ""] = path
    return found


def _make_cgroup(name: str) -> Path | None:
    """A new memory cgroup named ``name`` with :data:`LIMIT`, made where this host allows:
    under this process's own v1 memory cgroup, or at the root of the v2 hierarchy where its
    memory controller is enabled for children; None where neither can be made."""
    own = _own_cgroups()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        kind, _, options = tail.split()[:3] if tail else ("", "", "")
        point = Path(fields.split()[4])
        if kind == "cgroup" and "memory" in options.split(",") and "memory" in own:
            made, limit = point / own["memory"].lstrip("/") / name, "memory.limit_in_bytes"
        elif kind == "cgroup2" and "memory" in _read(point / "cgroup.subtree_control").split():
            made, limit = point / name, "memory.max"
        else:
            continue
        try:
            made.mkdir()
        except OSError:
            continue
        try:
            (made / limit).write_text(str(LIMIT))
            for extra, value in (("memory.swap.max", "0"), ("memory.swappiness", "0")):
                with contextlib.suppress(OSError):  # no swap to fall back on: the OOM kill
                    (made / extra).write_text(value)
            return made
        except OSError:
            made.rmdir()
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.fixture
def in_cgroup(tmp_path: Path) -> Iterator[str]:
    """A memory cgroup of :data:`LIMIT` and a ``python`` that runs in it (a script that
    joins it, then runs this Python), for the executor's supervisors; removed after."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup of the test's own needs root")
    made = _make_cgroup(f"danlu-test-{secrets.token_hex(4)}")
    if made is None:
        pytest.skip("no memory cgroup can be made here (no cgroup memory controller)")
    python = tmp_path / "python-in-cgroup"
    python.write_text(
        f'#!/bin/sh\necho $$ > "{made}/cgroup.procs" || exit 70\nexec "{sys.executable}" "$@"\n'
    )
    python.chmod(0o755)
    try:
        yield str(python)
    finally:
        deadline = time.monotonic() + 10
        while _read(made / "cgroup.procs").strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            made.rmdir()


def test_a_job_the_oom_killer_ended_ran_out_of_host_memory(in_cgroup: str, tmp_path: Path) -> None:
    """Its reason says host memory and what to change, not the GPU share it had; a job that
    SIGKILLs itself in the same cgroup afterwards (no OOM kill counted) stays a failure."""
    ex = LocalExecutor(
        Cluster.homogeneous(1, 1, "A100-80GB"),
        tmp_path / "state",
        base_env={"PATH": "/usr/bin:/bin"},
        python=in_cgroup,
    )
    status = wait(ex, ex.submit(launch("hog", HOG)), timeout=30)
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.OOM, 137, 9)
    assert status.host_memory
    killed = "killed by the kernel's OOM killer: its memory cgroup counted 1 OOM kill while it ran"
    assert status.message == killed
    said = reason(status)
    assert said == f"out of host memory (signal 9; {killed}); not GPU memory: {HOST_MEMORY_FIX}"

    bare = wait(ex, ex.submit(launch("kill9", SELF_KILLED)), timeout=30)
    assert (bare.outcome, bare.signal, bare.host_memory) == (Outcome.FAILED, 9, False)
    assert reason(bare) == "failed (signal 9)"


def _launcher(worker: str, report: str) -> str:
    """A job that runs ``worker`` as its child, as torchrun's agent runs its workers, then
    prints ``report`` and exits 1 as the agent does once the child died of SIGKILL."""
    return (
        "import subprocess, sys\n"
        f"died = subprocess.run([sys.executable, '-c', {worker!r}]).returncode\n"
        "assert died == -9, died\n"
        f"sys.stdout.write({report!r})\n"
        "sys.exit(1)\n"
    )


def test_a_torchrun_job_whose_worker_the_oom_killer_ended_ran_out_of_host_memory(
    in_cgroup: str, tmp_path: Path
) -> None:
    """The worker's OOM kill counted while the job ran makes the agent's exit 1 the host's
    memory; a worker that SIGKILLs itself (no OOM kill counted) leaves a failure."""
    ex = LocalExecutor(
        Cluster.homogeneous(1, 1, "A100-80GB"),
        tmp_path / "state",
        base_env={"PATH": "/usr/bin:/bin"},
        python=in_cgroup,
    )
    job = launch("torchrun-hog", _launcher(HOG, WORKER_SIGKILLED))
    status = wait(ex, ex.submit(job), timeout=30)
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.OOM, 1, None)
    assert status.host_memory
    killed = killed_message(1, worker=True)
    assert status.message == killed
    assert reason(status) == (
        f"out of host memory (exit code 1; {killed}); not GPU memory: {HOST_MEMORY_FIX}"
    )

    bare = wait(
        ex, ex.submit(launch("torchrun-kill9", _launcher(SELF_KILLED, WORKER_SIGKILLED))), 30
    )
    assert (bare.outcome, bare.exit_code, bare.host_memory) == (Outcome.FAILED, 1, False)
    assert reason(bare) == "failed (exit code 1)"


# -- the evidence, on its own --------------------------------------------------------------


def _proc(root: Path, cgroup: str, mountinfo: str) -> Path:
    """A ``/proc`` under ``root`` whose ``self`` has ``cgroup`` and ``mountinfo``."""
    (root / "self").mkdir(parents=True)
    (root / "self" / "cgroup").write_text(cgroup)
    (root / "self" / "mountinfo").write_text(mountinfo)
    return root


def _counter(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cgroup_v2s_memory_events_counts_the_kills(tmp_path: Path) -> None:
    """A container's view (the mount's root a cgroup of the host's) and a path with a
    space (``\\040`` in ``mountinfo``)."""
    fs = tmp_path / "fs"
    events = _counter(fs / "job x" / "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    proc = _proc(
        tmp_path / "proc",
        "0::/kubepods/pod1/job x\n",
        f"30 25 0:26 /kubepods/pod1 {fs} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n".replace(
            "job x", "job\\040x"
        ),
    )
    assert counter_file(proc_root=proc) == events
    kills = OomKills(proc_root=proc)
    assert kills.start == 2 and kills.since() == 0
    events.write_text("oom 2\noom_kill 3\n")
    assert kills.since() == 1


def test_a_hybrid_host_reads_cgroup_v1s_memory_controller(tmp_path: Path) -> None:
    """v2 mounted without the memory controller (no ``memory.events``) beside v1's."""
    unified, memory = tmp_path / "unified", tmp_path / "memory"
    (unified / "svc").mkdir(parents=True)
    control = _counter(
        memory / "svc" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
    )
    proc = _proc(
        tmp_path / "proc",
        "12:cpu,cpuacct:/svc\n4:memory:/svc\n0::/svc\n",
        f"34 25 0:29 / {unified} rw - cgroup2 cgroup2 rw\n"
        f"36 25 0:31 / {memory} rw - cgroup cgroup rw,memory\n",
    )
    assert counter_file(proc_root=proc) == control
    assert read_count(control) == 5


def test_no_counter_is_no_evidence(tmp_path: Path) -> None:
    """No cgroup file system, or a kernel without the count (before Linux 4.13)."""
    bare = _proc(tmp_path / "bare", "0::/\n", "22 1 8:1 / / rw - ext4 /dev/vda rw\n")
    assert counter_file(proc_root=bare) is None and OomKills(proc_root=bare).since() is None
    old = tmp_path / "old"
    _counter(old / "fs" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n")
    proc = _proc(
        old / "proc", "4:memory:/\n", f"36 25 0:31 / {old / 'fs'} rw - cgroup m rw,memory\n"
    )
    assert counter_file(proc_root=proc) is None


@pytest.mark.parametrize(
    ("code", "tail", "oom_killed", "outcome", "host"),
    [
        (137, "", True, Outcome.OOM, True),
        (
            137,
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0.",
            False,
            Outcome.OOM,
            True,
        ),
        (137, "", False, Outcome.FAILED, False),
        (1, "", True, Outcome.FAILED, False),
        (
            137,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
            True,
            Outcome.OOM,
            False,
        ),
    ],
    ids=["oom-kill-counted", "slurmstepd", "bare-sigkill", "exit-1", "cuda-oom"],
)
def test_a_host_oom_needs_a_sigkill_and_evidence(
    code: int, tail: str, oom_killed: bool, outcome: Outcome, host: bool
) -> None:
    """A CUDA out-of-memory error keeps the GPU's, even with a kill counted after it."""
    assert classify_exit(code, tail, oom_killed=oom_killed) is outcome
    assert host_oom(code, tail, oom_killed) is host


@pytest.mark.parametrize(
    ("code", "tail", "oom_killed", "outcome", "host"),
    [
        (1, WORKER_SIGKILLED, True, Outcome.OOM, True),
        (1, STEPD + WORKER_SIGKILLED, False, Outcome.OOM, True),
        (1, WORKER_SIGKILLED, False, Outcome.FAILED, False),
        (1, CUDA_OOM + WORKER_SIGKILLED, True, Outcome.OOM, False),
        (1, WORKER_FAILED, True, Outcome.FAILED, False),
        (1, TORCHRUN_AGENT, True, Outcome.FAILED, False),
        (0, WORKER_SIGKILLED, True, Outcome.SUCCEEDED, False),
        (75, WORKER_SIGKILLED, True, Outcome.PREEMPTED, False),
        (None, WORKER_SIGKILLED, True, Outcome.FAILED, False),
    ],
    ids=[
        "oom-kill-counted",
        "slurmstepd",
        "admins-kill-9",
        "cuda-oom",
        "worker-exit-1",
        "agent-log-line-alone",
        "exit-0",
        "checkpointed",
        "no-exit-code",
    ],
)
def test_a_torchrun_worker_the_oom_killer_ended_ran_out_of_host_memory(
    code: int | None, tail: str, oom_killed: bool, outcome: Outcome, host: bool
) -> None:
    """torchrun's agent exits 1 after its report of a worker's ``exitcode -9``: with the
    evidence of an OOM kill it is the host's memory; without it (an admin's ``kill -9`` of a
    worker), with a CUDA out-of-memory error, or with a worker that exited 1 it is not. The
    agent's own ``failed (exitcode: -9)`` line, printed at every failed attempt even when a
    restart of the workers went on, is not the report."""
    assert classify_exit(code, tail, oom_killed=oom_killed) is outcome
    assert host_oom(code, tail, oom_killed) is host


def test_a_torchrun_report_read_from_torch_itself_is_recognised() -> None:
    """The report torch's own ``ChildFailedError`` formats, where torch is installed (its
    layout is what :data:`~danlu.executors.base.WORKER_SIGKILLED` reads)."""
    errors = pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    killed = errors.ProcessFailure(1, 4321, -9, "/nonexistent/error.json")
    stopped = errors.ProcessFailure(0, 4320, 1, "/nonexistent/error.json")
    report = errors.ChildFailedError("train.py", {1: killed, 0: stopped}).format_msg()
    assert host_oom(1, report, oom_killed=True)
    assert not host_oom(1, report, oom_killed=False)
    alone = errors.ChildFailedError("train.py", {0: stopped}).format_msg()
    assert not host_oom(1, alone, oom_killed=True)


def test_a_torchrun_worker_killed_out_of_host_memory_says_so() -> None:
    """The reason names host memory and the worker, not the run, as what was killed."""
    worker = "a worker of it killed by the kernel's OOM killer: its memory cgroup counted 1 OOM"
    status = ExecStatus(
        RunState.EXITED,
        outcome=Outcome.OOM,
        exit_code=1,
        message=f"{worker} kill while it ran",
        host_memory=True,
    )
    assert killed_message(1, worker=True) == status.message
    assert reason(status) == (
        f"out of host memory (exit code 1; {status.message}); not GPU memory: {HOST_MEMORY_FIX}"
    )


def test_a_cuda_oom_keeps_its_gpu_note() -> None:
    status = ExecStatus(RunState.EXITED, outcome=Outcome.OOM, exit_code=1)
    assert reason(status) == f"out of memory (exit code 1); {GPU_NOTE}"
