"""``danlu server --executor slurm`` (a real process) on the test Slurm cluster: the nodes come
from Slurm, a job spanning both nodes is preempted by a higher-priority one, checkpoints on
each node and resumes from it; the CLI refuses a fake inventory with Slurm."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster, available, slurm_cluster

from danlu.client import Client

SRC = str(Path(__file__).resolve().parents[2] / "src")
CLI = [sys.executable, "-c", "from danlu.cli.main import app; app()"]

pytestmark = pytest.mark.slow

# Runs on every node of its job: counts steps, checkpoints its node's step on SIGTERM and
# exits 75, resumes from it; each line of its output names the node's rank.
CHECKPOINTING = """
import os, pathlib, signal, sys, time
rank = os.environ["PET_NODE_RANK"]
ckpt = pathlib.Path(os.environ["DANLU_CHECKPOINT_DIR"]) / f"step-{rank}"
step = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"rank {rank} resume {step} gpus {os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
stopping = False
def on_term(signum, frame):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, on_term)
while step < 40:
    if stopping:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_text(str(step))
        print(f"rank {rank} checkpoint {step}", flush=True)
        sys.exit(75)
    time.sleep(0.05)
    step += 1
print(f"rank {rank} done {step}", flush=True)
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if not available():
        pytest.skip("Slurm is not installed (apt-get install -y slurm-wlm munge)")
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def _env(slurm: SlurmCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DANLU_", "SLURM_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["SLURM_CONF"] = slurm.env["SLURM_CONF"]
    return env


@contextlib.contextmanager
def control_plane(slurm: SlurmCluster, root: Path) -> Iterator[Client]:
    home = root / "home"
    log = root / "server.log"
    argv = [
        *CLI,
        "server",
        "--home",
        str(home),
        "--port",
        "0",
        "--interval",
        "0.3",
        "--executor",
        "slurm",
        "--slurm-partition",
        "gpu",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=_env(slurm), start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not ((home / "server.json").exists() and (home / "admin.token").exists()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with Client.from_home(home, timeout=10) as client:
            yield client
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_state(client: Client, job_id: str, state: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_job(job_id)
        if job["state"] == state:
            return job
        assert time.monotonic() < deadline, f"{job_id} is {job['state']}, not {state}: {job}"
        time.sleep(0.2)


def test_a_two_node_job_is_preempted_checkpoints_and_resumes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    with control_plane(slurm, tmp_path) as client:
        nodes = client.nodes()
        assert [n["name"] for n in nodes] == ["n1", "n2"]
        assert [len(n["gpus"]) for n in nodes] == [4, 4]
        low = client.submit(
            {
                "name": "wide",
                "priority": 0,
                "command": [sys.executable, "-c", CHECKPOINTING],
                "resources": {"gpus": 8},
            }
        )
        _wait_state(client, low["id"], "RUNNING")
        deadline = time.monotonic() + 30
        while client.logs(low["id"])[0].count("resume 0") < 2:
            assert time.monotonic() < deadline, client.logs(low["id"])
            time.sleep(0.1)
        high = client.submit(
            {
                "name": "urgent",
                "priority": 10,
                "command": [sys.executable, "-c", "print('urgent ran')"],
                "resources": {"gpus": 2},
            }
        )
        assert _wait_state(client, high["id"], "SUCCEEDED")["restarts"] == 0
        done = _wait_state(client, low["id"], "SUCCEEDED", timeout=90)
        log = client.logs(low["id"])[0]
        events = [e["new"] for e in client.events(low["id"])]
    assert done["preemptions"] == 1 and done["restarts"] == 0
    assert events == ["PENDING", "RUNNING", "PREEMPTING", "PENDING", "RUNNING", "SUCCEEDED"]
    for rank in ("0", "1"):
        lines = [line for line in log.splitlines() if line.startswith(f"rank {rank} ")]
        saved = next(int(x.split()[3]) for x in lines if " checkpoint " in x)
        resumed = [int(x.split()[3]) for x in lines if " resume " in x]
        assert saved > 0 and resumed == [0, saved], lines
        assert f"rank {rank} done 40" in lines
    assert {line.split("gpus ")[1] for line in log.splitlines() if "gpus " in line} == {"0,1,2,3"}


def test_fake_gpus_are_refused_with_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    argv = [*CLI, "server", "--home", str(tmp_path / "h"), "--executor", "slurm"]
    done = subprocess.run(
        [*argv, "--fake-gpus", "2x80GiB", "--port", "0"],
        env=_env(slurm),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--fake-gpus" in done.stderr
    wrong = subprocess.run(
        [*argv[:-1], "nomad", "--port", "0"],
        env=_env(slurm),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert wrong.returncode == 2 and "DANLU_EXECUTOR" in wrong.stderr
