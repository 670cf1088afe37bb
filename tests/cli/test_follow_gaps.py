"""``danlu events -f`` and ``danlu metrics -f`` against rows that commit out of id order.

On PostgreSQL a row's id comes from a sequence when it is inserted, not when its transaction
commits: id 4 can be visible before id 3 is. A follower that asks for ``id > highest seen``
would never print 3. The fake server here holds rows with the time (on a fake clock that the
followers' ``time.sleep`` advances) from which each is visible, and answers like the real one
(``GET /events``, ``GET /jobs/{id}`` and ``GET /jobs/{id}/metrics`` with its cursor header).
"""

from __future__ import annotations

import time as real_time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_fake_api import TOKEN, metrics_and_events_app
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli.follow import GapCursor, read_pages
from danlu.client import Client

T0 = 1_796_131_413.0
JOB = "c92ba5c9bb8a"
GRACE = 10.0
"""The longest a danlu transaction may take, as the followers allow for it."""


class FakeTime:
    """The ``time`` module as the CLI modules see it, with a fake clock: ``sleep`` advances
    ``now`` instead of waiting; ``monotonic`` reads it; ``stop_at``: a ``sleep`` that would
    pass it raises KeyboardInterrupt (the user's Ctrl-C)."""

    def __init__(self, stop_at: float) -> None:
        self.now = 0.0
        self.stop_at = stop_at

    def sleep(self, seconds: float) -> None:
        if self.now + seconds > self.stop_at:
            raise KeyboardInterrupt
        self.now += seconds

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


class LateCommits:
    """Events and one job's metric records, each with the fake time it commits at."""

    def __init__(self, clock: FakeTime, finished_at: float = float("inf")) -> None:
        self.clock = clock
        self.finished_at = finished_at
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.metrics: list[tuple[float, int, dict[str, Any]]] = []
        self.asked: list[tuple[float, str, int | None]] = []
        """(fake time, path, after_id) of every read."""

    def event(self, event_id: int, commits_at: float = 0.0) -> None:
        body = {
            "id": event_id,
            "job_id": JOB,
            "time": T0 + event_id,
            "old": "PENDING",
            "new": "RUNNING",
            "reason": f"event {event_id}",
            "job_name": "train",
            "user": "alice",
            "project": "research",
        }
        self.events.append((commits_at, body))

    def metric(self, record_id: int, commits_at: float = 0.0) -> None:
        record = {"step": record_id, "time": T0 + record_id, "loss": 1.0 / record_id}
        self.metrics.append((commits_at, record_id, record))

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.headers.get("authorization") == f"Bearer {TOKEN}"
        path = request.url.path.removeprefix("/api/v1")
        params = request.url.params
        after = int(params["after_id"]) if "after_id" in params else None
        self.asked.append((self.clock.now, path, after))
        limit = int(params.get("limit", 100))
        tail = params.get("tail") == "true"
        if path == "/events":
            seen = sorted(
                (b for at, b in self.events if at <= self.clock.now and b["id"] > (after or 0)),
                key=lambda b: int(b["id"]),
            )
            return httpx.Response(200, json=seen[-limit:] if tail else seen[:limit])
        if path == f"/jobs/{JOB}":
            state = "SUCCEEDED" if self.clock.now >= self.finished_at else "RUNNING"
            return httpx.Response(200, json={"id": JOB, "state": state})
        if path == f"/jobs/{JOB}/metrics":
            stored = sorted((i, r) for at, i, r in self.metrics if at <= self.clock.now)
            if after is None:  # by step (here: the same order), the cursor: the newest id
                rows = stored[-limit:] if tail else stored[:limit]
                cursor = max((i for i, _ in stored), default=0)
            else:  # by arrival after the cursor; the cursor: the last id returned
                rows = [(i, r) for i, r in stored if i > after][:limit]
                cursor = rows[-1][0] if rows else after
            headers = {"X-Danlu-Metrics-Cursor": str(cursor)}
            return httpx.Response(200, json=[r for _, r in rows], headers=headers)
        return httpx.Response(404, json={"error": {"type": "http", "message": path}})


APP = metrics_and_events_app()


