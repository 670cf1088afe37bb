"""The local executor with real processes: env, logs, classification, signals, adoption."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from run_helpers import SHELL_CHECKPOINT

from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecStatus,
    ExecutorError,
    GpusBusyError,
    GpuSlot,
    Handle,
    InvalidLaunchError,
    JobAlreadyRunningError,
    JobLaunch,
    LocalExecutor,
    Outcome,
    StopReason,
    UnknownHandleError,
    supervise,
)
from danlu.executors.supervise import proc_start_time

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "DANLU_JOB_ID": "leaked-from-parent"}


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 4, "A100-80GB"),
        tmp_path / "state",
        base_env=ENV,
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
    )


def wait(ex: LocalExecutor, handle: Handle, timeout: float = 15.0) -> ExecStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ex.poll(handle)
        if not status.running:
            return status
        time.sleep(0.02)
    raise AssertionError(f"{handle} still running after {timeout}s")


def wait_for(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def launch(job_id: str, code: str, **kwargs: object) -> JobLaunch:
    return JobLaunch(job_id, (PY, "-c", code), **kwargs)  # type: ignore[arg-type]


def test_job_succeeds_with_env_pinning_and_logs(ex: LocalExecutor, tmp_path: Path) -> None:
    code = (
        "import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith(('DANLU_', 'CUDA_', 'MY_'))}))"
    )
    job = launch(
        "env-1",
        code,
        env={"MY_VAR": "x y", "DANLU_JOB_ID": "spoofed"},
        gpus=(GpuSlot(0, 1, 20 * 2**30), GpuSlot(0, 3, 30 * 2**30)),
        checkpoint_dir=str(tmp_path / "ckpt"),
        restart_count=2,
        batch_size=16,
        token="tok",
    )
    handle = ex.submit(job)
    assert handle == Handle("env-1", 2)
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED and status.exit_code == 0
    data, offset = ex.logs(handle)
    env = json.loads(data.decode())
    assert offset == len(data)
    launched = json.loads((tmp_path / "state" / "runs" / "env-1" / "launch.json").read_text())
    assert env.pop("DANLU_RUN_MARK") == launched["mark"]  # finds its daemons (a lost run)
    assert env == {
        "MY_VAR": "x y",
        "DANLU_JOB_ID": "env-1",
        "DANLU_RESTART_COUNT": "2",
        "DANLU_API_URL": "http://127.0.0.1:8080",
        "DANLU_TOKEN": "tok",
        "DANLU_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "DANLU_GPU_MEMORY_LIMIT": str(20 * 2**30),
        "DANLU_BATCH_SIZE": "8",  # the per-GPU share of the global 16 over 2 GPUs
        "DANLU_GLOBAL_BATCH_SIZE": "16",
        "CUDA_VISIBLE_DEVICES": "1,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert ex.logs(handle, offset) == (b"", offset)
    assert (tmp_path / "state" / "logs" / "env-1.log").exists()


def test_the_micro_batch_limit_caps_the_per_gpu_batch() -> None:
    two = (GpuSlot(0, 1, 20 * 2**30), GpuSlot(0, 3, 30 * 2**30))
    assert launch("cap-1", "pass", gpus=two, batch_size=64).per_gpu_batch == 32
    capped = launch("cap-2", "pass", gpus=two, batch_size=64, micro_batch_limit=12)
    assert (capped.per_gpu_batch, capped.batch_size) == (12, 64)  # the global batch stays
    assert launch("cap-3", "pass", gpus=two, batch_size=16, micro_batch_limit=12).per_gpu_batch == 8
    assert launch("cap-4", "pass", gpus=two, micro_batch_limit=12).per_gpu_batch is None


def test_no_gpus_hides_all_and_device_map(tmp_path: Path) -> None:
    ex = LocalExecutor(
        Cluster.homogeneous(2, 2),
        tmp_path,
        base_env=ENV,
        devices={(0, 0): "0", (0, 1): "2", (1, 0): "1", (1, 1): "3"},
    )
    assert ex.visible_devices(JobLaunch("a", ("x",), gpus=(GpuSlot(0, 1), GpuSlot(1, 0)))) == "2,1"
    assert ex.child_env(JobLaunch("a", ("x",)))["CUDA_VISIBLE_DEVICES"] == ""
    whole = JobLaunch("a", ("x",), gpus=(GpuSlot(0, 0),))
    assert "DANLU_GPU_MEMORY_LIMIT" not in ex.child_env(whole)
    with pytest.raises(InvalidLaunchError, match="GPU 5"):
        ex.submit(JobLaunch("a", ("x",), gpus=(GpuSlot(0, 5),)))


def test_failure_and_preempted_exit_codes(ex: LocalExecutor) -> None:
    failed = ex.submit(launch("fail", "import sys; print('boom'); sys.exit(3)"))
    preempted = ex.submit(launch("pre", "import sys; sys.exit(75)"))
    status = wait(ex, failed)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, 3)
    status = wait(ex, preempted)
    assert (status.outcome, status.exit_code, status.checkpointed) == (Outcome.PREEMPTED, 75, True)


def test_oom_from_torch_text(ex: LocalExecutor) -> None:
    code = (
        "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB',"
        " file=sys.stderr); sys.exit(1)"
    )
    assert wait(ex, ex.submit(launch("oom", code))).outcome is Outcome.OOM


def test_missing_program_fails_with_127(ex: LocalExecutor) -> None:
    handle = ex.submit(JobLaunch("nope", ("/nonexistent/program",)))
    status = wait(ex, handle)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, 127)
    assert b"cannot start" in ex.logs(handle)[0]


def test_a_job_starts_in_its_workdir_and_a_missing_one_is_refused(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    here = tmp_path / "work dir"
    here.mkdir()
    handle = ex.submit(
        JobLaunch("wd", (PY, "-c", "import os; print(os.getcwd())"), workdir=str(here))
    )
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert ex.logs(handle)[0].decode().strip() == str(here)
    with pytest.raises(InvalidLaunchError, match=r"workdir: .*gone.* is not a directory") as e:
        ex.submit(JobLaunch("wd2", (PY, "-c", "pass"), workdir=str(tmp_path / "gone")))
    assert e.value.field == "workdir"  # the control plane fails the job: no restart helps


def test_shell_metacharacters_are_literal(ex: LocalExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = f"; touch {marker} && echo $HOME `id` | cat > /dev/null"
    code = "import sys, json; print(json.dumps(sys.argv[1:]))"
    handle = ex.submit(JobLaunch("lit", (PY, "-c", code, evil, "$(id)", "*")))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert json.loads(ex.logs(handle)[0]) == [evil, "$(id)", "*"]
    assert not marker.exists()


def test_shell_only_when_asked(ex: LocalExecutor) -> None:
    job = JobLaunch("sh", ("echo one && echo two",), shell=True)  # noqa: S604 - the explicit opt-in
    assert job.command == ["/bin/sh", "-c", "echo one && echo two"]
    assert wait(ex, ex.submit(job)).outcome is Outcome.SUCCEEDED
    assert ex.logs(Handle("sh"))[0] == b"one\ntwo\n"
    with pytest.raises(InvalidLaunchError, match="exactly one"):
        JobLaunch("sh2", ("echo", "x"), shell=True)  # noqa: S604


@pytest.mark.parametrize(
    "bad", ["../../etc", "..", ".hidden", "a/b", "", "x" * 200, "a\0b", "job\n", "job\n\n"]
)
def test_malicious_job_ids_are_rejected(ex: LocalExecutor, bad: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidLaunchError) as err:
        JobLaunch(bad, ("true",))
    assert err.value.field == "job_id"
    with pytest.raises(InvalidLaunchError):
        ex.poll(Handle(bad))
    assert not (tmp_path / "etc").exists()


def test_log_symlink_cannot_escape(ex: LocalExecutor, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sneaky.log").symlink_to(tmp_path / "outside.log")
    with pytest.raises(InvalidLaunchError, match="escapes"):
        ex.submit(JobLaunch("sneaky", ("true",), log_dir=str(logs)))
    assert not (tmp_path / "outside.log").exists()


def test_preempt_checkpointing_job_exits_75(ex: LocalExecutor, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('checkpoint'), sys.exit(75)))\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(launch("ckpt", code))
    wait_for(ready)
    ex.preempt(handle, grace_seconds=10)
    status = wait(ex, handle)
    assert (status.outcome, status.exit_code, status.stop_reason) == (
        Outcome.PREEMPTED,
        75,
        StopReason.PREEMPT,
    )
    assert b"checkpoint" in ex.logs(handle)[0]


@pytest.mark.parametrize(("own", "ended"), [(None, (137, 9)), (20.0, (75, None))])
def test_a_job_that_asked_for_a_longer_grace_gets_it(
    ex: LocalExecutor, tmp_path: Path, own: float | None, ended: tuple[int | None, int | None]
) -> None:
    ready = tmp_path / "ready"
    saving = "lambda *a: (time.sleep(1.5), print('saved'), sys.exit(75))"
    code = (  # a checkpoint that takes 1.5 s, against a preemption's grace of 0.3 s
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGTERM, {saving})\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(launch("slow-ckpt", code, preempt_grace=own))
    wait_for(ready)
    ex.preempt(handle, grace_seconds=0.3)
    status = wait(ex, handle)
    assert (status.exit_code, status.signal, status.stop_reason) == (*ended, StopReason.PREEMPT)
    assert (b"saved" in ex.logs(handle)[0]) is (own is not None)


@pytest.mark.parametrize("wrapper", ["cd {dir} && {cmd}", "{cmd}; echo after"])
def test_a_shell_wrappers_program_gets_the_grace_to_checkpoint(
    ex: LocalExecutor, tmp_path: Path, wrapper: str
) -> None:
    """``shell: true`` (or ``bash run.sh``): the SIGTERM kills ``/bin/sh`` at once; the
    program it started still checkpoints within the grace instead of being SIGKILLed as
    soon as the shell is gone."""
    script, pid_file, saved = tmp_path / "train.py", tmp_path / "pid", tmp_path / "saved"
    script.write_text(SHELL_CHECKPOINT)
    cmd = f"{PY} {script} {pid_file} {saved} 1.0"
    wrapped = JobLaunch("wrapped", (wrapper.format(dir=tmp_path, cmd=cmd),), shell=True)  # noqa: S604
    handle = ex.submit(wrapped)
    program = int(wait_for(pid_file))
    ex.preempt(handle, grace_seconds=60)
    status = wait(ex, handle, timeout=60)
    assert saved.exists(), "the program was killed in the middle of its checkpoint"
    assert (status.outcome, status.stop_reason) == (Outcome.PREEMPTED, StopReason.PREEMPT)
    assert _gone(program)


def test_a_shell_wrappers_program_is_killed_when_the_grace_ends(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The wait for the rest of the group ends with the grace: a program whose checkpoint
    takes longer is SIGKILLed then, and the run ends."""
    script, pid_file, saved = tmp_path / "train.py", tmp_path / "pid", tmp_path / "saved"
    script.write_text(SHELL_CHECKPOINT)
    cmd = f"cd {tmp_path} && {PY} {script} {pid_file} {saved} 120"
    handle = ex.submit(JobLaunch("wrapped", (cmd,), shell=True))  # noqa: S604
    program = int(wait_for(pid_file))
    ex.preempt(handle, grace_seconds=0.5)
    status = wait(ex, handle, timeout=60)
    assert status.outcome is Outcome.PREEMPTED and not saved.exists()
    assert _gone(program)


