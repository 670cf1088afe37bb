"""``danlu server`` as a real process against a test cluster (Slurm or Ray), and a job that
checkpoints on each of its nodes when preempted and resumes from it: the control-plane tests of
the cluster executors."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from danlu.client import Client

SRC = str(Path(__file__).resolve().parents[2] / "src")
CLI = [sys.executable, "-c", "from danlu.cli.main import app; app()"]

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


def server_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: this one without danlu's, Slurm's or Ray's variables, danlu's
    sources first on the path, and ``extra``."""
    prefixes = ("DANLU_", "SLURM_", "RAY_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


@contextlib.contextmanager
def control_plane(
    root: Path, args: Sequence[str], env: Mapping[str, str], *, crash: bool = False
) -> Iterator[Client]:
    """``danlu server --home root/home --port 0 ARGS`` until the block ends: SIGINT, or
    SIGKILL when ``crash`` (a control plane that dies with its jobs running)."""
    home = root / "home"
    log = root / "server.log"
    argv = [*CLI, "server", "--home", str(home), "--port", "0", "--interval", "0.3", *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            if (home / "server.json").exists() and (home / "admin.token").exists():
                with contextlib.suppress(Exception), Client.from_home(home, timeout=2) as probe:
                    if probe.health()["status"] == "ok":
                        break
            time.sleep(0.1)
        with Client.from_home(home, timeout=10) as client:
            yield client
    finally:
        proc.send_signal(signal.SIGKILL if crash else signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_state(client: Client, job_id: str, state: str, timeout: float = 60) -> dict[str, Any]:
    """The job once it is in ``state``."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_job(job_id)
        if job["state"] == state:
            return dict(job)
        assert time.monotonic() < deadline, f"{job_id} is {job['state']}, not {state}: {job}"
        time.sleep(0.2)


def preempt_and_resume(client: Client) -> None:
    """An 8-GPU job over both nodes is preempted by a higher-priority one, checkpoints on each
    node and resumes from its checkpoint there; the nodes are ``n1`` and ``n2``."""
    nodes = client.nodes()
    assert sorted(n["name"] for n in nodes) == ["n1", "n2"]
    assert [len(n["gpus"]) for n in nodes] == [4, 4]
    low = client.submit(
        {
            "name": "wide",
            "priority": 0,
            "command": [sys.executable, "-c", CHECKPOINTING],
            "resources": {"gpus": 8},
        }
    )
    wait_state(client, low["id"], "RUNNING")
    deadline = time.monotonic() + 60
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
    assert wait_state(client, high["id"], "SUCCEEDED")["restarts"] == 0
    done = wait_state(client, low["id"], "SUCCEEDED", timeout=90)
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


# Runs for DURATION seconds of work in all, checkpointing its progress on SIGTERM (exit 75);
# records each run's GPUs and times on each node.
RECORDING = """
import json, os, pathlib, signal, sys, time
record, duration, name = pathlib.Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rank = os.environ["PET_NODE_RANK"]
ckpt = pathlib.Path(os.environ["DANLU_CHECKPOINT_DIR"]) / f"done-{rank}"
done = float(ckpt.read_text()) if ckpt.exists() else 0.0
stopping = False
def on_term(signum, frame):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, on_term)
t0 = time.time()
while done + time.time() - t0 < duration and not stopping:
    time.sleep(0.05)
t1 = time.time()
entry = {"job": name, "node": os.environ.get("SLURMD_NODENAME", rank), "t0": t0, "t1": t1,
         "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
         "shared": "DANLU_GPU_MEMORY_LIMIT" in os.environ}
(record / f"{name}-{rank}-{os.getpid()}.json").write_text(json.dumps(entry))
if stopping:
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_text(str(done + t1 - t0))
    sys.exit(75)
"""


def mixed_workload(client: Client, record: Path, seed: int, count: int) -> list[dict[str, Any]]:
    """Submit ``count`` seeded jobs (1-8 whole GPUs or a memory share, priorities 0-5, 1-3 s of
    work, one in ten cancelled) and wait until every one has ended; their records go to
    ``record``. Returns the jobs."""
    rng = random.Random(seed)
    ids: list[str] = []
    for i in range(count):
        work = f"{rng.uniform(1, 3):.2f}"
        resources: dict[str, Any] = {"gpus": rng.choice([1, 1, 2, 3, 4, 6, 8])}
        if rng.random() < 0.3:
            resources = {"gpus": 1, "gpu_memory": "30GiB"}
        body = {
            "name": f"j{i}",
            "priority": rng.randint(0, 5),
            "command": [sys.executable, "-c", RECORDING, str(record), work, f"j{i}"],
            "resources": resources,
        }
        ids.append(client.submit(body)["id"])
        time.sleep(rng.uniform(0, 0.4))
        if rng.random() < 0.1:
            victim = client.get_job(ids[-1])
            if victim["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                client.cancel(victim["id"])
    deadline = time.monotonic() + 240
    while True:
        jobs = [dict(client.get_job(job_id)) for job_id in ids]
        if all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs):
            return jobs
        assert time.monotonic() < deadline, [(j["name"], j["state"]) for j in jobs]
        time.sleep(0.5)


def overlaps(record: Path) -> list[tuple[Any, ...]]:
    """Pairs of runs of two jobs that held one whole GPU of one node at the same time."""
    spans = []
    for path in record.iterdir():
        entry = json.loads(path.read_text())
        for gpu in filter(None, entry["gpus"].split(",")):
            spans.append(
                (entry["node"], gpu, entry["t0"], entry["t1"], entry["job"], entry["shared"])
            )
    found = []
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            same_gpu = a[:2] == b[:2] and a[4] != b[4]
            if same_gpu and a[2] < b[3] and b[2] < a[3] and not (a[5] and b[5]):
                found.append((a, b))
    return found


def survives_a_crash(root: Path, args: Sequence[str], env: Mapping[str, str]) -> None:
    """A job across both nodes keeps running while the control plane is killed and comes
    back: the new one adopts its run, which ends SUCCEEDED, started once."""
    code = "import time; print('started', flush=True); time.sleep(4); print('finished')"
    with control_plane(root, args, env, crash=True) as client:
        job = client.submit(
            {"name": "lasting", "command": [sys.executable, "-c", code], "resources": {"gpus": 6}}
        )
        wait_state(client, job["id"], "RUNNING")
        deadline = time.monotonic() + 60
        while client.logs(job["id"])[0].count("started") < 2:
            assert time.monotonic() < deadline, client.logs(job["id"])
            time.sleep(0.1)
    with control_plane(root, args, env) as client:
        done = wait_state(client, job["id"], "SUCCEEDED")
        log = client.logs(job["id"])[0]
    assert done["restarts"] == 0 and done["preemptions"] == 0  # one run
    # both nodes' lines, every one of them: a control plane killed between appending a
    # poll's output to the job's log and recording how far it read appends it again after
    # the restart (the Ray executor's log is at least once), so a line may come twice
    assert log.count("started") >= 2 and log.count("finished") >= 2, log