def serve(monkeypatch: pytest.MonkeyPatch, stop_at: float, finished_at: float) -> LateCommits:
    clock = FakeTime(stop_at)
    server = LateCommits(clock, finished_at)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(server.handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(events_cli, "time", clock)
    monkeypatch.setattr(metrics_cli, "time", clock)
    return server


def printed_events(output: str) -> list[int]:
    """The ids of the events printed, in order (each line ends ``: event N``)."""
    return [int(line.rsplit(" ", 1)[1]) for line in output.splitlines() if ": event " in line]


def printed_steps(output: str) -> list[int]:
    """The steps of the metric records printed, in order."""
    return [int(line.split()[1]) for line in output.splitlines() if line.startswith("step ")]


def test_events_follow_prints_an_event_that_commits_after_a_higher_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(monkeypatch, stop_at=30.0, finished_at=float("inf"))
    for event_id in (1, 2, 4):
        server.event(event_id)
    server.event(3, commits_at=2.5)  # inserted before 4, committed after it
    server.event(5, commits_at=4.5)
    server.event(6, commits_at=4.5)
    server.event(8, commits_at=6.5)
    server.event(7, commits_at=8.5)  # a late one in the middle of the stream too
    result = CliRunner().invoke(APP, ["events", "-f"])
    assert result.exit_code == 130, result.output
    assert printed_events(result.stdout) == [1, 2, 4, 3, 5, 6, 8, 7]


def test_events_follow_moves_past_a_hole_that_never_fills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(monkeypatch, stop_at=40.0, finished_at=float("inf"))
    for event_id in (1, 2, 4):
        server.event(event_id)  # 3: a rolled-back insert, never committed
    server.event(5, commits_at=3.5)
    server.event(6, commits_at=20.5)  # well past the grace
    result = CliRunner().invoke(APP, ["events", "-f"])
    assert result.exit_code == 130, result.output
    assert printed_events(result.stdout) == [1, 2, 4, 5, 6]
    late = [after for at, path, after in server.asked if path == "/events" and at >= GRACE + 3]
    assert late and all(after is not None and after >= 4 for after in late), server.asked


def test_metrics_follow_prints_a_record_that_commits_after_a_higher_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(monkeypatch, stop_at=100.0, finished_at=30.0)
    server.metric(1)
    server.metric(2, commits_at=1.5)
    server.metric(4, commits_at=1.5)
    server.metric(3, commits_at=3.5)  # inserted before 4, committed after it
    server.metric(5, commits_at=5.0)
    server.metric(7, commits_at=20.0)
    server.metric(6, commits_at=25.0)
    result = CliRunner().invoke(APP, ["metrics", JOB, "-f"])
    assert result.exit_code == 0, result.output
    assert printed_steps(result.stdout) == [1, 2, 4, 3, 5, 7, 6]


def test_metrics_follow_moves_past_a_hole_that_never_fills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(monkeypatch, stop_at=100.0, finished_at=40.0)
    server.metric(1)
    server.metric(2, commits_at=1.5)
    server.metric(4, commits_at=1.5)  # 3: never committed
    server.metric(5, commits_at=5.0)
    server.metric(6, commits_at=30.0)
    result = CliRunner().invoke(APP, ["metrics", JOB, "-f"])
    assert result.exit_code == 0, result.output
    assert printed_steps(result.stdout) == [1, 2, 4, 5, 6]
    late = [a for at, path, a in server.asked if path.endswith("/metrics") and at >= GRACE + 4]
    assert late and all(after is not None and after >= 4 for after in late), server.asked


# -- GapCursor and read_pages on their own ---------------------------------------------------


def test_gap_cursor_holds_before_a_hole_until_the_grace_has_passed() -> None:
    clock = FakeTime(stop_at=float("inf"))
    gaps = GapCursor(0, grace=GRACE, clock=clock.monotonic)
    assert [r["id"] for r in gaps.fresh_ids([{"id": 1}, {"id": 2}, {"id": 4}])] == [1, 2, 4]
    assert gaps.after() == 2  # 1 and 2 hide no hole; 3 may still commit
    clock.sleep(GRACE - 1)
    assert gaps.after() == 2
    assert [r["id"] for r in gaps.fresh_ids([{"id": 3}, {"id": 4}])] == [3]
    assert gaps.after() == 4  # the hole filled: no wait for the grace
    assert [r["id"] for r in gaps.fresh_ids([{"id": 6}])] == [6]
    clock.sleep(GRACE - 0.5)
    assert gaps.after() == 4  # 5 is a hole seen 9.5 s ago
    assert gaps.fresh_ids([{"id": 6}, {"id": 7}]) == [{"id": 7}]
    clock.sleep(1)
    assert gaps.after() == 6  # past the grace: 5 will not come


def test_gap_cursor_tells_rows_without_ids_apart_by_content_and_count() -> None:
    clock = FakeTime(stop_at=float("inf"))
    gaps = GapCursor(10, grace=GRACE, clock=clock.monotonic)
    assert gaps.fresh(["a", "a"], 12, str) == ["a", "a"]  # two equal records: both
    clock.sleep(1)
    assert gaps.after() == 10
    assert gaps.fresh(["a", "b", "a"], 13, str) == ["b"]  # b committed late, between them
    clock.sleep(1)
    assert gaps.fresh(["a", "b", "a", "a"], 14, str) == ["a"]  # a third equal one
    clock.sleep(GRACE)
    assert gaps.after() == 14  # read from 14 on: the rows above 10 are forgotten
    assert gaps.fresh(["a"], 15, str) == ["a"]


def test_read_pages_reads_on_while_the_pages_are_full() -> None:
    stored = list(range(1, 2501))
    asked: list[int] = []

    def read(after: int) -> tuple[list[int], int]:
        asked.append(after)
        rows = [i for i in stored if i > after][:1000]
        return rows, rows[-1] if rows else after

    assert read_pages(read, 0) == (stored, 2500)
    assert asked == [0, 1000, 2000]
    assert read_pages(read, 2500) == ([], 2500)
