"""Fixtures of the memory-estimate tests."""

from __future__ import annotations

import subprocess

import pytest

from danlu.estimate.memory import tracer


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
