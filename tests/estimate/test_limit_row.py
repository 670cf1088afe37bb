"""The table's ``limit (--gpu-memory)`` row shows the ``--gpu-memory`` the verdicts are
judged against, and only then: a ``--gpu-memory`` above the GPU's capacity is capped there
(``limit_source`` ``capacity``), and the row showed the capacity labelled as the flag's
value, beside a verdict "within 79.2GiB (capacity)"."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("gpu_memory", "row", "verdict"),
    [
        ("200GiB", None, "within 79.2GiB (capacity) on h100"),
        ("1GiB", "limit (--gpu-memory) 1073741824 1.0GiB", "within 1.0GiB (--gpu-memory) on h100"),
    ],
)
def test_the_limit_row_is_the_flag_s_value_only_when_it_is_the_limit(
    gpu_memory: str, row: str | None, verdict: str
) -> None:
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "2", "--gpu-memory", gpu_memory]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = [" ".join(line.replace("│", " ").split()) for line in res.stdout.splitlines()]
    limit_rows = [line for line in lines if line.startswith("limit (")]
    assert limit_rows == ([row] if row else [])
    assert any(verdict in line for line in lines)
