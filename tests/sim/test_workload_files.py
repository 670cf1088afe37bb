"""Workload files as people write them: Philly dates whatever the machine's time zone,
headers with spaces after the commas, and UTF-8 with a byte-order mark."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.workload import load_workload

PACIFIC = "PST8PDT,M3.2.0,M11.1.0"
"""US Pacific time as a POSIX rule (no time-zone database needed): daylight-saving time
ended on 2017-11-05, inside the Philly trace."""

BOM = "\ufeff"


@pytest.fixture
def pacific_time() -> Iterator[None]:
    """The process's local time zone is US Pacific for one test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = PACIFIC
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def _submits(path: Path) -> dict[str, float]:
    return {job.request.id: job.request.submit_time for job in load_workload(path).jobs}


@pytest.mark.usefixtures("pacific_time")
def test_philly_dates_are_utc_whatever_the_local_time_zone(tmp_path: Path) -> None:
    """Two submissions a day apart across the end of daylight-saving time are 86,400 s
    apart, not 90,000 s as when the dates were read as local time."""
    assert time.localtime(1509796800).tm_isdst == 1  # in effect: summer time on 2017-11-04
    philly = tmp_path / "philly.csv"
    philly.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-11-04 12:00:00,100.0,1,100.0,a\n"
        "2017-11-05 12:00:00,100.0,1,100.0,a\n"
    )
    assert _submits(philly) == {"philly-0": 0.0, "philly-1": 86400.0}


@pytest.mark.usefixtures("pacific_time")
def test_philly_dates_with_an_offset_keep_it(tmp_path: Path) -> None:
    philly = tmp_path / "philly.csv"
    philly.write_text(
        "timestamp,duration,num_gpus\n"
        "2017-11-04T12:00:00+00:00,100.0,1\n"
        "2017-11-04T15:00:00+02:00,100.0,1\n"  # 13:00 UTC
        "2017-11-04 12:30:00,100.0,1\n"  # UTC
    )
    assert _submits(philly) == {"philly-0": 0.0, "philly-1": 3600.0, "philly-2": 1800.0}


def test_spaces_after_the_header_commas_are_ignored(tmp_path: Path) -> None:
    """``name, submit_time, gpus, duration`` is the danlu format, its fields read as
    without the spaces (an empty optional column stays empty)."""
    plain = tmp_path / "spaced.csv"
    plain.write_text(
        "name, submit_time, gpus, duration, time_limit, project\n"
        "a, 0, 1, 600, , vision\n"
        "b, 30, 2, 60, 90, \n"
    )
    jobs = {job.request.id: job for job in load_workload(plain).jobs}
    assert set(jobs) == {"a", "b"}
    assert jobs["a"].work.duration == 600.0 and jobs["a"].time_limit is None
    assert jobs["a"].request.project == "vision" and jobs["b"].request.project == "default"
    assert jobs["b"].request.gpus == 2 and jobs["b"].time_limit == 90.0
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp, duration, num_gpus\n2017-10-09 07:01:55, 66.0, 1\n")
    (job,) = load_workload(philly).jobs
    assert job.work.duration == 66.0 and job.request.gpus == 1


def test_utf8_files_with_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    workload = tmp_path / "bom.csv"
    workload.write_text(BOM + "name,submit_time,gpus,duration\na,0,1,600\n", encoding="utf-8")
    loaded = load_workload(workload)
    assert loaded.format == "danlu" and [j.request.id for j in loaded.jobs] == ["a"]
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(BOM + "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    assert [n.name for n in load_nodes(nodes)] == ["n0"]
    pods = tmp_path / "pods.csv"
    pods.write_text(BOM + "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,2,1,1000\n")
    assert [p.name for p in load_pods(pods)] == ["p"]
