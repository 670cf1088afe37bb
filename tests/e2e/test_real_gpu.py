"""End to end on the host's real GPUs (``gpu``-marked; skipped without ``nvidia-smi``): a
real ``danlu up`` with no fake inventory reads its GPUs through NVML, runs a ``danlu.train``
job on the GPU it allocates (``CUDA_VISIBLE_DEVICES``), reads the job's peak memory off
CUDA, meters the GPU's energy from NVML's counter and charges it to the job, exports the
GPU's DCGM-named metrics, and its NVML health check finds a healthy GPU healthy."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import httpx
import pytest
from e2e_server import running_server

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here"),
]

JOB = Path(__file__).with_name("gpu_job.py")
BURN_S = 8.0
"""Seconds of matrix products the job runs after training (the energy it must be charged)."""


def _gauge(text: str, name: str) -> list[float]:
    """Every value of gauge ``name`` in a Prometheus exposition."""
    return [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]


def test_a_job_trains_on_the_hosts_gpu_and_is_charged_its_energy(tmp_path: Path) -> None:
    env = {"DANLU_ENERGY_INTERVAL": "1", "DANLU_HEALTH_INTERVAL": "1"}
    with running_server(tmp_path, env=env, fake_gpus=None) as server, server.client() as c:
        gpus = [gpu for node in c.nodes() for gpu in node["gpus"]]
        assert gpus, server.output()
        assert all(gpu["memory"] > 8 * 2**30 for gpu in gpus), gpus
        assert all(gpu["uuid"].startswith("GPU-") for gpu in gpus), gpus
        spec = {
            "name": "on-gpu",
            "command": [sys.executable, str(JOB), "--seconds", str(BURN_S)],
            "resources": {"gpus": 1},
            "max_restarts": 0,
        }
        job_id = c.submit(spec)["id"]
        deadline = time.monotonic() + 300
        while (job := c.get_job(job_id))["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline, f"job still {job['state']}:\n{server.output()}"
            time.sleep(0.5)
        log, _ = c.logs(job_id)
        assert job["state"] == "SUCCEEDED", log[-3000:]
        found = re.search(
            r"gpu-job device=(\S+) visible=(\S+) name=(.+?) steps=(\d+) "
            r"loss=([\d.]+)->([\d.]+) memory_bytes=(\d+) limit=\S+",
            log,
        )
        assert found, log[-3000:]
        device, visible, _name, steps, first, last, peak = found.groups()
        assert device == "cuda:0"  # the one GPU the job sees is its allocated one
        assert visible in {str(gpu["index"]) for gpu in gpus} | {gpu["uuid"] for gpu in gpus}
        assert int(steps) == 30 and float(last) < float(first)
        assert int(peak) > 0  # read off torch.cuda.max_memory_allocated on the job's GPU
        records = c.metrics(job_id)
        assert any(r.get("memory_bytes", 0) > 0 for r in records), records[-3:]

        # The meter reads every second: wait for the reading after the job's end.
        deadline = time.monotonic() + 30
        while (joules := c.get_job(job_id)["energy_joules"] or 0.0) < BURN_S * 50:
            assert time.monotonic() < deadline, f"{joules} J charged:\n{server.output()}"
            time.sleep(0.5)
        # An H200 draws up to 700 W; nothing draws over 1.5 kW for the whole run.
        assert joules < 1500 * job["run_time"], (joules, job["run_time"])

        url = json.loads((server.home / "server.json").read_text())["url"]
        exposition = httpx.get(url + "/metrics", timeout=10).text
        assert _gauge(exposition, "DCGM_FI_DEV_FB_FREE"), exposition[:2000]
        power = _gauge(exposition, "DCGM_FI_DEV_POWER_USAGE")
        assert power and all(watts > 0 for watts in power), power  # a powered GPU draws some
        closed = _gauge(exposition, "danlu_gpus_closed")
        assert closed and not any(closed), exposition[-2000:]  # no GPU closed, in any state
        states = {gpu["state"] for node in c.nodes() for gpu in node["gpus"]}
        assert states == {"ready"}, c.nodes()


def test_two_jobs_share_the_gpu_by_memory(tmp_path: Path) -> None:
    """Two jobs asking for 16 GiB of a GPU each run on the same GPU at the same time, each
    held to its 16 GiB (``DANLU_GPU_MEMORY_LIMIT``) and training there."""
    with running_server(tmp_path, fake_gpus=None) as server, server.client() as c:
        ids = [
            c.submit(
                {
                    "name": f"share-{i}",
                    "command": [sys.executable, str(JOB), "--seconds", str(BURN_S)],
                    "resources": {"gpus": 1, "gpu_memory": "16GiB"},
                    "max_restarts": 0,
                }
            )["id"]
            for i in range(2)
        ]
        deadline = time.monotonic() + 300
        while any(
            (job := c.get_job(i))["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED") for i in ids
        ):
            assert time.monotonic() < deadline, f"job still {job['state']}:\n{server.output()}"
            time.sleep(0.5)
        jobs = [c.get_job(i) for i in ids]
        logs = [c.logs(i)[0] for i in ids]
        assert [j["state"] for j in jobs] == ["SUCCEEDED"] * 2, [log[-2000:] for log in logs]
        first, second = jobs
        assert first["started_at"] < second["finished_at"]
        assert second["started_at"] < first["finished_at"]  # they ran at the same time
        seen = [re.search(r"device=(\S+) visible=(\S+) .* limit=(\d+)", log) for log in logs]
        assert all(seen), logs
        assert {m.group(1) for m in seen if m} == {"cuda:0"}
        assert len({m.group(2) for m in seen if m}) == 1  # the same GPU
        assert {int(m.group(3)) for m in seen if m} == {16 * 2**30}
