"""An ``--option KEY=VALUE`` that a scorer (``sim pack``) or a policy (``sim
run``/``plan``) refuses is named as the option given, not only as the parameter behind it.

``danlu sim pack --policy danlu --option fgd-weight=-1`` said ``danlu scorer: fgd_weight
must be finite and >= 0, got -1``, which names neither the flag nor what was typed; so did
``sim run --option colour=1`` (``policy 'danlu' has no option 'colour'``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sim.openb import OpenbPod, run_allocation_experiment, run_seed

NODES = [ShareNode("n0", 64000, 262144, 4, "T4"), ShareNode("n1", 64000, 262144, 2, "T4")]
PODS = [
    OpenbPod("p0", ShareRequest(4000, 1024, 1, 500)),
    OpenbPod("p1", ShareRequest(8000, 2048, 2, 1000)),
]


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def pack_args(tmp_path: Path) -> list[str]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,1024,1,500\np1,8000,2048,2,1000\n"
    )
    return ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (
            ["--policy", "danlu", "--option", "fgd-weight=-1"],
            ["options (--option fgd_weight=-1)", "fgd_weight must be finite and >= 0"],
        ),
        (
            ["--policy", "danlu", "--option", "large_weight=0", "--option", "scarcity_weight=x"],
            ["options (--option scarcity_weight=x)", "scarcity_weight must be a number"],
        ),
        (
            ["--policy", "danlu", "--option", "colour=1"],
            ["options (--option colour=1)", "unknown option 'colour'"],
        ),
        (
            ["--policy", "fgd", "--option", "large_weight=0"],
            ["options (--option large_weight=0)", "fgd scorer takes no options"],
        ),
    ],
)
def test_sim_pack_names_the_option_a_scorer_refuses(
    tmp_path: Path, extra: list[str], needles: list[str]
) -> None:
    result = CliRunner().invoke(app, [*pack_args(tmp_path), *extra])
    assert result.exit_code == 2, result.output
    for needle in needles:
        assert squash(needle) in squash(result.output), result.output


@pytest.mark.parametrize(
    ("command", "option", "needle"),
    [
        (["run", "--quiet"], "colour=1", "policy 'danlu' has no option 'colour'"),
        (["run", "--quiet"], "restart_cost=abc", "'restart_cost' must be a number"),
        (["plan", "--target", "avg_jct<=2h", "--max-nodes", "2"], "colour=1", "'colour'"),
    ],
)
def test_sim_run_and_plan_name_the_option_a_policy_refuses(
    command: list[str], option: str, needle: str
) -> None:
    args = ["sim", *command, "--policy", "danlu", "--jobs", "5", "--option", option]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert squash(f"options (--option {option})") in squash(result.output), result.output
    assert squash(needle) in squash(result.output), result.output


def test_the_python_api_names_the_option_too() -> None:
    with pytest.raises(ConfigError, match=r"^options \(--option large_weight=-1\): danlu"):
        run_allocation_experiment(PODS, NODES, "danlu", 1.0, [1], {"large_weight": -1})
    with pytest.raises(ConfigError, match=r"^options \(--option reserve_weight=nan\): danlu"):
        run_seed(PODS, NODES, "danlu", 1.0, 1, {"reserve_weight": float("nan")})


def test_an_unknown_scorer_is_not_blamed_on_the_options() -> None:
    with pytest.raises(UnknownNameError) as caught:
        run_allocation_experiment(PODS, NODES, "nope", 1.0, [1], {"large_weight": 0})
    assert "--option" not in str(caught.value)


def test_valid_options_still_run() -> None:
    result = run_allocation_experiment(PODS, NODES, "danlu", 1.0, [1], {"large_weight": 0})
    assert result.options == {"large_weight": 0}
    assert 0 < result.allocation_ratio <= 100
