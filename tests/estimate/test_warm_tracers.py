"""Trace workers started ahead of need (:class:`WarmTracers`): the same results as a worker
started per trace, a replacement after each trace, a dead waiting worker replaced, nothing
left running after ``close``."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest

from danlu.estimate.memory import TraceRequest, WarmTracers, trace

pytest.importorskip("torch")
REQUEST = TraceRequest("danlu.estimate.zoo:resnet_tiny", (4,))


def _traced(workers: WarmTracers | None = None) -> list[object]:
    """The traces of ``REQUEST`` without their wall-clock ``trace_seconds``."""
    return [dataclasses.replace(t, trace_seconds=0.0) for t in trace(REQUEST, workers=workers)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_warm_worker_traces_what_a_cold_one_does_and_is_replaced() -> None:
    cold = _traced()
    workers = WarmTracers(1)
    try:
        assert workers.waiting() == [] and workers.started == 0  # nothing before a trace
        first = _traced(workers)
        assert workers.started == 2 and workers.warm_takes == 0  # its own, then a spare
        [spare] = workers.waiting()
        second = _traced(workers)
        assert workers.warm_takes == 1 and workers.started == 3
        assert spare not in workers.waiting() and len(workers.waiting()) == 1
        assert first == cold and second == cold
        # a waiting worker that died is not handed out: a fresh one traces instead
        [spare] = workers.waiting()
        os.kill(spare, signal.SIGKILL)
        assert _gone(spare)
        third = _traced(workers)
        assert third == cold and workers.warm_takes == 1 and workers.started == 5
        [last] = workers.waiting()
    finally:
        workers.close()
    assert _gone(last), "close() left a waiting worker running"
    with pytest.raises(RuntimeError, match="closed"):
        workers.take()


def test_no_spares_means_one_worker_per_trace() -> None:
    workers = WarmTracers(0)
    trace(REQUEST, workers=workers)
    assert workers.started == 1 and workers.waiting() == []
    with pytest.raises(ValueError, match="spares"):
        WarmTracers(-1)
