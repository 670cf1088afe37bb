"""The measurement loaders (``load_placements``, ``load_scalability``) bound each row's
``step_time`` and ``sync_time``: a negative, zero (step time), NaN, infinite or out-of-float-
range time is refused naming the file, the line and the column at fault. The error named
both columns at once (``need step_time > sync_time >= 0``) whichever was wrong, and a NaN
was reported as "expected a number"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.estimate.throughput import StepMeasurement, load_placements, load_scalability

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pollux" / "traces"
APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

HEADERS = {
    "placements.csv": ("placement,local_bsz,step_time,sync_time", "12,8"),
    "scalability.csv": ("num_nodes,num_replicas,local_bsz,step_time,sync_time", "2,3,8"),
}
LOADERS: dict[str, Callable[[Path], list[StepMeasurement]]] = {
    "placements.csv": load_placements,
    "scalability.csv": load_scalability,
}


def load_with(tmp_path: Path, name: str, step: str, sync: str) -> list[StepMeasurement]:
    """Load a file of ``name``'s layout whose second row has these times (line 3)."""
    header, lead = HEADERS[name]
    path = tmp_path / name
    path.write_text(f"{header}\n{lead},0.5,0.1\n{lead},{step},{sync}\n")
    return LOADERS[name](path)


@pytest.mark.parametrize("name", sorted(HEADERS))
@pytest.mark.parametrize(
    ("step", "sync", "column", "wanted"),
    [
        ("-0.5", "0.1", "step_time", "must be seconds > 0"),
        ("0", "0", "step_time", "must be seconds > 0"),
        ("-0", "0", "step_time", "must be seconds > 0"),
        ("0.5", "-0.1", "sync_time", "must be seconds >= 0"),
        ("0.5", "0.5", "sync_time", "must be below step_time"),
        ("0.5", "0.7", "sync_time", "must be below step_time"),
        ("nan", "0.1", "step_time", "expected a finite number"),
        ("inf", "0.1", "step_time", "expected a finite number"),
        ("1e400", "0.1", "step_time", "expected a finite number"),
        ("0.5", "NaN", "sync_time", "expected a finite number"),
        ("0.5", "-inf", "sync_time", "expected a finite number"),
    ],
    ids=[
        "step-negative",
        "step-zero",
        "step-minus-zero",
        "sync-negative",
        "sync-equal-step",
        "sync-above-step",
        "step-nan",
        "step-inf",
        "step-beyond-float",
        "sync-nan",
        "sync-minus-inf",
    ],
)
def test_a_bad_time_is_refused_naming_file_line_and_its_column(
    tmp_path: Path, name: str, step: str, sync: str, column: str, wanted: str
) -> None:
    with pytest.raises(DataError) as info:
        load_with(tmp_path, name, step, sync)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / name}:3: column {column!r}")
    assert wanted in message


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_zero_sync_time_is_kept(tmp_path: Path, name: str) -> None:
    rows = load_with(tmp_path, name, "0.25", "0")
    assert (rows[1].step_time, rows[1].sync_time) == (0.25, 0.0)


@pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")
@pytest.mark.parametrize("app", APPS)
def test_every_shipped_trace_still_loads(app: str) -> None:
    placements = load_placements(TRACES / app / "placements.csv")
    scalability = load_scalability(TRACES / app / "scalability.csv")
    assert placements and scalability
    assert all(0 <= r.sync_time < r.step_time for r in [*placements, *scalability])
