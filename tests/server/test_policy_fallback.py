"""A policy that raises does not stop the cluster: the round runs fifo instead, the failure is
logged in full once and counted, and the jobs run. Before, every reconcile pass failed on it
and no job of the cluster started again (as a job with ``max_batch_size: 1073741824`` did to
the danlu and pollux policies)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import live_server, spec

from danlu.core.cluster import Allocation
from danlu.sched.view import ClusterView, Plan, Start
from danlu.server.reconcile import Reconciler


class BrokenPolicy:
    """Raises on every view with a pending job (as a policy would on one bad job)."""

    name = "broken"

    def schedule(self, view: ClusterView) -> Plan:
        if view.pending:
            raise ZeroDivisionError("division by zero")
        return Plan()


def test_a_policy_that_raises_leaves_the_round_to_fifo(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        loop = Reconciler(
            state.db, state.executor, state.settings, policy=BrokenPolicy(), metrics=state.metrics
        )
        ids = [c.post("/jobs", json=spec(n, "pass")).json()["id"] for n in ("poison", "other")]
        with caplog.at_level(logging.WARNING, logger="danlu.server.reconcile"):
            reports = [loop.run_once() for _ in range(3)]
        assert reports[0].errors == [
            "policy broken: ZeroDivisionError: division by zero; this round ran fifo"
        ]
        assert sorted(reports[0].started) == sorted(ids)  # fifo started both
        full = [r for r in caplog.records if r.exc_info is not None]
        assert len(full) == 1 and "policy 'broken'" in full[0].getMessage()
        metrics = state.metrics.exposition().decode()
        assert "danlu_policy_failures_total 1.0" in metrics
        # once nothing waits, the policy's own plans are used again
        assert any("policy 'broken' works again" in r.getMessage() for r in caplog.records)


class OverAllocatingPolicy:
    """Starts every pending job on GPU 0 of node 0: a plan the store refuses."""

    name = "over"

    def schedule(self, view: ClusterView) -> Plan:
        gpu0 = Allocation.whole_gpus([(0, 0)])
        return Plan(starts=tuple(Start(j.id, gpu0) for j in view.pending))


def test_a_plan_that_does_not_fit_leaves_the_round_to_fifo(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        loop = Reconciler(state.db, state.executor, state.settings, policy=OverAllocatingPolicy())
        ids = [c.post("/jobs", json=spec(n, "pass")).json()["id"] for n in ("a", "b")]
        report = loop.run_once()
        assert len(report.errors) == 1
        assert report.errors[0].startswith("policy over: PlacementError: plan over-allocates")
        assert sorted(report.started) == sorted(ids)  # by fifo, one GPU each
