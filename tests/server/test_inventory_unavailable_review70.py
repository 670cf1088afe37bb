"""While the executor's backend cannot be asked (the Ray head's GCS unreachable), each
inventory refresh failed with an :class:`ExecutorUnavailableError` whose text changes every
time ("has not answered for 25 s", "... 30 s"), and each was logged as a new failure, with a
full traceback. An expected outage is one line, no traceback, repeated at most once a minute
(of the loop's clock) with a count, and one line when it ends."""

from __future__ import annotations

import logging

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import ExecutorUnavailableError, FakeExecutor, FakeWorld
from danlu.server.db import Database
from danlu.server.inventory import InventoryRefresh

NOW = 1_000_000.0
EVERY = 5.0


class _Outage(FakeExecutor):
    """A fake executor whose backend is down while ``down`` is set, its error's text counting
    the seconds since it went."""

    down = True
    since = NOW
    t = NOW
    """The loop's clock, as the test sets it."""

    def refresh_inventory(self) -> Cluster:
        if self.down:
            raise ExecutorUnavailableError(
                f"cannot read Ray's nodes: Ray's GCS has not answered for {self.t - self.since:.0f}"
                " s; is the Ray head up?"
            )
        return super().refresh_inventory()


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "danlu.server.inventory"]


def test_an_unavailable_backend_is_one_line_without_traceback_then_a_count_a_minute(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        user_and_nodes(s, cluster.nodes, NOW)
    executor = _Outage(cluster, FakeWorld())
    refresh = InventoryRefresh(db, executor, EVERY)
    refresh.run(NOW)  # starts the clock
    caplog.set_level(logging.INFO, logger="danlu.server.inventory")
    for i in range(1, 13):  # a minute of passes, EVERY s apart
        executor.t = NOW + i * EVERY
        assert refresh.run(executor.t) is None
    first, *rest = _records(caplog)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert "cannot read the executor's nodes" in first.getMessage()
    assert "GCS has not answered for 5 s" in first.getMessage()
    assert rest == []  # not once per pass
    executor.t = NOW + 13 * EVERY  # a minute after the first line
    refresh.run(executor.t)
    (again,) = _records(caplog)[1:]
    assert again.exc_info is None and "12 more times" in again.getMessage()
    assert "GCS has not answered for 65 s" in again.getMessage()
    executor.down = False
    executor.t = NOW + 14 * EVERY
    refresh.run(executor.t)
    (back,) = _records(caplog)[2:]
    assert back.exc_info is None and "works again" in back.getMessage()
    assert "13 failures" in back.getMessage()
