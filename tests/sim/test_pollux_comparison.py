"""The per-application comparison of ``benchmarks/danlu_pollux.py --pollux-results``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

Load = Callable[[str], ModuleType]


def test_each_application_gets_its_means_and_its_share_of_the_difference(
    load_benchmark: Load,
) -> None:
    ours = {"cifar10-0": 100.0, "cifar10-3": 300.0, "yolov3-1": 1000.0, "ncf-2": 50.0}
    theirs = {"cifar10-0": 200.0, "cifar10-3": 400.0, "yolov3-1": 800.0, "ncf-2": 50.0}
    line = load_benchmark("danlu_pollux").per_application(ours, theirs)
    # 4 jobs: cifar10 is 200 s behind in sum (-50 per job), yolov3 200 s ahead (+50)
    assert "cifar10 2: 200/300 (-50)" in line
    assert "yolov3 1: 1000/800 (+50)" in line
    assert "ncf 1: 50/50 (+0)" in line
    shares = [int(part.split("(")[1].rstrip(")")) for part in line.split("  ") if "(" in part]
    mean_ours = sum(ours.values()) / len(ours)
    mean_theirs = sum(theirs.values()) / len(theirs)
    assert sum(shares) == pytest.approx(mean_ours - mean_theirs)


def test_runs_with_different_jobs_are_refused(load_benchmark: Load) -> None:
    with pytest.raises(SystemExit, match="only one of the runs"):
        load_benchmark("danlu_pollux").per_application({"bert-1": 1.0}, {"bert-2": 1.0})
