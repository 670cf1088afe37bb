"""The errors a loop's passes go on from (a job the retention cannot purge, a run that cannot
be polled) are logged, each distinct one once, then at most once per quiet period with how
many times it recurred (:class:`~danlu.server.loops.PassErrors`)."""

from __future__ import annotations

import logging

import pytest

from danlu.core.cluster import Cluster
from danlu.devices import inventory_from_cluster
from danlu.server.db import Database
from danlu.server.loops import PassErrors
from danlu.server.metrics import ServerMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    caplog.clear()
    return lines


def test_a_recurring_error_is_logged_once_then_once_a_period_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    errors = PassErrors(logging.getLogger("danlu.test.pass_errors"), "reconcile", 60.0, clock)
    caplog.set_level(logging.WARNING, logger="danlu.test.pass_errors")
    stuck = "purge j1: [Errno 13] Permission denied: '/home/x/checkpoints/j1/a'"
    errors.note([stuck, "poll j2#0: the node does not answer"])
    assert _said(caplog) == [
        f"reconcile: {stuck}",
        "reconcile: poll j2#0: the node does not answer",
    ]
    for second in (10.0, 20.0, 30.0):
        clock.now = second
        errors.note([stuck])
    assert _said(caplog) == []  # no flood
    clock.now = 61.0
    errors.note([stuck])
    assert _said(caplog) == [f"reconcile: {stuck} (met 4 more times since it was logged)"]
    clock.now = 70.0
    errors.note([stuck])
    assert _said(caplog) == []
    clock.now = 200.0  # the poll error has not been met for a period: forgotten
    errors.note(["poll j2#0: the node does not answer"])
    assert _said(caplog) == ["reconcile: poll j2#0: the node does not answer"]


def test_each_error_is_counted_under_its_step(sqlite_db: Database) -> None:
    server_metrics = ServerMetrics(sqlite_db, inventory_from_cluster(Cluster(())))
    for error in ("poll j1#0: gone", "schedule: boom", "purge j2: busy", "something else", ""):
        server_metrics.count_reconcile_error(error)
    exposed = server_metrics.exposition().decode()
    for step, count in {"poll": 1, "schedule": 1, "purge": 1, "other": 2, "settle": 0}.items():
        assert f'danlu_reconcile_errors_total{{step="{step}"}} {count:.1f}' in exposed


def test_an_upkeep_rules_error_is_counted_under_its_rule(sqlite_db: Database) -> None:
    """A job or sweep row that a rule of the pass's upkeep could not handle (skipped, the pass
    going on) is counted under that rule's name, not ``other``."""
    server_metrics = ServerMetrics(sqlite_db, inventory_from_cluster(Cluster(())))
    for error in ("expire j1: ValueError: x", "dependencies j2: KeyError: y", "sweep s1: z"):
        server_metrics.count_reconcile_error(error)
    exposed = server_metrics.exposition().decode()
    for step, count in {"expire": 1, "dependencies": 1, "sweep": 1, "other": 0}.items():
        assert f'danlu_reconcile_errors_total{{step="{step}"}} {count:.1f}' in exposed