def test_sigterm_ignored_then_sigkill_whole_group(ex: LocalExecutor, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import os, signal, subprocess, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        f"pathlib.Path({str(pids)!r}).write_text(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(launch("stubborn", code))
    job_pid, grandchild = map(int, wait_for(pids).split())
    t0 = time.monotonic()
    ex.preempt(handle, grace_seconds=0.5)
    time.sleep(0.2)
    assert ex.poll(handle).running  # SIGTERM ignored: still alive within the grace period
    status = wait(ex, handle)
    assert 0.4 < time.monotonic() - t0 < 10
    assert (status.exit_code, status.signal) == (137, 9)
    assert status.outcome is Outcome.PREEMPTED and not status.checkpointed
    deadline = time.monotonic() + 5
    while proc_start_time(grandchild) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc_start_time(job_pid) is None
    assert proc_start_time(grandchild) is None, "grandchild outlived its job's process group"


DAEMON = (
    "import os, pathlib, signal, sys, time\n"
    "group = os.getpgid(0)\n"
    "if os.fork() == 0:\n"
    "    os.setsid()  # out of the job's process group and session\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        pathlib.Path(sys.argv[1]).write_text(f'{os.getpid()} {group}')\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "while not pathlib.Path(sys.argv[1]).exists():\n"
    "    time.sleep(0.01)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while proc_start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc_start_time(pid) is None


def _dead(pid: int, timeout: float = 5.0) -> bool:
    """Whether ``pid`` is gone or a zombie (killed, its parent now init, which in a
    container may never reap it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return True
        if raw[raw.rindex(b")") + 2 :].split()[0] in (b"Z", b"X"):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("stop", [False, True], ids=["exits", "cancelled"])
def test_a_daemon_that_left_the_jobs_process_group_ends_with_the_job(
    ex: LocalExecutor, tmp_path: Path, stop: bool
) -> None:
    """A process that double-forked into a session of its own (as a daemon does) escaped
    the kill of the job's process group and outlived the job, holding its GPUs."""
    pid_file = tmp_path / "daemon"
    job = JobLaunch("daemon", (PY, "-c", DAEMON, str(pid_file), "60" if stop else "0"))
    handle = ex.submit(job)
    daemon, group = map(int, wait_for(pid_file).split())
    with contextlib.suppress(ProcessLookupError):  # "exits": it may be ended already
        assert os.getpgid(daemon) != group  # outside the job's process group
    if stop:
        ex.cancel(handle)
    status = wait(ex, handle)
    assert status.outcome is (Outcome.FAILED if stop else Outcome.SUCCEEDED)
    assert _gone(daemon), "the daemon outlived its job"


ORPHANS = (
    "import os, pathlib, sys, time\n"
    "for _ in range(30):\n"
    "    if os.fork() == 0:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(0.05)\n"
    "        os._exit(0)  # the grandchild is orphaned, then exits\n"
    "    os.wait()\n"
    "time.sleep(0.5)\n"
    "pathlib.Path(sys.argv[1]).write_text('spawned')\n"
    "time.sleep(60)\n"
)


def test_orphans_the_job_leaves_are_reaped_while_it_runs(ex: LocalExecutor, tmp_path: Path) -> None:
    """Orphans are re-parented to the supervisor: the ones that exit must not stay its
    zombies for the rest of a long job (they hold process ids)."""
    marker = tmp_path / "spawned"
    handle = ex.submit(JobLaunch("orphans", (PY, "-c", ORPHANS, str(marker))))
    wait_for(marker)
    supervisor = json.loads((tmp_path / "state" / "runs" / "orphans" / "job.json").read_text())
    zombies = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "stat").read_bytes()
            except OSError:
                continue
            state, ppid = raw[raw.rindex(b")") + 2 :].split()[:2]
            if int(ppid) == supervisor["supervisor_pid"] and state == b"Z":
                zombies.append(entry.name)
    ex.cancel(handle)
    wait(ex, handle)
    assert zombies == []


LEADER_EXITS = (
    "import pathlib, subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '60'])  # in the job's process group\n"
    "pathlib.Path(sys.argv[1]).write_text(str(child.pid))\n"
    "while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.02)\n"
)


def test_a_lost_supervisor_leaves_nothing_of_the_job_running(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The supervisor dies (SIGKILLed by an admin, the OOM killer): what is left of the
    job's process group was killed only while its leader still ran. A leader that had
    exited (a shell wrapper) left the rest running on the GPUs of a run reported ended."""
    pid_file, go = tmp_path / "child", tmp_path / "go"
    handle = ex.submit(JobLaunch("lost", (PY, "-c", LEADER_EXITS, str(pid_file), str(go))))
    child = int(wait_for(pid_file))
    try:
        job = json.loads((tmp_path / "state" / "runs" / "lost" / "job.json").read_text())
        os.kill(job["supervisor_pid"], signal.SIGKILL)
        go.touch()  # the leader exits; its child runs on in the group
        assert _gone(job["pid"]), "the leader did not exit"
        assert proc_start_time(child) is not None and os.getpgid(child) == job["pgid"]
        status = wait(ex, handle)
        assert status.outcome is Outcome.FAILED and status.message == "supervisor lost"
        assert _gone(child), "the job's process outlived its lost run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_cancel_kills(ex: LocalExecutor) -> None:
    handle = ex.submit(launch("long", "import time; time.sleep(60)"))
    time.sleep(0.3)
    ex.cancel(handle)
    status = wait(ex, handle)
    assert status.stop_reason is StopReason.CANCEL and status.outcome is Outcome.FAILED
    assert status.exit_code == 128 + 15


def test_a_cancel_right_after_the_launch_stops_the_job_not_its_supervisor(
    ex: LocalExecutor,
) -> None:
    """A cancel that came while the supervisor was still starting up killed it (a Python
    process dies of a SIGTERM before it handles one): the run ended "supervisor lost", with
    no exit code. The supervisor now reads a stop recorded before it handled signals."""
    for attempt in range(4):
        handle = ex.submit(launch("early", "import time; time.sleep(60)", attempt=attempt))
        ex.cancel(handle)
        status = wait(ex, handle)
        assert status.stop_reason is StopReason.CANCEL and status.outcome is Outcome.FAILED
        assert status.exit_code == 128 + 15, status
        ex.forget(handle)


def test_a_cancel_shortens_the_grace_of_a_preemption_under_way(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The server cancels a run that is being preempted when its user cancels it: the job
    got its SIGKILL only at the end of the preemption's (long) grace, not the cancel's."""
    ready, termed = tmp_path / "ready", tmp_path / "termed"
    code = (  # a job that notes the SIGTERM and runs on
        "import signal, time, pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: pathlib.Path({str(termed)!r}).write_text('1'))\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(launch("preempted", code))
    wait_for(ready)
    ex.preempt(handle, grace_seconds=60)
    wait_for(termed)  # the supervisor has taken the preemption and its grace
    ex.cancel(handle)  # the executor's cancel grace: 1 s
    status = wait(ex, handle, timeout=10)
    assert (status.exit_code, status.signal) == (137, 9)
    assert (status.stop_reason, status.outcome) == (StopReason.CANCEL, Outcome.FAILED)


def test_a_stop_whose_grace_ends_while_the_job_is_being_started_kills_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor (run in this process) gets a stop while it starts the job, and the
    grace ends before the job exists: that SIGKILL found nothing, and the job got only a
    SIGTERM (one that ignored it ran on to its end)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    command = [PY, "-c", "import time; time.sleep(30)"]
    supervise.write_json(run_dir / supervise.LAUNCH, {"command": command})
    real = subprocess.Popen

    def slow_start(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        supervise.write_json(run_dir / supervise.STOP, {"reason": "cancel", "grace": 0.05})
        os.kill(os.getpid(), signal.SIGTERM)  # the stop, as the executor sends it
        time.sleep(0.3)  # a slow start (a busy node): the grace ends meanwhile
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", slow_start)
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = supervise.read_json(run_dir / supervise.EXIT)
    assert done is not None and (done["exit_code"], done["signal"]) == (137, 9)


def test_resubmit_while_running_rejected_then_restart(ex: LocalExecutor) -> None:
    handle = ex.submit(launch("again", "import time; time.sleep(60)"))
    with pytest.raises(JobAlreadyRunningError):
        ex.submit(launch("again", "pass", restart_count=1))
    ex.cancel(handle)
    wait(ex, handle)
    second = ex.submit(launch("again", "print('second')", restart_count=1))
    assert wait(ex, second).outcome is Outcome.SUCCEEDED
    with pytest.raises(UnknownHandleError):
        ex.poll(handle)  # attempt 0 was replaced by attempt 1
    ex.forget(second)
    assert ex.adopt() == []


def test_a_launch_waits_while_a_stopping_run_holds_its_gpu(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    # a run asked to stop checkpoints on its GPU for a while; the control plane already
    # counts that GPU free and places another job there
    ready = tmp_path / "ready"
    slow = (
        "import signal, sys, time\n"
        "def stop(*_): time.sleep(1.0); sys.exit(75)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(ready)!r}, 'w').write('up')\n"
        "time.sleep(60)\n"
    )
    old = ex.submit(launch("old", slow, gpus=(GpuSlot(0, 1), GpuSlot(0, 2))))
    wait_for(ready)
    quick = launch("new", "pass", gpus=(GpuSlot(0, 2),))
    sharing = launch("sharing", "pass", gpus=(GpuSlot(0, 2, 2**30),))
    with pytest.raises(GpusBusyError, match="held by job old, which still runs"):
        ex.submit(sharing)  # a share of a GPU a run holds whole (its stop request was lost)
    ex.preempt(old, 10.0)
    with pytest.raises(GpusBusyError, match="held by job old, which is stopping"):
        ex.submit(quick)
    restarted = LocalExecutor(ex.inventory(), tmp_path / "state", base_env=ENV)
    with pytest.raises(GpusBusyError, match="held by job old"):  # a run started before it
        restarted.submit(quick)
    beside = ex.submit(launch("beside", "pass", gpus=(GpuSlot(0, 3),)))
    assert wait(ex, old).outcome is Outcome.PREEMPTED
    assert wait(ex, ex.submit(quick)).outcome is Outcome.SUCCEEDED
    assert wait(ex, beside).outcome is Outcome.SUCCEEDED
    assert wait(ex, ex.submit(sharing)).outcome is Outcome.SUCCEEDED


def test_memory_shares_launch_beside_live_shares_and_whole_gpus_wait_for_them(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    slow = f"import time\nopen({str(ready)!r}, 'w').write('up')\ntime.sleep(60)\n"
    first = ex.submit(launch("first", slow, gpus=(GpuSlot(0, 1, 2**30),)))
    wait_for(ready)
    second = ex.submit(launch("second", "pass", gpus=(GpuSlot(0, 1, 2**30),)))
    whole = launch("whole", "pass", gpus=(GpuSlot(0, 1),))
    with pytest.raises(GpusBusyError, match="held by job first, which still runs"):
        ex.submit(whole)
    assert wait(ex, second).outcome is Outcome.SUCCEEDED
    ex.cancel(first)
    assert wait(ex, first).outcome is Outcome.FAILED
    assert wait(ex, ex.submit(whole)).outcome is Outcome.SUCCEEDED


def test_submit_after_a_crash_that_left_a_bare_run_directory(ex: LocalExecutor) -> None:
    # The control plane died between creating the run directory and writing the launch
    # record: nothing runs from it, and the relaunch must not trip over it.
    (ex._runs / "bare").mkdir()
    assert ex.adopt() == []
    handle = ex.submit(launch("bare", "print('ran')"))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED


def test_adoption_after_executor_is_dropped(tmp_path: Path) -> None:
    cluster = Cluster.homogeneous(1, 2)
    go = tmp_path / "go"
    code = (
        "import pathlib, time, sys\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
        "print('done'); sys.exit(4)\n"
    )
    a = LocalExecutor(cluster, tmp_path / "state", base_env=ENV)
    handle = a.submit(launch("adopt-me", code))
    del a  # a crash: nothing cleaned up
    b = LocalExecutor(cluster, tmp_path / "state", base_env=ENV)
    assert b.adopt() == [handle]
    assert b.poll(handle).running
    go.write_text("1")
    status = wait(b, handle)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, 4)
    assert b.logs(handle)[0] == b"done\n"


def test_adoption_after_control_plane_sigkill(tmp_path: Path) -> None:
    """The executor's process is killed with SIGKILL; the job and its supervisor live on."""
    go = tmp_path / "go"
    state = tmp_path / "state"
    job = f"import pathlib, time\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
    script = (
        "import sys, time\n"
        "from danlu.core.cluster import Cluster\n"
        "from danlu.executors import JobLaunch, LocalExecutor\n"
        f"ex = LocalExecutor(Cluster.homogeneous(1, 1), {str(state)!r}, base_env={ENV!r})\n"
        f"ex.submit(JobLaunch('survivor', (sys.executable, '-c', {job!r})))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    plane = subprocess.Popen(
        [PY, "-c", script], stdout=subprocess.PIPE, env={**ENV, "PYTHONPATH": SRC}
    )
    assert plane.stdout is not None
    assert plane.stdout.readline() == b"started\n"
    plane.kill()
    plane.wait()
    b = LocalExecutor(Cluster.homogeneous(1, 1), state, base_env=ENV)
    (handle,) = b.adopt()
    assert b.poll(handle).running
    go.write_text("1")
    assert wait(b, handle).outcome is Outcome.SUCCEEDED


def test_discard_deletes_a_finished_jobs_records_and_log(ex: LocalExecutor, tmp_path: Path) -> None:
    """The retention's hook: the run records and the log go; a running job is refused, and
    a job never seen is nothing to do."""
    done = ex.submit(launch("done", "print('bye')"))
    assert wait(ex, done).outcome is Outcome.SUCCEEDED
    assert ex.logs(done)[0] == b"bye\n"
    running = ex.submit(launch("busy", "import time; time.sleep(60)"))
    log_files = sorted(p.name for p in (tmp_path / "state" / "logs").iterdir())
    assert log_files == ["busy.log", "done.log"]
    ex.discard("done")
    assert [h.job_id for h in ex.adopt()] == ["busy"]
    assert sorted(p.name for p in (tmp_path / "state" / "logs").iterdir()) == ["busy.log"]
    with pytest.raises(UnknownHandleError):
        ex.logs(done)
    with pytest.raises(ExecutorError, match="still runs"):
        ex.discard("busy")
    assert ex.poll(running).running
    ex.discard("never-seen")
    with pytest.raises(InvalidLaunchError):
        ex.discard("../escape")
    ex.cancel(running)
    wait(ex, running)
    ex.discard("busy")
    assert ex.adopt() == []


def test_a_lost_supervisor_leaves_no_daemon_of_the_job_running(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A daemon (a session of its own) is out of the job's process group: only the
    supervisor, its subreaper, ended it. With the supervisor killed, the run was reported
    lost while the daemon ran on; the run's mark in its environment finds it."""
    pid_file = tmp_path / "daemon"
    handle = ex.submit(JobLaunch("lostd", (PY, "-c", DAEMON, str(pid_file), "60")))
    daemon, group = map(int, wait_for(pid_file).split())
    try:
        assert os.getpgid(daemon) != group
        job = json.loads((tmp_path / "state" / "runs" / "lostd" / "job.json").read_text())
        os.kill(job["supervisor_pid"], signal.SIGKILL)
        status = wait(ex, handle)
        assert status.outcome is Outcome.FAILED and status.message == "supervisor lost"
        assert _dead(daemon), "the daemon outlived its lost run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)
