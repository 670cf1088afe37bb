"""``danlu sim``'s refusals of a misspelt policy or placement name and of a seed range
written backwards: the policy errors name the closest valid name (did you mean ...?), and
``--seeds 51-42`` says that the range counts down and how to write it, instead of calling
it no seed list. Both are refused before anything is read or simulated (exit 2)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

MISSPELT = [
    (["run", "--quiet", "--policy", "tiresas"], "did you mean tiresias?"),
    (["compare", "--quiet", "--policies", "fifo,tiresas"], "did you mean tiresias?"),
    (["plan", "--target", "avg_jct<=2h", "--policy", "tiresas"], "did you mean tiresias?"),
    (["pack", "--pods", "p.csv", "--nodes", "n.csv", "--policy", "fgdd"], "did you mean fgd?"),
]


@pytest.mark.parametrize(("command", "hint"), MISSPELT, ids=[c[0][0] for c in MISSPELT])
def test_a_misspelt_name_is_refused_with_the_closest_one(command: list[str], hint: str) -> None:
    result = CliRunner().invoke(app, ["sim", *command])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert hint in said, said
    assert "valid:" in said, said


def test_a_name_like_none_is_refused_without_a_guess() -> None:
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--policy", "zzz"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "unknown policy 'zzz'" in said and "did you mean" not in said, said


@pytest.mark.parametrize("seeds", ["51-42", "1,51-42"])
def test_a_seed_range_counting_down_is_named_so(seeds: str) -> None:
    result = CliRunner().invoke(
        app, ["sim", "pack", "--pods", "p.csv", "--nodes", "n.csv", "--seeds", seeds]
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "51-42 counts down; write 42-51" in said, said
