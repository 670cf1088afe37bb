"""The Ray executor's node process without Ray: output handed out in whole lines, SIGTERM then
SIGKILL, and the guard that ends a job whose actor died."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from run_helpers import SHELL_CHECKPOINT, until_exit

from danlu.executors import InvalidLaunchError, ray_actor
from danlu.executors.ray_actor import GUARD, NodeRun

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def test_output_comes_in_whole_lines(tmp_path: Path) -> None:
    code = (
        "import sys, time; print('one', flush=True); sys.stdout.write('tw'); sys.stdout.flush(); "
        "time.sleep(1); print('o'); sys.stdout.write('end')"
    )
    run = NodeRun([PY, "-c", code], ENV, log_dir=str(tmp_path))
    deadline = time.monotonic() + 10
    first: dict[str, Any] = {"output": b""}
    while b"one" not in first["output"]:
        assert time.monotonic() < deadline
        first = run.status(0)
        time.sleep(0.05)
    assert first["output"] == b"one\n" and first["offset"] == 4  # not the half line after
    assert run.status(0)["output"].startswith(b"one\n")  # asked again: handed out again
    done = until_exit(run)
    assert done["output"] == b"one\ntwo\nend" and done["exit_code"] == 0


def test_an_exited_commands_output_is_cut_at_line_ends_while_more_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the command has exited its output was handed out in pieces of :data:`CHUNK`
    cut anywhere: the control plane, which ends a piece without a newline with one (so
    that another node's output does not join it), would cut a line in two."""
    monkeypatch.setattr(ray_actor, "CHUNK", 8)
    code = "import sys; print('one two'); print('three'); sys.stdout.write('a long end')"
    run = NodeRun([PY, "-c", code], ENV, log_dir=str(tmp_path))
    until_exit(run)
    pieces, offset, more = [], 0, True
    while more:
        status = run.status(offset)
        pieces.append(status["output"])
        offset, more = status["offset"], status["more"]
    # a line longer than a piece, or the output's unterminated end, is handed out as it is
    assert pieces == [b"one two\n", b"three\n", b"a long e", b"nd"]


