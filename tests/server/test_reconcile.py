"""The reconcile loop with real processes (local executor, fake GPUs): preemption by
checkpoint and resume, restarts with backoff, and a crash between the scheduling transaction
and the launch."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, replayed_state, spec, submit, wait_for, wait_state

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.executors import JobLaunch
from danlu.sched.policies.danlu import DanluPolicy
from danlu.server.reconcile import (
    COLLECTOR_THRESHOLDS,
    Reconciler,
    build_policy,
    collector_paused,
    tune_collector,
)

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


def test_a_specs_checkpoint_dir_is_the_jobs_and_others_get_their_own(tmp_path: Path) -> None:
    """``checkpoint_dir`` was accepted and then ignored: every job got the home's directory."""
    show = "import os, sys; open(sys.argv[1], 'w').write(os.environ['DANLU_CHECKPOINT_DIR'])"
    mine, told, given = tmp_path / "shared" / "run1", tmp_path / "told", tmp_path / "given"
    with live_server(tmp_path, fake_gpus="2x80GiB") as live, live.client() as c:
        chosen = submit(
            c,
            {
                "name": "chosen",
                "command": [sys.executable, "-c", show, str(told)],
                "checkpoint_dir": str(mine),
            },
        )
        own = submit(c, {"name": "own", "command": [sys.executable, "-c", show, str(given)]})
        wrong = c.post("/jobs", json={"name": "rel", "command": ["true"], "checkpoint_dir": "ck"})
        for job in (chosen, own):
            wait_state(c, job["id"], "SUCCEEDED", timeout=30)
    assert told.read_text() == str(mine)
    assert not mine.exists()  # the job's to create: the control plane never touches it
    assert given.read_text() == str(tmp_path / "home" / "checkpoints" / own["id"])
    assert wrong.status_code == 422 and "absolute path nor a URL" in wrong.text


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


RECORDING = """
import os, sys, time
with open(sys.argv[1], "a") as out:
    out.write(f"{os.environ['CUDA_VISIBLE_DEVICES']} {os.environ.get('DANLU_BATCH_SIZE')} "
              f"{os.environ.get('DANLU_GLOBAL_BATCH_SIZE')}\\n")
time.sleep(60)
"""


def test_danlu_policy_learns_from_reports_and_grows_an_elastic_job(tmp_path: Path) -> None:
    """The server's danlu policy: an elastic job starts on one GPU (nothing measured); its
    step reports (at two micro-batch sizes, so the model learns that compute scales with the
    micro-batch) become the measurement the policy reads; once its hold is over it is
    resized onto more GPUs and relaunched with the per-GPU batch of the same global batch."""
    from danlu.server.services import jobs, metrics

    out = tmp_path / "runs.txt"
    with (
        live_server(tmp_path, fake_gpus="4x80GiB", start_loops=False, policy="danlu") as live,
        live.client() as c,
    ):
        state = live.prepared.app.state.danlu if live.prepared else None
        loop = live.prepared.app.state.reconciler if live.prepared else None
        assert state is not None and isinstance(loop, Reconciler)
        job = submit(
            c,
            {
                "name": "elastic",
                "command": [sys.executable, "-c", RECORDING, str(out)],
                "resources": {"gpus": "1..4"},
                "training": {"global_batch_size": 64},
            },
        )
        t0 = job["submitted_at"] + 1
        loop.run_once(now=t0)
        first = c.get(f"/jobs/{job['id']}").json()
        assert (first["state"], first["gpus"]) == ("RUNNING", 1)
        wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == 1)

        def report(step: int, micro: int, now: float) -> None:  # what danlu.train sends
            record = {
                "step_time_s": 0.5,  # one step of the global batch of 64, as micro-batches
                "micro_batch": micro,
                "accumulation": 64 // micro,
                "global_batch": 64,
                "world_size": 1,
                "sync_time_s": 0.0,
            }
            with state.db.session() as s:
                reports = [{"step": step + i, **record} for i in range(10)]
                metrics.ingest(s, jobs.get_job(s, job["id"]), reports, now=now)

        report(1, 64, t0 + 20)
        assert c.get(f"/jobs/{job['id']}").json()["observed"]["step_time"] == 0.5
        loop.run_once(now=t0 + 40)  # remembered: a micro-batch of 64 takes 0.5 s
        report(11, 32, t0 + 60)  # e.g. after an OOM: 2 x 32 in the same 0.5 s
        assert c.get(f"/jobs/{job['id']}").json()["observed"]["step_time"] == 0.25
        loop.run_once(now=t0 + 400)  # past the hold: the model says more GPUs pay
        grown = c.get(f"/jobs/{job['id']}").json()

        def relaunched() -> bool:  # the new attempt starts once the old run has exited
            loop.run_once(now=t0 + 401)
            return len(out.read_text().splitlines()) == 2

        wait_for(relaunched, 30, 0.2)
        loop.stop()
    assert grown["state"] == "RUNNING" and grown["gpus"] > 1, grown
    assert grown["observed"] == {}  # measured on one GPU: dropped with that allocation
    runs = [line.split() for line in out.read_text().splitlines()]
    assert runs[0][1:] == ["64", "64"]
    devices, per_gpu, global_batch = runs[1]
    assert len(devices.split(",")) == grown["gpus"]
    assert (int(per_gpu), global_batch) == (-(-64 // grown["gpus"]), "64")


def test_the_collector_is_paused_in_the_round_and_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed round")
    assert gc.isenabled()  # back on after an exception too
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: left off
    finally:
        gc.enable()


def test_the_control_plane_s_collector_thresholds_are_set() -> None:
    before = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS != (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_the_policy_is_built_with_the_settings_options(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path, policy="danlu", policy_options='{"min_hold": 300, "alloc": "walk"}'
    )
    policy = build_policy(settings)
    assert isinstance(policy, DanluPolicy)
    assert (policy.min_hold, policy.alloc, policy.hysteresis) == (300, "walk", 0.1)
    assert build_policy(load_settings(home=tmp_path, policy="danlu")) == DanluPolicy()


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ('{"hysteresis": 2}', ["hysteresis must be in [0, 1), got 2 (default 0.1)"]),
        ('{"min_hold": "long"}', ["'min_hold' must be a number, got 'long'"]),
        ('{"holds": 1}', ["has no option 'holds'", "min_hold"]),
    ],
)
def test_bad_policy_options_name_the_setting_and_the_option(
    tmp_path: Path, options: str, names: list[str]
) -> None:
    settings = load_settings(home=tmp_path, policy="danlu", policy_options=options)
    with pytest.raises(ConfigError) as error:
        build_policy(settings)
    message = str(error.value)
    assert message.startswith("DANLU_POLICY_OPTIONS (--policy-option): ")
    for name in names:
        assert name in message
