"""The admin's health program (``DANLU_HEALTH_PROGRAM``, as Slurm's ``HealthCheckProgram``):
a real executable run with no shell; while it fails this host's nodes are cordoned with its
first line as the reason, once it passes they are opened again, and a node an admin closed
stays closed. A program over its time is killed with what it started."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

import pytest
from helpers import user_and_nodes, wait_for

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.devices.errors import DeviceUnavailableError
from danlu.devices.health import GpuFault
from danlu.server.app import _health_program, create_app
from danlu.server.db import Database
from danlu.server.health import HealthLoop, HealthProgram, ProgramResult
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _states(db: Database) -> dict[str, tuple[str, str]]:
    with db.read_session() as s:
        return {n.name: (nodes.state(n), n.cordon_reason) for n in cluster.list_nodes(s)}


def test_a_failing_program_closes_the_hosts_nodes_until_it_passes(
    db: Database, tmp_path: Path
) -> None:
    flag = tmp_path / "broken"
    program = _script(
        tmp_path / "check-node",
        f'if [ -e "{flag}" ]; then echo; echo "$(cat "{flag}")"; exit 3; fi\necho fine\n',
    )
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))), NOW)
        nodes.cordon(s, "b", "bad fan", now=NOW)
    loop = HealthLoop(db, None, program=HealthProgram(str(program)), hosts=["a", "b"])
    assert loop.run_once(now=NOW + 1) == []  # passes: nothing to open
    flag.write_text("/scratch is full")
    reason = "health program: /scratch is full (exit status 3)"
    assert loop.run_once(now=NOW + 2) == [f"a: closed: {reason}"]
    assert _states(db) == {"a": ("cordoned", reason), "b": ("cordoned", "bad fan")}
    flag.write_text("ECC errors")  # still failing: the reason follows, nothing is closed anew
    assert loop.run_once(now=NOW + 3) == []
    assert _states(db)["a"] == ("cordoned", "health program: ECC errors (exit status 3)")
    flag.unlink()
    assert loop.run_once(now=NOW + 4) == ["a: reopened"]
    assert _states(db) == {"a": ("ready", ""), "b": ("cordoned", "bad fan")}
    # an admin's drain of a node the program closed is the admin's to undo
    flag.write_text("fan")
    loop.run_once(now=NOW + 5)
    with db.session() as s:
        nodes.cordon(s, "a", "", drain=True, now=NOW + 6)
    flag.unlink()
    assert loop.run_once(now=NOW + 7) == []
    assert _states(db)["a"][0] == "draining"


def test_a_program_over_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    program = _script(tmp_path / "slow", f'sleep 60 &\necho $! > "{pid_file}"\nwait\n')
    result = HealthProgram(str(program), timeout=1.0).run()
    assert result is not None and not result.passed
    assert result.reason == f"{program} ran over 1 s"
    child = int(pid_file.read_text())

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_for(gone, 10)
    finally:
        if not gone():
            os.kill(child, signal.SIGKILL)


def test_a_program_whose_escaped_child_holds_its_output_is_still_given_up_on(
    tmp_path: Path,
) -> None:
    """A process the program started in a session of its own outlives the kill and keeps
    the output pipes open: the run ends anyway, a few seconds later."""
    pid_file = tmp_path / "pid"
    program = _script(
        tmp_path / "escapes", f'setsid sleep 600 &\necho $! > "{pid_file}"\nsleep 600\n'
    )
    try:
        result = HealthProgram(str(program), timeout=1.0).run()
        assert result is not None and result.reason == f"{program} ran over 1 s"
        os.kill(int(pid_file.read_text()), 0)  # given up on while it still holds the pipes
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _kill_from(pid_file: Path) -> None:
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    ("status", "expected"), [(0, (True, "")), (2, (False, "disk check failed (exit status 2)"))]
)
def test_a_program_that_leaves_a_process_behind_is_judged_by_its_own_exit(
    tmp_path: Path, status: int, expected: tuple[bool, str]
) -> None:
    """A program that (re)starts a daemon, which keeps its output open, and exits: judged by
    its exit status (it used to be waited for until its time ran out, a failure)."""
    pid_file = tmp_path / "pid"
    program = _script(
        tmp_path / "restarts",
        f'sleep 600 &\necho $! > "{pid_file}"\necho "disk check failed"\nexit {status}\n',
    )
    try:
        result = HealthProgram(str(program), timeout=30.0).run()
        assert result is not None and (result.passed, result.reason) == expected
        os.kill(int(pid_file.read_text()), 0)  # the daemon is left running
    finally:
        _kill_from(pid_file)


def test_a_program_that_prints_more_than_a_pipe_holds_is_read_to_its_end(
    tmp_path: Path,
) -> None:
    program = _script(
        tmp_path / "chatty",
        'echo "first words"\nhead -c 1000000 /dev/zero | tr "\\0" x\necho\nexit 1\n',
    )
    result = HealthProgram(str(program), timeout=30.0).run()
    assert result == ProgramResult(False, "first words (exit status 1)")


class _BrokenNvml:
    """A GPU check that cannot reach NVML (the driver is gone)."""

    def check(self) -> list[GpuFault]:
        raise DeviceUnavailableError("NVML cannot start (Driver Not Loaded)")

    def close(self) -> None:
        pass


def test_the_program_runs_when_the_gpu_check_fails(db: Database, tmp_path: Path) -> None:
    """The two halves of a pass are independent: NVML failing (when the host is sickest)
    does not skip the admin's program, and the pass still reports the GPU check's error."""
    program = _script(tmp_path / "check", "echo 'nvidia-smi failed: driver not loaded'\nexit 1\n")
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
    loop = HealthLoop(db, _BrokenNvml(), program=HealthProgram(str(program)), hosts=["a"])
    with pytest.raises(DeviceUnavailableError, match="Driver Not Loaded"):
        loop.run_once(now=NOW + 1)
    reason = "health program: nvidia-smi failed: driver not loaded (exit status 1)"
    assert _states(db) == {"a": ("cordoned", reason)}


def test_a_program_that_cannot_run_changes_nothing(db: Database, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a program")
    program = HealthProgram(str(text))
    assert program.check() == f"{text} is not executable (chmod +x it)"
    assert HealthProgram(str(tmp_path / "none")).check() == f"{tmp_path / 'none'} is not a file"
    assert program.run() is None
    with db.session() as s:
        user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), NOW)
    assert HealthLoop(db, None, program=program, hosts=["a"]).run_once(now=NOW) == []
    assert _states(db) == {"a": ("ready", "")}


def test_the_server_runs_the_program_for_its_own_nodes(tmp_path: Path) -> None:
    program = _script(tmp_path / "check", 'echo "GPU 0 too hot" >&2\nexit 1\n')
    home = tmp_path / "home"
    settings = load_settings(home=home, fake_gpus="2x80GiB", health_program=str(program))
    app = create_app(settings, start_loops=False)
    loop = app.state.health
    assert isinstance(loop, HealthLoop) and loop.check is None  # fake GPUs: no NVML check
    name = loop.hosts[0]
    assert loop.run_once() == [f"{name}: closed: health program: GPU 0 too hot (exit status 1)"]
    # refused at start: a file that is not executable, a relative path, another executor
    program.chmod(0o644)
    with pytest.raises(ConfigError, match=r"DANLU_HEALTH_PROGRAM: .* is not executable"):
        create_app(settings, start_loops=False)
    with pytest.raises(ConfigError, match=r"DANLU_HEALTH_PROGRAM: 'check' is not an absolute"):
        load_settings(home=home, health_program="check")
    ray = load_settings(home=home, executor="ray", health_program=str(program))
    with pytest.raises(ConfigError, match="with ray, check the nodes with the cluster's own"):
        _health_program(ray)
    none = load_settings(home=home, fake_gpus="2x80GiB", health_interval=0)
    assert create_app(none, start_loops=False).state.health is None
