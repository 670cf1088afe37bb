"""A SIGTERM handler Python cannot give back (installed from C: ``signal.signal`` returns
None for it) does not make :meth:`Preemption.close` raise ``TypeError``: the default action
is restored instead, and a preempted run still exits with 75."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from danlu.train.env import PREEMPTED_EXIT_CODE
from danlu.train.preempt import Preemption


@pytest.fixture
def c_handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SIGTERM's handler as one installed by C code: Python reports it as None."""
    original = signal.getsignal(signal.SIGTERM)
    real = signal.signal
    first = [True]

    def fake(signum: int, handler: Any) -> Any:
        previous = real(signum, handler)
        if signum == signal.SIGTERM and first[0]:
            first[0] = False
            return None
        return previous

    monkeypatch.setattr(signal, "signal", fake)
    try:
        yield
    finally:
        real(signal.SIGTERM, original)


def test_close_restores_the_default_for_a_handler_python_cannot_give_back(
    c_handler: None,
) -> None:
    preemption = Preemption()
    assert signal.getsignal(signal.SIGTERM) == preemption._on_signal
    preemption.close()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    preemption.close()  # idempotent


def test_a_preempted_run_still_exits_75(c_handler: None) -> None:
    """What ``TrainContext._preempt`` does: close, then exit with the re-queue code."""
    preemption = Preemption()
    preemption.request()
    assert preemption.should_stop(1)

    def stop() -> None:
        preemption.close()
        raise SystemExit(preemption.exit_code)

    with pytest.raises(SystemExit) as exited:
        stop()
    assert exited.value.code == PREEMPTED_EXIT_CODE


def test_a_python_handler_is_given_back() -> None:
    original = signal.getsignal(signal.SIGTERM)
    seen: list[int] = []

    def mine(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, mine)
    try:
        preemption = Preemption()
        preemption.close()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, original)


def test_a_python_handler_set_aside_is_warned_of_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The script's own handler is not called while the context is open (it may exit before
    the checkpoint); it was set aside silently, and its clean-up never ran."""
    original = signal.getsignal(signal.SIGTERM)

    def flush_my_logs(signum: int, frame: FrameType | None) -> None:
        return None

    signal.signal(signal.SIGTERM, flush_my_logs)
    try:
        with caplog.at_level("WARNING", logger="danlu.train"):
            outer = Preemption()
            inner = Preemption()  # set aside the outer one's: it passes the signal on
            inner.close()
            outer.close()
    finally:
        signal.signal(signal.SIGTERM, original)
    warnings = [r.getMessage() for r in caplog.records if "SIGTERM's handler" in r.getMessage()]
    assert len(warnings) == 1
    assert "flush_my_logs" in warnings[0] and "finally" in warnings[0]


def test_the_default_handler_set_aside_is_not_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    original = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with caplog.at_level("WARNING", logger="danlu.train"):
            Preemption().close()
    finally:
        signal.signal(signal.SIGTERM, original)
    assert "SIGTERM's handler" not in caplog.text
