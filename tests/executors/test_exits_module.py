"""Exit classification lives in :mod:`danlu.executors.exits`; every public name of it stays
importable from :mod:`danlu.executors.base` (and the package), as the same object."""

from __future__ import annotations

import pytest

import danlu.executors as executors_package
from danlu.executors import base, exits

EXIT_NAMES = (
    "PREEMPTED_EXIT_CODE",
    "KILLED_EXIT_CODE",
    "SIGNAL_LIMIT",
    "CANNOT_FIT_MARK",
    "WORKER_SIGKILLED",
    "Outcome",
    "StopReason",
    "exit_signal",
    "gang_exit",
    "host_oom",
    "classify_exit",
)


@pytest.mark.parametrize("name", EXIT_NAMES)
def test_exit_names_are_the_same_objects_in_base(name: str) -> None:
    assert getattr(base, name) is getattr(exits, name)


def test_package_exports_the_exit_names_of_exits() -> None:
    for name in ("PREEMPTED_EXIT_CODE", "Outcome", "StopReason", "classify_exit"):
        assert getattr(executors_package, name) is getattr(exits, name), name
    assert base.ExecStatus(base.RunState.EXITED, exit_code=exits.PREEMPTED_EXIT_CODE).checkpointed


def test_classification_reached_through_base_is_unchanged() -> None:
    assert base.classify_exit(0) is exits.Outcome.SUCCEEDED
    assert base.classify_exit(137, "Killed process 4321 (python)") is exits.Outcome.OOM
    assert base.classify_exit(137) is exits.Outcome.FAILED
    assert base.classify_exit(143, stop_reason=base.StopReason.PREEMPT) is base.Outcome.PREEMPTED
    assert base.gang_exit([0, 75, 1]) == 1
    assert base.exit_signal(255) is None
