"""Gavel's co-location file read by danlu.estimate.colocation: ``json`` reads ``NaN``,
``Infinity`` and ``-Infinity``, which passed the number check and gave NaN (or infinite)
shares; a throughput that is no finite number is a :class:`DataError` naming the file and
the entry. The shipped file, all finite, reads as many pairs as before."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.estimate.colocation import measured_pairs, share_medians

JOB_A = "('ResNet-18 (batch size 32)', 1)"
JOB_B = "('LM (batch size 20)', 1)"
GAVEL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gavel"
SHIPPED_PAIRS = {
    "k80": 589,
    "p100": 656,
    "v100": 636,
    "v100_unconsolidated": 636,
    "p100_unconsolidated": 656,
    "k80_unconsolidated": 589,
}
"""The pairs :func:`measured_pairs` read from the shipped file before the check (per GPU)."""


PLACES = [
    ("pair_first", f"v100.{JOB_A}.{JOB_B}"),
    ("pair_second", f"v100.{JOB_A}.{JOB_B}"),
    ("solo_a", f"v100.{JOB_A}.null"),
    ("solo_b", f"v100.{JOB_B}.null"),
]
"""Where a test puts a bad number, and the entry its error must name."""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "throughputs.json"
    path.write_text(text, encoding="utf-8")
    return path


def _table(solo_a: str, pair_ab: str, solo_b: str = "2.0") -> str:
    """Gavel's layout with the numbers written as JSON text (``NaN`` is no JSON dumps can
    write without ``allow_nan``)."""
    return (
        f'{{"v100": {{"{JOB_A}": {{"null": {solo_a}, "{JOB_B}": {pair_ab}}}, '
        f'"{JOB_B}": {{"null": {solo_b}, "{JOB_A}": [1.5, 6.0]}}}}}}'
    )


@pytest.mark.parametrize(
    "bad", ["NaN", "Infinity", "-Infinity", pytest.param("1" + "0" * 400, id="1e400-as-int")]
)
@pytest.mark.parametrize(("where", "entry"), PLACES)
def test_a_throughput_that_is_not_finite_is_a_data_error(
    tmp_path: Path, bad: str, where: str, entry: str
) -> None:
    numbers = {"solo_a": "10.0", "solo_b": "2.0", "pair": "[6.0, 1.5]"}
    if where == "pair_first":
        numbers["pair"] = f"[{bad}, 1.5]"
    elif where == "pair_second":
        numbers["pair"] = f"[6.0, {bad}]"
    else:
        numbers[where] = bad
    path = _write(tmp_path, _table(numbers["solo_a"], numbers["pair"], numbers["solo_b"]))
    with pytest.raises(DataError) as err:
        list(measured_pairs(path))
    message = str(err.value)
    assert str(path) in message and entry in message
    assert "finite" in message


def test_a_nan_no_longer_gives_nan_shares(tmp_path: Path) -> None:
    """The medians refuse the file rather than come out NaN."""
    path = _write(tmp_path, _table("10.0", "[NaN, 1.5]"))
    with pytest.raises(DataError, match="finite"):
        share_medians(path)


def test_finite_numbers_still_read(tmp_path: Path) -> None:
    pairs = list(measured_pairs(_write(tmp_path, _table("10.0", "[6.0, 1.5]"))))
    assert [(p.job, p.other) for p in pairs] == [(JOB_A, JOB_B), (JOB_B, JOB_A)]
    assert all(math.isfinite(p.job_share) and math.isfinite(p.other_share) for p in pairs)


def test_the_shipped_file_reads_as_many_pairs_as_before() -> None:
    path = GAVEL / "physical_cluster_throughputs.json"
    if not path.is_file():
        pytest.skip("gavel data not present (../shared/data/gavel)")
    counts = {gpu: len(list(measured_pairs(path, gpu))) for gpu in SHIPPED_PAIRS}
    assert counts == SHIPPED_PAIRS


@pytest.mark.parametrize(("where", "entry"), PLACES)
def test_a_negative_throughput_is_a_data_error_not_a_skipped_pair(
    tmp_path: Path, where: str, entry: str
) -> None:
    """A negative throughput is no measurement (the shipped file has none); it was read
    as a pair without progress and left out of the medians unseen."""
    numbers = {"solo_a": "10.0", "solo_b": "2.0", "pair": "[6.0, 1.5]"}
    if where == "pair_first":
        numbers["pair"] = "[-6.0, 1.5]"
    elif where == "pair_second":
        numbers["pair"] = "[6.0, -1.5]"
    else:
        numbers[where] = "-" + numbers[where]
    path = _write(tmp_path, _table(numbers["solo_a"], numbers["pair"], numbers["solo_b"]))
    with pytest.raises(DataError) as err:
        list(measured_pairs(path))
    message = str(err.value)
    assert str(path) in message and entry in message and "negative" in message


def test_a_zero_throughput_is_still_a_pair_without_progress(tmp_path: Path) -> None:
    """0 is what Gavel writes for a job that made no progress: skipped, as before."""
    path = _write(tmp_path, _table("10.0", "[0.0, 1.5]"))
    pairs = list(measured_pairs(path))
    assert [(p.job, p.other) for p in pairs] == [(JOB_B, JOB_A)]
