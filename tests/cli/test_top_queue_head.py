"""``danlu top`` reads the jobs it shows, not the whole queue: every job holding GPUs, the
head of the pending queue (``GET /jobs?order=queue``, as many as the rows left) and how many
are pending (``count=true``). It read every active job each refresh (10,000 pending: ten
pages of 1,000) to show 30. Its frame is the same: the queue's head in its order, the exact
counts. A server older than ``order`` and ``count`` (a 422 naming one) is read as before."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
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

QUEUED = 40
"""Pending jobs: more than a frame of :data:`SHOWN` rows holds."""

SHOWN = 12
"""The active jobs a frame shows (``max_jobs``)."""

RUNNING = 2


@pytest.fixture
def queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The real API on a store with :data:`RUNNING` running jobs and :data:`QUEUED` pending
    ones, the last of them of a higher priority; yields the pending jobs' ids in the queue's
    order (highest priority, then oldest first)."""
    with real_api(tmp_path, monkeypatch):
        db = Database(load_settings(home=tmp_path, fake_gpus="1x80GiB").db_url)
        with db.session() as s:
            admin = users.get_user(s, "admin")
            made = [
                jobs.submit(s, {"name": f"q{i}", "command": ["true"]}, admin, now=1000.0 + i)
                for i in range(RUNNING + QUEUED - 1)
            ]
            urgent = {"name": "urgent", "command": ["true"], "priority": 9}
            made.append(jobs.submit(s, urgent, admin, now=2000.0))
            for job in made[:RUNNING]:
                share = {"node": "node-0", "gpu": 0, "milli": 100, "memory": 1 << 30}
                jobs.change_state(s, job, JobState.RUNNING, "started", 1500.0, allocation=[share])
            pending = [made[-1].id] + [job.id for job in made[RUNNING:-1]]
        db.dispose()
        yield pending


def _client(sent: list[tuple[dict[str, Any], int]], older: bool = False) -> Client:
    """A client of the real API (:func:`real_api`'s) that notes each ``GET /jobs`` it sends:
    its query and how many jobs came back. ``older``: as a server older than ``order`` and
    ``count`` answers (a 422 naming ``count``, the first unknown by name)."""
    client = jobs_cli.client_factory(None, None, None)
    send = client.request

    def request(method: str, path: str, **kwargs: Any) -> httpx.Response:
        params = dict(kwargs.get("params") or {})
        if older and ("order" in params or "count" in params):
            body = {
                "error": {
                    "type": "SpecError",
                    "field": "count",
                    "message": "unknown query parameter 'count'; check the spelling",
                }
            }
            raise error_from_response(httpx.Response(422, json=body))
        response = send(method, path, **kwargs)
        if path == "/jobs":
            sent.append((params, len(response.json())))
        return response

    client.request = request  # type: ignore[method-assign]
    return client


def _text(client: Client, height: int | None = None) -> str:
    """``danlu top``'s frame of :data:`SHOWN` jobs, as text (``height``: a live view's)."""
    console = Console(width=300, height=height or 25, record=True, file=io.StringIO())
    console.print(top.frame(client, max_jobs=SHOWN, width=300, height=height))
    return console.export_text()


def _shown(text: str, ids: list[str]) -> list[str]:
    """The ``ids`` a frame's text shows (by their first 8 characters), in its order."""
    found = [(text.find(job[:8]), job) for job in ids if job[:8] in text]
    return [job for _, job in sorted(found)]


def test_top_reads_the_head_of_a_long_queue_and_counts_it_exactly(queue: list[str]) -> None:
    sent: list[tuple[dict[str, Any], int]] = []
    text = _text(_client(sent))
    assert f"PENDING {QUEUED}, RUNNING {RUNNING}" in text, text
    assert f"active jobs ({RUNNING + QUEUED}), first {SHOWN}" in text, text
    assert _shown(text, queue) == queue[: SHOWN - RUNNING]  # the urgent one, then the oldest
    # the active jobs read: the running ones and the head of the queue, no more
    active = [(params, n) for params, n in sent if params.get("state")]
    assert sum(n for _, n in active) <= SHOWN, sent
    # the running jobs, the queue's head, a count of each ended state (no newest jobs read)
    assert len(sent) <= 2 + len(top.ENDED), sent
    live = _text(_client([]), height=14)  # a live view too short for every row
    assert f"{RUNNING} of {RUNNING} holding GPUs" in live and f"of {QUEUED} pending" in live


def test_top_reads_a_server_older_than_order_queue_as_before(queue: list[str]) -> None:
    sent: list[tuple[dict[str, Any], int]] = []
    text = _text(_client(sent, older=True))
    assert any("order" not in p and "PENDING" in (p.get("state") or []) for p, _ in sent)
    assert f"PENDING {QUEUED}, RUNNING {RUNNING}" in text, text
    assert f"active jobs ({RUNNING + QUEUED}), first {SHOWN}" in text, text
    assert _shown(text, queue) == queue[: SHOWN - RUNNING]