def test_stop_terms_then_kills(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    run = NodeRun([PY, "-c", code], ENV, log_dir=str(tmp_path))
    while b"ready" not in (tmp_path / "output.log").read_bytes():
        time.sleep(0.05)
    t0 = time.monotonic()
    run.stop("preempt", 0.5)
    done = until_exit(run)
    assert done["exit_code"] == 137 and done["stop"] == "preempt"
    assert time.monotonic() - t0 >= 0.4
    polite = NodeRun([PY, "-c", "import time; time.sleep(60)"], ENV, log_dir=str(tmp_path / "b"))
    polite.stop("cancel", 10)
    assert until_exit(polite)["exit_code"] == 128 + 15


def test_a_later_stop_that_ends_sooner_brings_the_kill_forward(tmp_path: Path) -> None:
    """The server cancels a run that is being preempted when its user cancels it: the
    command got its SIGKILL only at the end of the preemption's (long) grace, and the stop
    reported was the preemption's. A later stop never puts the SIGKILL back."""
    termed = tmp_path / "termed"
    code = (  # a command that notes the SIGTERM and runs on
        "import pathlib, signal, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: pathlib.Path({str(termed)!r}).write_text('1'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    for first, then in ((("preempt", 60.0), ("cancel", 0.2)), (("cancel", 0.2), ("preempt", 60.0))):
        termed.unlink(missing_ok=True)
        logs = tmp_path / first[0]
        run = NodeRun([PY, "-c", code], ENV, log_dir=str(logs))
        while b"ready" not in (logs / "output.log").read_bytes():
            time.sleep(0.05)
        run.stop(*first)
        deadline = time.monotonic() + 10
        while not termed.exists():  # the first stop's SIGTERM has come
            assert time.monotonic() < deadline
            time.sleep(0.02)
        run.stop(*then)
        done = until_exit(run, timeout=10)
        assert (done["exit_code"], done["stop"]) == (137, then[0])


def test_a_shell_wrappers_program_gets_the_grace_to_checkpoint(tmp_path: Path) -> None:
    """``shell: true``: the SIGTERM kills ``/bin/sh`` at once, and the guard with it; the
    program the shell started was SIGKILLed with the group then, in the middle of its
    checkpoint, long before the grace ended."""
    script, pid_file, saved = tmp_path / "train.py", tmp_path / "pid", tmp_path / "saved"
    script.write_text(SHELL_CHECKPOINT)
    line = f"cd {shlex.quote(str(tmp_path))} && {PY} train.py {pid_file} {saved} 1.0; echo after"
    run = NodeRun(["/bin/sh", "-c", line], ENV, log_dir=str(tmp_path / "log"))
    deadline = time.monotonic() + 15
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.05)
    program = int(pid_file.read_text())
    run.stop("preempt", 60.0)
    done = until_exit(run, timeout=60)
    assert saved.exists(), "the program was killed in the middle of its checkpoint"
    assert done["stop"] == "preempt" and done["exit_code"] == 128 + 15  # the shell's
    deadline = time.monotonic() + 5
    while Path(f"/proc/{program}").exists() and _state(program) != "Z":
        assert time.monotonic() < deadline, "the program outlived its run"
        time.sleep(0.05)


def test_what_the_command_left_in_its_process_group_is_killed_when_it_exits(
    tmp_path: Path,
) -> None:
    """``sleep 30 &``: the command exited and left the sleep running in its process group
    (holding its GPUs), which the stop made once the command had exited did not reach."""
    pid_file = tmp_path / "left.pid"
    script = f"sleep 30 & echo $! > {shlex.quote(str(pid_file))}"
    run = NodeRun(["/bin/sh", "-c", script], ENV, log_dir=str(tmp_path / "log"))
    assert until_exit(run)["exit_code"] == 0
    run.stop("ended", 0.0)
    left = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{left}").exists() and _state(left) != "Z":
        assert time.monotonic() < deadline, "a process of the command outlived it"
        time.sleep(0.05)


def test_the_guard_ends_the_job_when_its_parent_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "job.pid"
    job = (
        f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))"
        "; time.sleep(60)"
    )
    # a parent that starts the guard in a session of its own, then dies at once
    parent = (
        "import os, subprocess, sys; "
        f"subprocess.Popen([sys.executable, '-I', {str(GUARD)!r}, str(os.getpid()), "
        f"sys.executable, '-c', {job!r}], start_new_session=True); "
        "import time; time.sleep(1)"
    )
    subprocess.run([PY, "-c", parent], check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not pid_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
        assert time.monotonic() < deadline, "the job outlived its guard's parent"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_close_removes_the_folder_it_made_and_ends_the_group(tmp_path: Path) -> None:
    """Every run on a Ray node kept ``/tmp/danlu-run-*/output.log`` for good: the actor was
    killed with its temporary folder in place. ``close`` removes that folder, and never a
    ``log_dir`` the caller named."""
    pid_file = tmp_path / "child.pid"
    code = (  # a command that leaves a child behind in its group and exits
        f"import subprocess, pathlib; p = subprocess.Popen(['sleep', '60']); "
        f"pathlib.Path({str(pid_file)!r}).write_text(str(p.pid)); print('done')"
    )
    temp = NodeRun([PY, "-c", code], ENV)
    folder = temp._log_path.parent
    assert folder.name.startswith("danlu-run-") and folder.is_dir()
    assert until_exit(temp)["output"] == b"done\n"
    temp.close()
    assert not folder.exists()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and _state(child) != "Z":
        assert time.monotonic() < deadline, "the command's child outlived close"
        time.sleep(0.05)
    running = NodeRun([PY, "-c", "import time; time.sleep(60)"], ENV)
    running_folder = running._log_path.parent
    running.close()
    assert until_exit(running)["exit_code"] == 128 + 9
    assert not running_folder.exists()
    named = tmp_path / "named"
    kept = NodeRun([PY, "-c", "print('x')"], ENV, log_dir=str(named))
    until_exit(kept)
    kept.close()
    assert (named / "output.log").read_bytes() == b"x\n"


def _sleeper(tmp_path: Path) -> NodeRun:
    """A run whose command ignores SIGTERM (it only ends of a SIGKILL), once it is ready."""
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    run = NodeRun([PY, "-c", code], ENV, log_dir=str(tmp_path / "log"))
    deadline = time.monotonic() + 15
    while b"ready" not in (tmp_path / "log" / "output.log").read_bytes():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    return run


def test_an_endless_grace_keeps_the_sigkill_timer_alive(tmp_path: Path) -> None:
    """``stop(reason, inf)``: the SIGKILL timer waited ``inf`` seconds, which raised
    ``OverflowError`` in its thread: the thread died with a traceback. The grace is the
    longest the supervisor gives (``MAX_GRACE_SECONDS``), and a later, shorter stop still
    brings the SIGKILL forward."""
    run = _sleeper(tmp_path)
    try:
        run.stop("preempt", float("inf"))
        killer = run._killer
        assert killer is not None
        killer.join(timeout=0.5)
        assert killer.is_alive(), "the SIGKILL timer's thread died"
        run.stop("cancel", 0.1)
        assert until_exit(run)["exit_code"] == 137
    finally:
        run.close()


@pytest.mark.parametrize("grace", [float("nan"), "10"])
def test_a_grace_that_is_not_seconds_is_refused_before_any_signal(
    tmp_path: Path, grace: Any
) -> None:
    """``nan`` reached the SIGKILL timer (``ValueError`` in its thread, after the SIGTERM);
    a string raised ``TypeError`` from the arithmetic. Refused, naming ``grace``, with the
    :class:`InvalidLaunchError` every executor's stop raises for it (``check_grace``; the
    actor raised a bare :class:`ExecutorError`)."""
    run = _sleeper(tmp_path)
    try:
        with pytest.raises(InvalidLaunchError, match=r"grace: .* give a number of seconds") as err:
            run.stop("preempt", grace)
        assert err.value.field == "grace"
        status = run.status()
        assert status["exit_code"] is None and status["stop"] is None
    finally:
        run.close()


@pytest.mark.parametrize("parent", ["²", "x1"])
def test_the_guard_refuses_a_parent_pid_that_is_not_ascii_digits(parent: str) -> None:
    """``str.isdigit`` took ``²``, which ``int`` then refused: a traceback, not the usage."""
    done = subprocess.run(
        [PY, "-I", str(GUARD), parent, "true"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "usage: orphan_guard.py PARENT_PID" in done.stderr
