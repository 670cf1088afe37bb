"""A policy that raises does not stop the cluster: the round runs fifo instead, the failure is
logged in full once and counted, and the jobs run. Before, every reconcile pass failed on it
and no job of the cluster started again (as a job with ``max_batch_size: 1073741824`` did to
the danlu and pollux policies)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec
from sqlalchemy import event
from sqlalchemy.orm import Session

from danlu.core.cluster import Allocation
from danlu.sched.view import ClusterView, Plan, Start
from danlu.server import reconcile
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


def test_works_again_is_logged_once_the_policys_plan_is_committed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, "works again" was logged before the round's transaction committed."""
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        loop = Reconciler(state.db, state.executor, state.settings, policy=BrokenPolicy())
        c.post("/jobs", json=spec("poison", "pass"))
        real_apply = reconcile.apply_plan

        def apply_then_fail_commit(session: Session, *args: Any) -> Any:
            def refuse(_session: Session) -> None:
                raise RuntimeError("the disk went away")

            event.listen(session, "before_commit", refuse)
            return real_apply(session, *args)

        with caplog.at_level(logging.WARNING, logger="danlu.server.reconcile"):
            assert loop.run_once().errors  # fifo ran this round: the policy is failing
            monkeypatch.setattr(reconcile, "apply_plan", apply_then_fail_commit)
            with pytest.raises(RuntimeError, match="disk went away"):
                loop.run_once()  # the policy planned (nothing pending), the commit failed
            assert not any("works again" in r.getMessage() for r in caplog.records)
            monkeypatch.setattr(reconcile, "apply_plan", real_apply)
            loop.run_once()
        assert [r.getMessage() for r in caplog.records if "works again" in r.getMessage()] == [
            "policy 'broken' works again (after: ZeroDivisionError: division by zero)"
        ]


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
