"""What the simulator's commands say about three mistakes, each naming what was typed and
the fix.

- An ``--option`` a policy refuses is named as typed: ``--option thresholds=[-1]`` was
  shown as ``--option thresholds=(-1,)``, ``placement=true`` as ``placement=True``.
- An infinite number in a workload's column of seconds was told ``must be >= 0, got inf``,
  which it is; the rule now says finite, and the value is quoted as written.
- ``--traces`` one level too high (the folder holding ``traces/``) or too low (one
  application's folder) was told ``missing trace file .../traces/placements.csv`` or
  ``holds no application folders``, naming neither the flag nor the folder to give.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError, DataError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sim.elastic import load_profiles
from danlu.sim.openb import OpenbPod, run_allocation_experiment
from danlu.sim.workload import load_workload


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


@pytest.mark.parametrize(
    ("policy", "option", "shown"),
    [
        ("tiresias", "thresholds=[-1]", "--option thresholds=[-1]"),
        ("fifo", "placement=true", "--option placement=true"),
        ("fifo", "placement=null", "--option placement=null"),
        ("fifo", 'placement={"a":1}', '--option placement={"a": 1}'),
    ],
)
def test_a_refused_option_is_shown_as_typed(policy: str, option: str, shown: str) -> None:
    args = ["sim", "run", "--quiet", "--jobs", "5", "--policy", policy, "--option", option]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert squash(f"options ({shown}):") in squash(result.output), result.output


def test_the_python_api_shows_a_list_option_as_json() -> None:
    nodes = [ShareNode("n0", 64000, 262144, 4, "T4")]
    pods = [OpenbPod("p0", ShareRequest(4000, 1024, 1, 500))]
    with pytest.raises(ConfigError, match=r"^options \(--option large_weight=\[1\]\): danlu"):
        run_allocation_experiment(pods, nodes, "danlu", 1.0, [1], {"large_weight": (1,)})


@pytest.mark.parametrize(
    ("cells", "needle"),
    [
        ("0,1,inf", "column 'duration' must be >= 0 and finite, got 'inf'"),
        ("nan,1,10", "column 'submit_time' must be >= 0 and finite, got 'nan'"),
        ("0,1,-5", "column 'duration' must be >= 0 and finite, got '-5'"),
    ],
)
def test_a_number_of_seconds_must_be_finite(tmp_path: Path, cells: str, needle: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(f"name,submit_time,gpus,duration\na,{cells}\n")
    with pytest.raises(DataError) as caught:
        load_workload(path)
    assert needle in str(caught.value)


def application_folder(root: Path) -> Path:
    """``root/traces/cifar10``, with the file that marks an application's measurements (the
    folders are refused before any file is read)."""
    folder = root / "traces" / "cifar10"
    folder.mkdir(parents=True)
    (folder / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n")
    return folder


def test_traces_one_level_too_high_names_the_folder_to_give(tmp_path: Path) -> None:
    application_folder(tmp_path)
    (tmp_path / "workloads").mkdir()
    with pytest.raises(DataError) as caught:
        load_profiles(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"missing trace file {tmp_path / 'traces' / 'placements.csv'}")
    assert f"give --traces {tmp_path / 'traces'}" in message
    assert "(cifar10)" in message


def test_traces_one_level_too_low_names_the_folder_above(tmp_path: Path) -> None:
    folder = application_folder(tmp_path)
    with pytest.raises(DataError) as caught:
        load_profiles(folder)
    assert f"give the folder above it, --traces {tmp_path / 'traces'}" in str(caught.value)


def test_a_folder_that_is_no_application_names_the_flag(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(DataError) as caught:
        load_profiles(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"missing trace file {tmp_path / 'notes' / 'placements.csv'}")
    assert "(--traces)" in message and "placements.csv, scalability.csv" in message
