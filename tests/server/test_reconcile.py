"""The reconcile loop with real processes (local executor, fake GPUs): preemption by
checkpoint and resume, restarts with backoff, and a crash between the scheduling transaction
and the launch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, replayed_state, spec, submit, wait_for, wait_state

from danlu.executors import JobLaunch
from danlu.server.reconcile import Reconciler

CHECKPOINTING = """
import os, pathlib, signal, sys, time
ckpt = pathlib.Path(os.environ["DANLU_CHECKPOINT_DIR"]) / "step"
out = open(sys.argv[1], "a", buffering=1)
step = int(ckpt.read_text()) if ckpt.exists() else 0
out.write(f"resume {step} restarts={os.environ['DANLU_RESTART_COUNT']}\\n")
stopping = False
def on_term(signum, frame):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, on_term)
while step < 60:
    if stopping:
        ckpt.write_text(str(step))
        out.write(f"checkpoint {step}\\n")
        sys.exit(75)
    time.sleep(0.05)
    step += 1
out.write(f"done {step}\\n")
"""


def test_preempted_job_checkpoints_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "low.txt"
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", preempt_grace=10) as live,
        live.client() as c,
    ):
        low = submit(
            c,
            {
                "name": "low",
                "priority": 0,
                "command": [sys.executable, "-c", CHECKPOINTING, str(out)],
            },
        )
        wait_state(c, low["id"], "RUNNING")
        wait_for(lambda: out.exists() and "resume 0" in out.read_text())
        high = submit(c, spec("high", "import time; time.sleep(0.5)", priority=10))
        wait_state(c, high["id"], "SUCCEEDED", timeout=30)
        done = wait_state(c, low["id"], "SUCCEEDED", timeout=40)
        events = c.get(f"/jobs/{low['id']}/events").json()
    lines = out.read_text().split("\n")
    checkpoint = next(int(x.split()[1]) for x in lines if x.startswith("checkpoint"))
    assert checkpoint > 0
    assert lines[0].startswith("resume 0 ")
    resumes = [int(x.split()[1]) for x in lines if x.startswith("resume")]
    assert resumes == [0, checkpoint], lines  # the second run starts from the saved step
    assert "done 60" in lines
    assert done["preemptions"] == 1 and done["restarts"] == 0
    assert [e["new"] for e in events] == [
        "PENDING",
        "RUNNING",
        "PREEMPTING",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert replayed_state(events) == "SUCCEEDED"
    assert "preempt" in events[2]["reason"].lower() or events[2]["reason"]


def test_failures_restart_with_backoff_then_fail(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("flaky", "import sys; print('boom'); sys.exit(3)", max_restarts=1))
        restarted = wait_state(c, job["id"], "PENDING", timeout=20)
        wait_for(lambda: c.get(f"/jobs/{job['id']}").json()["restarts"] == 1, 20)
        why = c.get(f"/jobs/{job['id']}/why").json()["reason"]
        assert "backing off" in why or restarted["pending_reason"]
        failed = wait_state(c, job["id"], "FAILED", timeout=40)
        events = c.get(f"/jobs/{job['id']}/events").json()
    assert failed["exit_code"] == 3 and failed["restarts"] == 1
    assert [e["new"] for e in events] == [
        "PENDING",
        "RUNNING",
        "RESTARTING",
        "PENDING",
        "RUNNING",
        "FAILED",
    ]
    assert "out of restarts" in events[-1]["reason"]
    assert replayed_state(events) == "FAILED"


class Crash(BaseException):
    """Stands for the server dying between the scheduling transaction and the launch."""


def test_crash_between_transaction_and_launch_launches_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "runs.txt"
    code = "import os, sys; open(sys.argv[1], 'a').write(f'run {os.getpid()}\\n')"
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        job = submit(c, {"name": "once", "command": [sys.executable, "-c", code, str(out)]})
        first = live.prepared.app.state.reconciler if live.prepared else None
        assert isinstance(first, Reconciler)

        def crash(_launch: JobLaunch) -> Any:
            raise Crash

        monkeypatch.setattr(state.executor, "submit", crash)
        with pytest.raises(Crash):
            first.run_once()
        assert c.get(f"/jobs/{job['id']}").json()["state"] == "RUNNING"  # recorded, not run
        monkeypatch.undo()
        first.stop()  # the "dead" server's lease is given back
        second = Reconciler(state.db, state.executor, state.settings, metrics=state.metrics)
        report = second.run_once()
        assert report.launched == [job["id"]]

        def settled() -> bool:
            second.run_once()
            return bool(c.get(f"/jobs/{job['id']}").json()["state"] == "SUCCEEDED")

        wait_for(settled, 20, 0.1)
        for _ in range(3):
            assert second.run_once().launched == []
        second.stop()
    assert len(out.read_text().splitlines()) == 1  # ran exactly once
