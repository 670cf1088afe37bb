"""``danlu sim plan``: what the README says of its output and its targets.

- ``--json`` writes each project's figures under ``projects`` (README: "and each
  project's under ``projects``"): ``run`` and ``compare`` did, ``plan``'s sizes in ``tried``
  did not, so a plan with quotas could not say how each team fared at each size;
- a target naming a metric as the table heads its column (``p99_wait``: the column ``p99
  wait (s)``) was told "did you mean p99_jct?" or nothing: it names the metric meant;
- a bound with a space (``avg_jct<=1 hour``) was told to write ``METRIC<=BOUND``, which it
  had: it is told what the bound must be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

TRACE = """name,submit_time,gpus,duration,project,time_limit
a1,0,4,3600,nlp,7200
a2,0,2,1800,nlp,
a3,60,1,600,vision,900
a4,120,4,2000,vision,
a5,600,2,5400,speech,3600
"""


def test_each_size_tried_has_its_projects_in_the_json(tmp_path: Path) -> None:
    workload = tmp_path / "mine.csv"
    workload.write_text(TRACE)
    out = tmp_path / "plan.json"
    command = ["sim", "plan", "--workload", str(workload), "--policy", "sjf"]
    targets = ["--target", "avg_jct<=1h", "--max-nodes", "4", "--json", str(out)]
    result = CliRunner().invoke(app, [*command, *targets])
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    assert len(plan["tried"]) >= 2
    for size in plan["tried"]:
        projects = size["projects"]
        assert sorted(projects) == ["nlp", "speech", "vision"], size["nodes"]
        # the counts as whole numbers, as in run's and compare's JSON
        finished = sum(row["jobs"] + row["rejected"] for row in projects.values())
        assert finished == 5 and all(isinstance(row["jobs"], int) for row in projects.values())
        assert sum(row["jobs"] for row in projects.values()) == size["jobs"]
    largest = plan["tried"][-1]
    assert largest["nodes"] == 4 and largest["projects"]["speech"]["jobs"] == 1


@pytest.mark.parametrize(
    ("target", "meant"),
    [
        ("p99_wait<=1h", "p99_queueing_delay"),
        ("avg_wait<=10m", "avg_queueing_delay"),
        ("gpu_util>=0.5", "gpu_utilization"),
        ("avg_jtc<=2h", "avg_jct"),
    ],
)
def test_a_metric_named_as_the_table_heads_it_is_told_the_metric(target: str, meant: str) -> None:
    result = CliRunner().invoke(app, ["sim", "plan", "--jobs", "5", "--target", target])
    assert result.exit_code == 2
    assert f"did you mean {meant}?" in " ".join(result.stderr.split())


def test_a_bound_with_a_space_is_told_what_a_bound_is() -> None:
    result = CliRunner().invoke(app, ["sim", "plan", "--jobs", "5", "--target", "avg_jct<=1 hour"])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "the bound must be a number of seconds or a duration (90m, 2h)" in said
