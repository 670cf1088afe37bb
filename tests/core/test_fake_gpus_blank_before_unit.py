"""A byte size with a blank between its number and its unit (``80 GiB``) is a size in a job
spec (:func:`~danlu.core.units.parse_bytes`), but ``--fake-gpus "4x80 GiB"`` was refused as
"not COUNTxSIZE": the fake inventory's sizes are now read as every other size is."""

from __future__ import annotations

import pytest

from danlu.core.errors import ConfigError
from danlu.core.fake_gpus import parse_fake_gpus
from danlu.core.units import parse_bytes


@pytest.mark.parametrize(
    ("text", "written_together", "first_size"),
    [
        ("4x80 GiB", "4x80GiB", "80 GiB"),
        ("4 x 80 GiB", "4x80GiB", "80GiB"),
        ("2x40 GiB:A100", "2x40GiB:A100", "40GiB"),
        ("2x1.5 TB,1x80\tGiB", "2x1.5TB,1x80GiB", "1.5TB"),
    ],
)
def test_a_blank_between_number_and_unit_reads_as_without(
    text: str, written_together: str, first_size: str
) -> None:
    assert parse_fake_gpus(text) == parse_fake_gpus(written_together)
    assert parse_fake_gpus(text)[0].gpu_type.memory == parse_bytes(first_size)


@pytest.mark.parametrize("text", ["4x80 Gi B", "4x80 GiB H100", "4xH 100", "4x80 80GiB"])
def test_other_blanks_inside_a_group_are_still_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--fake-gpus"):
        parse_fake_gpus(text)
