"""``danlu wait ARRAY`` against a real control plane: the array's tasks are found by the
listing of their names (a 62-character array name cut to fit each task's name), not asked
for one by one, which took 77 s for 1,000 tasks."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from helpers import live_server
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.client import Client

TASKS = 40
NAME = "n" * 62  # each task's name is this cut to fit 63 characters with its "-N"


class Counting(httpx.HTTPTransport):
    """A real transport that keeps every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return super().handle_request(request)


def test_wait_reads_an_arrays_tasks_from_a_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "name": NAME,
        "trial": {"command": ["python", "shard.py"], "resources": {"gpus": 1}},
        "parameters": {"index": {"values": list(range(TASKS))}},
        "method": "grid",
        "parallel": TASKS,
        "array": True,
    }
    with live_server(tmp_path, start_loops=False) as live:  # the tasks stay PENDING
        transport = Counting()
        client = Client(live.url, live.token, transport=transport)
        array = client.submit_sweep(body)
        client.cancel_sweep(str(array["id"]))  # pending tasks end CANCELLED at once
        tasks = [str(t["job_id"]) for t in client.sweep(str(array["id"]))["trials"]]
        assert len(tasks) == TASKS
        transport.sent.clear()
        monkeypatch.setattr(jobs_cli, "client_factory", lambda home, url, token: client)
        result = CliRunner().invoke(app, ["wait", str(array["id"])[:6], "--json", "--poll", "0.1"])
        assert result.exit_code == 1, result.output  # cancelled tasks
        assert [j["id"] for j in json.loads(result.stdout)] == tasks
        assert {j["state"] for j in json.loads(result.stdout)} == {"CANCELLED"}
        asked = [r.url.path.rsplit("/", 1)[-1] for r in transport.sent]
        assert not set(asked) & set(tasks), asked  # no task asked for by itself
        assert len(transport.sent) <= 5, [str(r.url) for r in transport.sent]
