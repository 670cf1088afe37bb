"""The cap on a job's log (``DANLU_LOG_MAX_MB``) for the Slurm and Ray executors, without
Slurm or Ray: a job printing in a loop filled the shared disk with its log, which only the
local executor's supervisor capped.

A Slurm run's log is one file, appended to by ``srun`` on the run's first node: the task of
node 0 caps it while the command runs (:func:`danlu.executors.slurm_task.log_cap`), here run
as a plain process whose output is the log, as ``srun``'s is. A Ray run's log is appended by
the control plane's poll, which caps it after each append
(:func:`danlu.executors.ray_output.cap_log`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait
from slurm_fakes import NODE, Printed

from danlu.config import check_executor_settings, load_settings
from danlu.executors import GpuSlot, Outcome, ray_actor, ray_executor, slurm_task
from danlu.executors.logcap import LOG_CAP_MIN_BYTES
from danlu.executors.ray_output import cap_log
from danlu.executors.slurm import SlurmExecutor
from danlu.server.app import build_cluster_executor

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
NOTE = f"[danlu: the log passed its cap of {LOG_CAP_MIN_BYTES} bytes (DANLU_LOG_MAX_MB);"
LINE = 100
"""The bytes of each line the commands print."""

FLOOD_THEN_WAIT = (  # 100 numbered lines (10 KB, past the cap), then, once the log was
    # capped (its .1 file there; 20 s at most), one line more; exit 0
    "import os, sys, time\n"
    "for i in range(100):\n"
    "    print(f'{i:06d} ' + 'x' * 92, flush=True)\n"
    "deadline = time.monotonic() + 20\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
    "    time.sleep(0.02)\n"
    "print('the last line', flush=True)\n"
)
FLOOD_THEN_SLEEP = (  # the same 100 lines, then three of the task's checks of the log
    "import sys, time\n"
    "for i in range(100):\n"
    "    print(f'{i:06d} ' + 'x' * 92, flush=True)\n"
    "time.sleep(1.5)\n"
)


def _run_task(run_dir: Path, log: Path, task: dict[str, Any], node_id: str = "0") -> int:
    """Run the Slurm task on ``run_dir`` with its output (and its command's) appended to
    ``log``, as ``srun`` appends the task's output to the job's log; its exit status."""
    (run_dir / slurm_task.TASK).write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1", "SLURM_NODEID": node_id}
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [PY, "-I", slurm_task.__file__, str(run_dir)],
            env=env,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(fd)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _flood_task(log: Path, code: str, cap: int | None) -> dict[str, Any]:
    kept = log.with_name(f"{log.name}.1")
    task: dict[str, Any] = {
        "command": [PY, "-c", code, str(kept)],
        "env": {"PATH": os.environ["PATH"]},
        "log_path": str(log),
    }
    if cap is not None:
        task["log_max_bytes"] = cap
    return task


def _numbered(data: bytes) -> list[int]:
    """The numbers of the flood's lines in ``data``, each line whole."""
    lines = data.decode().splitlines()
    assert all(len(line) == LINE - 1 for line in lines), lines
    return [int(line[:6]) for line in lines]


def test_the_slurm_task_of_node_0_caps_the_job_s_log(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # a cap under the floor is the floor (1 KiB)
    assert _run_task(run_dir, log, _flood_task(log, FLOOD_THEN_WAIT, 1)) == 0
    data = log.read_bytes()
    assert data.startswith(NOTE.encode()), data[:200]
    assert data.endswith(b"the last line\n")
    assert len(data) <= LOG_CAP_MIN_BYTES + LINE
    # the newest part (half the cap, from a line's start) is in the .1 file
    kept = _numbered((tmp_path / "j.log.1").read_bytes())
    assert kept[-1] == 99 and kept == list(range(kept[0], 100))
    assert 0 < len(kept) * LINE <= LOG_CAP_MIN_BYTES // 2
    assert json.loads(slurm_task.exit_path(run_dir, "n1").read_text())["exit_code"] == 0


@pytest.mark.parametrize(
    ("cap", "node_id"),
    [(None, "0"), (1, "1")],
    ids=["no log_max_bytes", "another node's task"],
)
def test_the_slurm_task_leaves_the_log_alone_without_a_cap_or_on_another_node(
    tmp_path: Path, cap: int | None, node_id: str
) -> None:
    log = tmp_path / "j.log"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert _run_task(run_dir, log, _flood_task(log, FLOOD_THEN_SLEEP, cap), node_id) == 0
    assert _numbered(log.read_bytes()) == list(range(100))
    assert not (tmp_path / "j.log.1").exists()


def test_the_slurm_task_never_caps_a_link_at_the_log_s_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 4 * LOG_CAP_MIN_BYTES)
    (tmp_path / "j.log").symlink_to(victim)
    task = {"command": ["true"], "log_path": str(tmp_path / "j.log"), "log_max_bytes": 1}
    assert slurm_task.log_cap(task, {"SLURM_NODEID": "0"}) is None
    assert victim.read_bytes() == b"v" * 4 * LOG_CAP_MIN_BYTES


@pytest.mark.parametrize("cap", [4096, 0])
def test_the_slurm_executor_hands_the_cap_to_its_tasks(tmp_path: Path, cap: int) -> None:
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    logs = tmp_path / "logs"
    ex = SlurmExecutor(commands, tmp_path / "state", log_dir=logs, log_max_bytes=cap)
    ex.submit(launch("j", "print(1)", gpus=(GpuSlot(0, 0),)))
    task = json.loads((tmp_path / "state" / "runs" / "j" / slurm_task.TASK).read_text())
    assert task.get("log_max_bytes") == (cap or None)
    assert Path(task["log_path"]).resolve() == (logs / "j.log").resolve()


def test_the_setting_is_taken_by_the_cluster_executors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_LOG_MAX_MB", "3")
    for executor in ("slurm", "ray"):
        check_executor_settings(load_settings(home=tmp_path, executor=executor))
    monkeypatch.setattr("danlu.server.app.SlurmCommands", lambda env: None)
    built = build_cluster_executor(load_settings(home=tmp_path, executor="slurm"), None)
    assert isinstance(built, SlurmExecutor) and built._log_max_bytes == 3 * 1024**2


# -- Ray ---------------------------------------------------------------------------------


def _flooded_log(path: Path, lines: int = 100) -> bytes:
    data = b"".join(f"{i:06d} ".encode() + b"x" * 92 + b"\n" for i in range(lines))
    path.write_bytes(data)
    return data


def test_cap_log_caps_a_ray_run_s_log_past_the_record_s_cap(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    _flooded_log(log)
    assert cap_log(log, {"log_max_bytes": 1})  # the floor: 1 KiB
    assert log.read_bytes().decode().startswith(NOTE)
    assert log.read_bytes().count(b"\n") == 1
    kept = _numbered((tmp_path / "j.log.1").read_bytes())
    assert kept[-1] == 99 and 0 < len(kept) * LINE <= LOG_CAP_MIN_BYTES // 2


@pytest.mark.parametrize("launch_record", [{}, {"log_max_bytes": 0}, {"log_max_bytes": 64 * 1024}])
def test_cap_log_leaves_a_log_under_its_cap_or_without_one(
    tmp_path: Path, launch_record: dict[str, Any]
) -> None:
    log = tmp_path / "j.log"
    data = _flooded_log(log)
    assert not cap_log(log, launch_record)
    assert log.read_bytes() == data and not (tmp_path / "j.log.1").exists()


def test_cap_log_never_truncates_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    data = _flooded_log(victim)
    (tmp_path / "j.log").symlink_to(victim)
    assert not cap_log(tmp_path / "j.log", {"log_max_bytes": 1})
    assert victim.read_bytes() == data


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    monkeypatch.setattr(ray_actor, "CHUNK", 512)  # the output in many polls' appends
    yield ray
    ray.close_all()


def test_a_ray_run_s_log_is_capped_as_its_output_is_appended(fake: FakeRay, tmp_path: Path) -> None:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    ex = ray_executor.RayExecutor(tmp_path / "state", address=None, base_env=base, log_max_bytes=1)
    code = "for i in range(100):\n    print(f'{i:06d} ' + 'x' * 92, flush=True)\n"
    handle = ex.submit(launch("flood", code, gpus=(GpuSlot(0, 0),)))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    log = next(tmp_path.rglob("flood.log"))
    data = log.read_bytes()
    # capped after each append past the cap: what is left is under it, after the line
    assert len(data) <= LOG_CAP_MIN_BYTES and data.startswith(NOTE.encode())
    after = _numbered(data.split(b"\n", 1)[1])
    kept = _numbered(log.with_name("flood.log.1").read_bytes())
    # the newest part of the last cap, then what came since: every line to the last
    assert kept + after == list(range(kept[0], 100))
