"""``danlu metrics --all`` and :meth:`~danlu.client.Client.iter_metrics`: every record of a
job, page by page by step, also of a step of more records than the API's largest page
(:data:`~danlu.server.services.metrics.MAX_READ`, lowered here): each page is read after
the position of the one before (``next`` = its ``X-Danlu-Metrics-Next``), which goes on
inside a step where ``after_step`` skipped the rest of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.client import Client, InvalidRequestError, ServerError, job_records
from danlu.server.services import metrics

STEPS = [0] * 12 + [1, 1, 2]
"""The steps of the job's records: step 0 holds more than the largest page (5 here)."""


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Client, str]]:
    """A job of the real API app that reported :data:`STEPS`, with the largest page 5 records
    and the client's pages 2."""
    monkeypatch.setattr(metrics, "MAX_READ", 5)
    monkeypatch.setattr(job_records, "METRICS_PAGE", 2)
    with (
        real_api(tmp_path, monkeypatch) as token,
        jobs_cli.client_factory(None, None, token) as client,
    ):
        body = {"name": "m", "command": ["python", "t.py"], "resources": {"gpus": 1}}
        job_id = str(client.submit(body)["id"])
        records = [{"step": step, "n": n} for n, step in enumerate(STEPS)]
        assert client.post_metrics(job_id, records) == len(STEPS)
        yield client, job_id


def test_all_prints_every_record_of_a_step_over_the_largest_page(job: tuple[Client, str]) -> None:
    client, job_id = job
    result = CliRunner().invoke(app, ["metrics", job_id, "--all", "--json"])
    assert result.exit_code == 0, result.output
    assert [(r["step"], r["n"]) for r in json.loads(result.stdout)] == list(
        zip(STEPS, range(len(STEPS)), strict=True)
    )
    by_step = client.metrics(job_id, after_step=-1, limit=5)
    assert [r["n"] for r in by_step] == [0, 1, 2, 3, 4]  # a page ends inside step 0
    skipped = client.metrics(job_id, after_step=0, limit=5)
    assert [r["n"] for r in skipped] == [12, 13, 14]  # after_step passes over its rest


def test_all_and_next_refuse_what_they_cannot_go_with(job: tuple[Client, str]) -> None:
    client, job_id = job
    for extra, flag in ((["--tail", "20"], "--tail"), (["-f"], "--follow")):
        result = CliRunner().invoke(app, ["metrics", job_id, "--all", *extra])
        assert result.exit_code == 2, result.output
        assert flag in result.stderr and "--all" in result.stderr
    with pytest.raises(InvalidRequestError) as refused:
        client.metrics_by_step(job_id, after="7", limit=2)
    assert refused.value.field == "next"
    path = f"/jobs/{job_id}/metrics"
    with pytest.raises(InvalidRequestError) as refused:
        client.request("GET", path, params={"next": "0.0", "tail": "true", "limit": 2})
    assert refused.value.field == "next"
    rows, following = client.metrics_by_step(job_id, after_step=2, limit=2)
    assert rows == [] and following == "3.0"  # where it began: a later step


def _old_server(pages: list[tuple[list[dict[str, Any]], str | None]]) -> tuple[Client, list[Any]]:
    """A client of a server answering ``pages`` in turn (a position header or none), and the
    query of each request it got."""
    asked: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        rows, following = pages.pop(0)
        headers = {} if following is None else {"X-Danlu-Metrics-Next": following}
        return httpx.Response(200, json=rows, headers=headers)

    return Client("http://testserver", "t", transport=httpx.MockTransport(answer)), asked


def test_a_server_without_positions_is_read_on_by_step() -> None:
    client, asked = _old_server(
        [([{"step": 1}, {"step": 2}], None), ([{"step": 3}], None), ([], None)]
    )
    assert [r["step"] for r in client.iter_metrics("j", page=2)] == [1, 2, 3]
    assert [q.get("after_step") for q in asked] == [None, "2", "3"]
    assert all("next" not in q for q in asked)


def test_pages_that_do_not_go_on_are_a_server_error() -> None:
    client, _ = _old_server([([{"step": 1}], "1.1"), ([{"step": 1}], "1.1")])
    with pytest.raises(ServerError, match="X-Danlu-Metrics-Next"):
        list(client.iter_metrics("j"))
    client, _ = _old_server([([{"step": 4}], None), ([{"step": 4}], None)])
    with pytest.raises(ServerError, match="cannot be read on"):
        list(client.iter_metrics("j"))
