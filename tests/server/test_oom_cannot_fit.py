"""A job whose ``danlu.train`` runs out of memory even at the smallest micro-batch cannot fit
the memory it was given: a real local run of it ends the job FAILED after that one run, with
a reason that says so, names the memory it had and what to ask for instead, and no restart
spent (each restart had the same memory and failed the same way, until ``max_restarts``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import ServerProcess, get_job, server_process, spec, submit, wait_for

FAKE = "1x80GiB"

# danlu.train's OOM guard halving 8 -> 4 -> 2 -> 1 and giving up: every forward pass raises
# torch's out-of-memory error, as a model that does not fit at any micro-batch does
CANNOT_FIT = """
import torch
import danlu.train as dt
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
def loss(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
ctx = dt.init(model, opt, global_batch_size=8, micro_batch_size=8, dataset_size=len(data),
              oom_injector=dt.inject_oom_at(1, times=10**6), progress=False)
with ctx:
    for _ in ctx.epochs(1):
        for batch in ctx.batches(data):
            ctx.step(batch, loss)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with server_process(tmp_path / "home", FAKE, env={"DANLU_INTERVAL": "0.1"}) as proc:
        proc.start()
        yield proc


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30.0,
    )


def _ended_or_restarted(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job once it has finished, or once a restart was counted against it."""

    def check() -> dict[str, Any] | None:
        job = get_job(client, job_id)
        done = job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
        return job if done or job["restarts"] > 0 else None

    job: dict[str, Any] = wait_for(check, 120, 0.1)
    return job


@pytest.mark.parametrize(
    ("resources", "had", "fix"),
    [
        ({"gpus": 1, "gpu_memory": "20GiB"}, "it had a 20.0GiB share of 1 GPU", "gpu_memory"),
        ({"gpus": 1}, "it had 1 whole GPU of 80.0GiB", "gpu_type"),
    ],
    ids=["share", "whole"],
)
def test_a_run_that_cannot_fit_even_micro_batch_1_fails_the_job_at_once(
    server: ServerProcess, resources: dict[str, Any], had: str, fix: str
) -> None:
    with _client(server) as c:
        body = spec("too-big", CANNOT_FIT, resources=resources, max_restarts=3)
        job_id = submit(c, body)["id"]
        job = _ended_or_restarted(c, job_id)
        events = c.get(f"/jobs/{job_id}/events").json()
        log = c.get(f"/jobs/{job_id}/logs").text
    assert "MicroBatchOutOfMemoryError" in log, log[-2000:]
    assert job["state"] == "FAILED", (job, events)
    assert job["restarts"] == 0
    assert [e["new"] for e in events] == ["PENDING", "RUNNING", "FAILED"]
    reason = events[-1]["reason"]
    said = "cannot fit its GPU memory: danlu.train ran out of memory even at its smallest"
    assert reason.startswith(f"{said} micro-batch (exit code 1); "), reason
    assert had in reason, reason
    assert fix in reason and "no restart" in reason, reason
