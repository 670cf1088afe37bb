"""A workload header with the required columns of two formats is refused, naming both: it was
read as the first of them, silently ignoring the columns the user may have meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim.workload import detect_format, load_workload


def test_a_header_of_two_formats_is_refused_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "both.csv"
    path.write_text(
        "name,time,application,num_replicas,batch_size,submit_time,gpus,duration\n"
        "j1,0,cifar10,1,128,600,2,3600\n"
    )
    with pytest.raises(DataError, match=r"both\.csv, line 1: the columns fit several") as info:
        load_workload(path)
    assert "pollux, danlu" in str(info.value)


def test_one_format_headers_are_read_as_before() -> None:
    assert detect_format(["name", "submit_time", "gpus", "duration", "priority"]) == "danlu"
    assert detect_format(["timestamp", "duration", "num_gpus", "name"]) == "philly"
    with pytest.raises(DataError, match="unrecognised workload columns"):
        detect_format(["a", "b"])
