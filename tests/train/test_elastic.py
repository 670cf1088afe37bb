"""Elastic training under torchrun: 2 workers -> one killed -> 1 -> back to 2 (gloo, CPU).

torchrun's own elasticity resizes by *nodes* (agents), not by workers of one agent, and two
agents on one host did not re-form one rendezvous reliably here (the late agent completed a round
of its own), so the resize is done the way danlu's executor does it: torchrun runs the workers
(``--nnodes=1:1``, c10d rendezvous on 127.0.0.1) and danlu re-launches it at the new world size.
One of 2 workers is SIGKILLed mid-run -> the group fails -> relaunch with 1 worker, which resumes
from the newest checkpoint with the data re-sharded -> SIGTERM (preemption: checkpoint, exit 75)
-> relaunch with 2 workers -> the run completes. Every sample must have been used by a committed
step exactly once per epoch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from danlu.executors.base import Outcome, StopReason, classify_exit

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
N, EPOCHS = 48, 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(nproc: int, out: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1:1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        str(HERE / "elastic_worker.py"),
        str(out),
    ]
    env = dict(os.environ)
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env["GLOO_SOCKET_IFNAME"] = "lo"  # the workers talk over loopback only
    with log.open("wb") as f:
        return subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _progress(out: Path) -> dict[str, int]:
    try:
        return dict(json.loads((out / "progress").read_text()))
    except (FileNotFoundError, ValueError):
        return {"world": 0, "step": -1}


def _wait(
    cond: object, what: str, timeout: float, procs: list[subprocess.Popen[bytes]], out: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.05)
    logs = "\n".join(p.read_text()[-3000:] for p in sorted(out.glob("agent*.log")))
    raise AssertionError(f"timed out waiting for {what}; progress={_progress(out)}\n{logs}")


def _workers_of(agent: subprocess.Popen[bytes], out: Path) -> list[int]:
    return [
        int(p.name.split(".")[1])
        for p in (out / "workers").iterdir()
        if p.name.split(".")[0] == str(agent.pid)
    ]


def test_two_workers_lose_one_and_regain_it(tmp_path: Path) -> None:
    out = tmp_path
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = _torchrun(2, out, out / "agent1.log")
        procs.append(first)
        _wait(
            lambda: _progress(out)["world"] == 2 and _progress(out)["step"] >= 4,
            "2 workers at step 4",
            120,
            procs,
            out,
        )
        victim = next(p for p in _workers_of(first, out) if p != _progress(out)["pid"])
        os.kill(victim, signal.SIGKILL)  # one worker dies
        (out / "phase").write_text("1")
        assert first.wait(timeout=120) != 0  # the group failed; danlu re-launches smaller
        second = _torchrun(1, out, out / "agent2.log")
        procs.append(second)
        _wait(
            lambda: _progress(out)["world"] == 1 and _progress(out)["step"] >= 10,
            "the survivor alone at step 10",
            120,
            procs,
            out,
        )
        os.killpg(second.pid, signal.SIGTERM)  # resize back up: preempt, then re-launch
        code = second.wait(timeout=120)
        # torchrun's agent exits 1 on the signal; the run still counts as a preemption
        tail = (out / "agent2.log").read_text(errors="replace")
        assert classify_exit(code, tail, StopReason.PREEMPT) is Outcome.PREEMPTED, (code, tail)
        third = _torchrun(2, out, out / "agent3.log")
        procs.append(third)
        assert third.wait(timeout=180) == 0, (out / "agent3.log").read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    result = json.loads((out / "result.json").read_text())
    worlds = result["worlds"]
    assert worlds == [2, 1, 2], worlds
    assert result["steps"] == EPOCHS * N // 8
    for epoch in range(EPOCHS):
        counts = Counter(result["seen"][str(epoch)])
        assert sorted(counts) == list(range(N)), f"epoch {epoch}: missing samples"
        assert set(counts.values()) == {1}, f"epoch {epoch}: repeated samples"
    print(
        f"elastic: worlds {worlds}, {result['steps']} steps, every one of {N} samples seen "
        f"exactly once in each of {EPOCHS} epochs"
    )
