"""A real Prometheus (Debian's ``prometheus``) scrapes the server's ``/metrics`` every second;
the test asks Prometheus' HTTP API for the DCGM framebuffer gauge and danlu's job gauge.

Without ``/usr/bin/prometheus`` the scrape test is skipped, unless
``DANLU_TEST_REQUIRE_PROMETHEUS`` is set (CI: ``apt-get install -y prometheus``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import Live, live_server, spec, submit, wait_for, wait_state

GiB = 1024**3
MiB = 1024**2


def _prometheus() -> str | None:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if found is None and os.environ.get("DANLU_TEST_REQUIRE_PROMETHEUS"):
        pytest.fail("Prometheus is required: apt-get install -y prometheus")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="2x80GiB") as server:
        yield server


def test_metrics_exposition(live: Live) -> None:
    with live.client() as c:
        c.post("/projects", json={"name": "small", "quota_gpus": 1.5, "share": 2})
        assert c.get("/projects").status_code == 200
        c.post("/users", json={"name": "dora"}).raise_for_status()
        c.put("/users/dora", json={"quota_gpus": 4}).raise_for_status()
        job = submit(
            c,
            spec("m", "import time; time.sleep(20)", resources={"gpus": 1, "gpu_memory": "30GiB"}),
        )
        wait_state(c, job["id"], "RUNNING")
        closed = c.post("/cluster/nodes/localhost/cordon", json={"gpu": 1, "reason": "Xid 79"})
        assert closed.status_code == 200, closed.text
        text = httpx.get(f"{live.url}/metrics").text
        c.post(f"/jobs/{job['id']}/cancel")
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
    ):
        assert f"# TYPE {name} gauge" in text
    used = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
    assert len(used) == 2
    for label in ("gpu=", "UUID=", "device=", "modelName=", "Hostname="):
        assert label in used[0]
    assert sorted(float(line.rsplit(" ", 1)[1]) for line in used) == [0.0, 30 * GiB / MiB]
    assert 'danlu_jobs{state="RUNNING"} 1.0' in text
    assert 'danlu_queue_length{project="default"} 0.0' in text
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("danlu_project_")
    }
    assert values == {  # a 30 GiB share of an 80 GiB GPU is 0.375 of it
        'danlu_project_gpus_allocated{project="default"}': 0.375,
        'danlu_project_gpus_allocated{project="small"}': 0.0,
        'danlu_project_gpu_memory_allocated_bytes{project="default"}': 30 * GiB,
        'danlu_project_gpu_memory_allocated_bytes{project="small"}': 0.0,
        'danlu_project_quota_gpus{project="small"}': 1.5,  # "default" has none
        'danlu_project_share{project="default"}': 1.0,
        'danlu_project_share{project="small"}': 2.0,
        # no danlu_project_recent_gpus: the default policy (priority) keeps no history
    }
    users = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("danlu_user_")
    }
    assert users == {
        'danlu_user_gpus_allocated{user="admin"}': 0.375,
        'danlu_user_gpus_allocated{user="dora"}': 0.0,  # none held, but a quota
        'danlu_user_quota_gpus{user="dora"}': 4.0,
    }
    assert "danlu_gpus_allocated" in text and "danlu_job_restarts_total 0.0" in text
    assert "danlu_scheduling_round_seconds_count" in text
    assert 'danlu_gpus_closed{state="cordoned"} 1.0' in text
    assert 'danlu_gpus_closed{state="draining"} 0.0' in text


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def test_real_prometheus_scrapes_danlu(live: Live, tmp_path: Path) -> None:
    binary = _prometheus()
    if binary is None:
        pytest.skip(
            "the prometheus binary is absent (apt-get install -y prometheus) and "
            "DANLU_TEST_REQUIRE_PROMETHEUS is unset"
        )
    target = live.url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: danlu\n"
        "    scrape_interval: 1s\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = _free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with live.client() as c:
            job = submit(
                c,
                spec(
                    "scraped",
                    "import time; time.sleep(60)",
                    resources={"gpus": 1, "gpu_memory": "20GiB"},
                ),
            )
            wait_state(c, job["id"], "RUNNING")

            def scraped() -> list[dict[str, Any]] | None:
                try:
                    found = _query(base, 'danlu_jobs{state="RUNNING"} == 1')
                except httpx.HTTPError:
                    return None
                return found or None

            wait_for(scraped, 60, 0.5)
            used = _query(base, "DCGM_FI_DEV_FB_USED")
            values = sorted(float(r["value"][1]) for r in used)
            assert values == [0.0, 20 * GiB / MiB], used
            labels = used[0]["metric"]
            assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(labels)
            assert _query(base, 'up{job="danlu"}')[0]["value"][1] == "1"
            c.post(f"/jobs/{job['id']}/cancel")
            wait_state(c, job["id"], "CANCELLED", timeout=20)
            wait_for(lambda: _query(base, 'danlu_jobs{state="CANCELLED"} == 1'), 30, 0.5)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
