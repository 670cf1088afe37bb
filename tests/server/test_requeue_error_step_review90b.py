"""A failed re-queue of a job whose launch the node could not make is counted under the
launch step: its error began ``re-queue JOB:``, which
``danlu_reconcile_errors_total`` counted under ``step="other"``, not ``step="launch"``."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.errors import DanluError
from danlu.devices import inventory_from_cluster
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.metrics import ServerMetrics
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs

NOW = 1_000_000.0


def _count(metrics: ServerMetrics, step: str) -> float:
    value = metrics.registry.get_sample_value("danlu_reconcile_errors_total", {"step": step})
    return 0.0 if value is None else value


def test_a_failed_requeue_of_an_unlaunched_job_counts_as_a_launch_error(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = Cluster.homogeneous(1, 1, "H100")
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, {"name": "one", **body}, alice, now=NOW).id
    metrics = ServerMetrics(db, inventory_from_cluster(inventory))
    loop = Reconciler(
        db,
        FakeExecutor(inventory, FakeWorld()),
        load_settings(home=tmp_path),
        metrics=metrics,
        policy=make_policy("fifo"),
    )
    real = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name == job_id:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        real(self, *args, **kwargs)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise DanluError("the store refused it")

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(jobs, "requeue_unlaunched", refused)
    report = loop.run_once(now=NOW + 10)
    assert len(report.errors) == 1 and report.errors[0].startswith(f"launch {job_id}: ")
    assert "the store refused it" in report.errors[0]
    assert _count(metrics, "launch") == 1.0
    assert _count(metrics, "other") == 0.0
    loop.stop()
