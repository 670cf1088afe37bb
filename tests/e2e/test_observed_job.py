"""End to end: a real ``danlu up`` with ``DANLU_POLICY=danlu`` runs an elastic danlu.train job
as a process; the job's metric reports over HTTP become the scheduler's measurement of the run
(the Job's ``observed``), which is dropped when the run's GPUs are released."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_server import running_server

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("measured_job.py")


def _until(what: Callable[[], dict[str, Any] | None], timeout: float, why: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got is not None:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {why}")


def test_a_training_jobs_reports_become_the_schedulers_measurement(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with running_server(tmp_path, env={"DANLU_POLICY": "danlu"}) as server, server.client() as c:
        spec = {
            "name": "measured",
            "command": [sys.executable, str(JOB), str(stop)],
            "resources": {"gpus": "1..2"},
            "training": {"global_batch_size": 16},
            "max_restarts": 0,
        }
        job_id = c.submit(spec)["id"]

        def measured() -> dict[str, Any] | None:
            job = c.get_job(job_id)
            assert job["state"] in ("PENDING", "RUNNING"), job
            return job if "step_time" in job["observed"] else None

        job = _until(measured, 90, "a measured step time")
        seen = job["observed"]
        assert job["state"] == "RUNNING" and job["gpus"] == 1  # an unmeasured job: one GPU
        assert (seen["local_bsz"], seen["batch_size"], seen["num_replicas"]) == (16, 16, 1)
        assert (seen["accum_steps"], seen["sync_time"]) == (0, 0)
        assert 0.02 <= seen["step_time"] < 2.0  # the job sleeps 20 ms a step
        stop.touch()

        def finished() -> dict[str, Any] | None:
            done = c.get_job(job_id)
            return done if done["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

        done = _until(finished, 60, "the job to finish")
        assert done["state"] == "SUCCEEDED", server.output()
        assert done["observed"] == {}


def test_a_goodput_adaptive_job_is_seen_as_adaptive(tmp_path: Path) -> None:
    """danlu.train's goodput-adaptive batch reports ``adaptive`` over HTTP; the server keeps it
    in the job's measurement, where the danlu policy reads it."""
    stop = tmp_path / "stop"
    with running_server(tmp_path, env={"DANLU_POLICY": "danlu"}) as server, server.client() as c:
        spec = {
            "name": "adaptive",
            "command": [sys.executable, str(JOB), str(stop), "goodput"],
            "resources": {"gpus": "1..2"},
            "training": {"global_batch_size": 16, "max_batch_size": 64},
            "max_restarts": 0,
        }
        job_id = c.submit(spec)["id"]

        def adaptive() -> dict[str, Any] | None:
            job = c.get_job(job_id)
            assert job["state"] in ("PENDING", "RUNNING"), job
            return job if job["observed"].get("adaptive") == 1 else None

        seen = _until(adaptive, 90, "an adaptive measurement")["observed"]
        assert 16 <= seen["batch_size"] <= 64 and seen["local_bsz"] <= 8  # micro-batches of 8
        stop.touch()

        def finished() -> dict[str, Any] | None:
            done = c.get_job(job_id)
            return done if done["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

        assert _until(finished, 60, "the job to finish")["state"] == "SUCCEEDED", server.output()
