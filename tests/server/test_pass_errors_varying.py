"""An error a pass meets again with other numbers in its text (an outage's "not answered for
37 s", growing every pass) is the same error: logged once, then counted
(:class:`~danlu.server.loops.PassErrors`), each job's apart."""

from __future__ import annotations

import logging

import pytest

from danlu.server.loops import PassErrors


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    caplog.clear()
    return lines


def _outage(job: str, seconds: float) -> str:
    return (
        f"poll {job}#1: cannot poll its actors: Ray's GCS has not answered (to list Ray's "
        f"actors) for {seconds:.0f} s; is the Ray head up?"
    )


def test_an_error_whose_numbers_change_every_pass_is_logged_once_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    logger = logging.getLogger("danlu.test.pass_errors_varying")
    errors = PassErrors(logger, "reconcile", 60.0, clock)
    caplog.set_level(logging.WARNING, logger=logger.name)
    errors.note([_outage("j1", 25), _outage("j2", 25)])
    assert _warnings(caplog) == [
        f"reconcile: {_outage('j1', 25)}",
        f"reconcile: {_outage('j2', 25)}",
    ]
    for second in range(2, 60, 2):  # a pass every 2 s: the outage's age grows
        clock.now = float(second)
        errors.note([_outage("j1", 25 + second), _outage("j2", 25 + second)])
    assert _warnings(caplog) == []  # one line per job, not one per job a pass
    clock.now = 61.0
    errors.note([_outage("j1", 86)])
    assert _warnings(caplog) == [
        f"reconcile: {_outage('j1', 86)} (met 30 more times since it was logged)"
    ]
    errors.note(["poll j3#1: cannot poll its actors: the node is gone"])  # another job: its own
    assert _warnings(caplog) == ["reconcile: poll j3#1: cannot poll its actors: the node is gone"]


def test_errors_of_an_outage_are_not_kept_one_per_pass() -> None:
    clock = Clock()
    errors = PassErrors(logging.getLogger("danlu.test.pass_errors_varying"), "r", 3600.0, clock)
    for second in range(0, 2000, 2):
        clock.now = float(second)
        errors.note([_outage(f"j{n}", 25 + second) for n in range(5)])
    assert len(errors._recurring) == 5
