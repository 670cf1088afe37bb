"""``danlu top``'s summary counts every active job, and the finished ones as the server counts
them: a ``GET /jobs?state=S&count=true&limit=1`` for each ended state, so that a cluster's
5,000 finished jobs read 5,000. A server that does not count jobs (a reply without the
``X-Danlu-Count`` header, or a 422 naming ``count``) has them counted among the newest jobs
``danlu top`` reads (:data:`danlu.cli.top.RECENT`): where there are more, the summary says so
instead of printing 5,000 finished jobs as 1,000."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_fake_api import invoke, jobs_app, serve_jobs_commands
from cli_real_api import real_api
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.cli import top
from danlu.client import Client
from danlu.client.errors import error_from_response
from danlu.config import load_settings
from danlu.core.state import JobState
from danlu.server.db import Database
from danlu.server.services import jobs, users

SUCCEEDED = 30
"""Succeeded jobs in the store: more than the newest :data:`READ` a server without counts
has read."""

READ = 20
""":data:`danlu.cli.top.RECENT` in these tests."""


@pytest.mark.parametrize(
    ("succeeded", "said", "not_said"),
    [
        (30, "RUNNING 1; of the newest 20 jobs: SUCCEEDED 18, FAILED 1", None),
        (12, "RUNNING 1, SUCCEEDED 12, FAILED 1", "newest"),
    ],
    ids=["more-than-it-reads", "fewer"],
)
def test_top_once_counts_finished_jobs_of_the_newest_it_reads(
    monkeypatch: pytest.MonkeyPatch, succeeded: int, said: str, not_said: str | None
) -> None:
    """A server whose replies have no ``X-Danlu-Count`` header (as the fake's): the counts
    are asked for once, then the newest jobs read."""
    monkeypatch.setattr(top, "RECENT", READ)
    fake = serve_jobs_commands(monkeypatch)
    for i in range(succeeded):
        fake.add_job(f"done-{i}", "SUCCEEDED")
    fake.add_job("failed", "FAILED")
    fake.add_job("running", "RUNNING")
    code, out, err = invoke(jobs_app(), "top", "--once")
    assert code == 0, err
    assert said in out, out
    assert not_said is None or not_said not in out, out
    asked = [r.url.params for r in fake.requests if r.url.params.get("limit") == "1"]
    assert [p.get_list("state") for p in asked] == [["SUCCEEDED"]], asked  # then no more
    assert any(r.url.params.get("limit") == str(READ) for r in fake.requests)


def _printed(frame: Any) -> str:
    console = Console(width=200, height=30, record=True, file=io.StringIO())
    console.print(frame)
    return console.export_text()


@pytest.mark.parametrize("height", [None, 30], ids=["whole", "live"])
def test_summary_shows_the_servers_counts_of_finished_jobs(height: int | None) -> None:
    running = {"id": "r1", "state": "RUNNING", "name": "train"}
    done = {"id": "d1", "state": "SUCCEEDED", "name": "old"}  # the counts replace it
    finished = {"SUCCEEDED": 5000, "FAILED": 2, "CANCELLED": 0}
    line = top.summary_line([], [running, done], recent=1000, finished=finished).plain
    assert line.endswith("; RUNNING 1, SUCCEEDED 5000, FAILED 2"), line
    frame = top.render([], [running], height=height, recent=1000, finished=finished)
    text = _printed(frame)
    assert "RUNNING 1, SUCCEEDED 5000, FAILED 2" in text and "newest" not in text, text
    assert "CANCELLED" not in text, text
    # without counts, as before: the finished jobs among ``jobs``, of the newest ``recent``
    before = top.summary_line([], [running, done], recent=1000).plain
    assert before.endswith("; RUNNING 1; of the newest 1000 jobs: SUCCEEDED 1"), before


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real API on a store of :data:`SUCCEEDED` succeeded jobs, then a failed one and a
    running one (the newest)."""
    monkeypatch.setattr(top, "RECENT", READ)
    with real_api(tmp_path, monkeypatch):
        db = Database(load_settings(home=tmp_path, fake_gpus="1x80GiB").db_url)
        share = {"node": "node-0", "gpu": 0, "milli": 100, "memory": 1 << 30}
        with db.session() as s:
            admin = users.get_user(s, "admin")
            for i in range(SUCCEEDED + 2):
                job = jobs.submit(s, {"name": f"j{i}", "command": ["true"]}, admin, now=1000.0 + i)
                if i == SUCCEEDED:
                    jobs.change_state(s, job, JobState.FAILED, "failed", 1500.0)
                    continue
                jobs.change_state(s, job, JobState.RUNNING, "started", 1500.0, allocation=[share])
                if i < SUCCEEDED:
                    jobs.change_state(s, job, JobState.SUCCEEDED, "exit 0", 1600.0, exit_code=0)
        db.dispose()
        yield


def _noting_client(sent: list[dict[str, Any]], counts: bool) -> Client:
    """A client of the real API (:func:`real_api`'s) that notes the query of each
    ``GET /jobs`` it sends; ``counts`` False: as a server older than ``count`` answers (a
    422 naming it)."""
    client = jobs_cli.client_factory(None, None, None)
    send = client.request

    def request(method: str, path: str, **kwargs: Any) -> httpx.Response:
        params = dict(kwargs.get("params") or {})
        if path == "/jobs":
            sent.append(params)
        if not counts and "count" in params:
            message = "unknown query parameter 'count'; check the spelling"
            body = {"error": {"type": "SpecError", "field": "count", "message": message}}
            raise error_from_response(httpx.Response(422, json=body))
        return send(method, path, **kwargs)

    client.request = request  # type: ignore[method-assign]
    return client


@pytest.mark.usefixtures("store")
@pytest.mark.parametrize(
    ("counts", "said"),
    [
        (True, f"RUNNING 1, SUCCEEDED {SUCCEEDED}, FAILED 1\n"),
        (False, f"RUNNING 1; of the newest {READ} jobs: SUCCEEDED {READ - 2}, FAILED 1"),
    ],
    ids=["counting-server", "older-server"],
)
def test_top_asks_the_server_for_each_ended_states_count(counts: bool, said: str) -> None:
    sent: list[dict[str, Any]] = []
    text = _printed(top.frame(_noting_client(sent, counts), width=200))
    assert said in text, text
    asked = [p for p in sent if p.get("count") == "true" and p.get("limit") == 1]
    if counts:
        assert [p.get("state") for p in asked] == [[s] for s in top.ENDED], sent
        assert "newest" not in text, text
        assert all(p.get("limit") != READ for p in sent), sent  # the newest jobs not read
    else:
        assert [p.get("state") for p in asked] == [["SUCCEEDED"]], sent  # then no more
        assert any(p.get("limit") == READ for p in sent), sent
