"""Fixtures of the memory-estimate tests."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable

import pytest

from danlu.estimate.memory import tracer
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest


@pytest.fixture
def started_workers(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[str]]:
    """The trace workers started while the test runs, in order (each still the real one)."""
    started: list[subprocess.Popen[str]] = []
    real = tracer._start_worker

    def recorded() -> tracer.Worker:
        worker = real()
        started.append(worker[0])
        return worker

    monkeypatch.setattr(tracer, "_start_worker", recorded)
    return started


@pytest.fixture
def trace_in_process() -> Callable[[TraceRequest], list[StepTrace]]:
    """Traces a request in this process, as the tracer subprocess traces it (no start-up of
    a worker): its :class:`StepTrace` per batch size; a :class:`SpecError` the worker would
    report is raised."""
    from danlu.estimate.memory import trace_worker

    def run(req: TraceRequest) -> list[StepTrace]:
        out = io.StringIO()
        trace_worker.run(req, out)
        last = json.loads(out.getvalue().splitlines()[-1])
        assert "result" in last, last
        return [StepTrace.from_json(r) for r in last["result"]]

    return run
