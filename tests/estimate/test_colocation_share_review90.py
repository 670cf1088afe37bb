"""Gavel's co-location file: a job's share (its throughput beside another over its
throughput alone) that no measurement can give, an infinite one above all (a throughput
of 1e308 beside one alone of 1e-10), was yielded as is, and the sharing rule's calibration
(``danlu_share.calibrate``) answered an infinite median gain. Such an entry is a
:class:`DataError` naming it; the shipped file reads as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.estimate.colocation import measured_pairs
from danlu.sched.policies.danlu_share import calibrate

JOB_A = "('ResNet-18 (batch size 32)', 1)"
JOB_B = "('LM (batch size 20)', 1)"
MAX_SHARE = 1000.0
"""danlu.estimate.colocation.MAX_SHARE."""
GAVEL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gavel"


def _write(tmp_path: Path, solo_a: float, pair_ab: list[float]) -> Path:
    path = tmp_path / "throughputs.json"
    table = {
        "v100": {
            JOB_A: {"null": solo_a, JOB_B: pair_ab},
            JOB_B: {"null": 2.0, JOB_A: [1.5, 0.5]},
        }
    }
    path.write_text(json.dumps(table), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("solo_a", "pair_ab"),
    [(1e-10, [1e308, 1.0]), (1e-300, [1e10, 1.0]), (1.0, [1e300, 1e300]), (0.001, [5.0, 1.0])],
)
def test_a_share_past_the_bound_is_refused_naming_the_entry(
    tmp_path: Path, solo_a: float, pair_ab: list[float]
) -> None:
    path = _write(tmp_path, solo_a, pair_ab)
    with pytest.raises(DataError) as info:
        list(measured_pairs(path))
    assert f"v100.{JOB_A}.{JOB_B}" in str(info.value)
    assert "fix or remove the entry" in str(info.value)
    with pytest.raises(DataError):
        calibrate(path)


def test_a_share_at_the_bound_and_gavel_s_noise_are_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, 1.0, [MAX_SHARE, 1.0])
    pairs = list(measured_pairs(path))
    assert [p.job_share for p in pairs] == [MAX_SHARE, 0.75]
    path = _write(tmp_path, 4.0, [4.1, 1.0])  # a job no slower, within noise
    assert next(iter(measured_pairs(path))).job_share == pytest.approx(1.025)


@pytest.mark.skipif(not GAVEL.is_dir(), reason="Gavel's file not here")
def test_the_shipped_file_still_reads() -> None:
    path = GAVEL / "physical_cluster_throughputs.json"
    for gpu in ("v100", "p100", "k80"):
        pairs = list(measured_pairs(path, gpu))
        assert pairs
        assert max(max(p.job_share, p.other_share) for p in pairs) < 2
