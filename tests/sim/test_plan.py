"""Capacity planning (``danlu sim plan``): targets parsed with clear errors, the bisection
over cluster sizes, and the command on a synthetic workload."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError
from danlu.sim.plan import Target, parse_target, plan_capacity


def test_targets_parse_durations_for_times_and_numbers_otherwise() -> None:
    assert parse_target("avg_jct<=2h") == Target("avg_jct", "<=", 7200.0)
    assert parse_target(" p99_queueing_delay <= 600 ") == Target("p99_queueing_delay", "<=", 600)
    assert parse_target("gpu_utilization>=0.5") == Target("gpu_utilization", ">=", 0.5)
    assert str(parse_target("avg_jct<=90m")) == "avg_jct<=1h30m"
    target = parse_target("gpu_utilization>=0.5")
    assert target.met({"gpu_utilization": 0.5}) and not target.met({"gpu_utilization": 0.49})
    assert not target.met({}) and not target.met({"gpu_utilization": math.nan})
    for text, why in (
        ("avg_jct<2h", "write METRIC<=BOUND or METRIC>=BOUND"),
        ("speed>=3", "unknown metric 'speed'; valid: avg_interference"),
        ("avg_jct<=soon", "a number of seconds or a duration"),
        ("gpu_utilization>=1h", "the bound must be a number"),
        ("makespan<=inf", "the bound must be finite"),
    ):
        with pytest.raises(ConfigError, match=why.split(";")[0]) as caught:
            parse_target(text)
        assert caught.value.args[0].startswith(f"--target {text!r}")


def test_the_search_bisects_to_the_fewest_nodes_meeting_every_target() -> None:
    calls: list[int] = []

    def simulate(nodes: int) -> tuple[dict[str, float], int]:
        calls.append(nodes)
        summary = {"avg_jct": 10_000.0 / nodes, "gpu_utilization": 2.0 / nodes}
        return summary, 3 if nodes < 2 else 0  # 3 jobs need 2 nodes

    targets = [parse_target("avg_jct<=1000"), parse_target("gpu_utilization>=0.1")]
    found = plan_capacity(simulate, targets, 1, 64)
    assert found.nodes == 10  # 1,000 s at 10 nodes, utilisation 0.2
    assert [t.nodes for t in found.trials] == sorted(set(calls)) and len(calls) <= 8
    by_nodes = {t.nodes: t for t in found.trials}
    assert by_nodes[1].missed == ("3 job(s) never fit",)
    assert by_nodes[9].missed == ("avg_jct<=16m40s",) and by_nodes[10].met
    assert by_nodes[64].missed == ("gpu_utilization>=0.1",)  # too big to be busy
    # fast enough only where too idle: None
    idle = plan_capacity(simulate, [targets[0], parse_target("gpu_utilization>=0.5")], 1, 64)
    assert idle.nodes is None
    assert {t.nodes: t.missed for t in idle.trials}[10] == ("gpu_utilization>=0.5",)
    # nothing meets: None, after one run at the most nodes
    calls.clear()
    never = plan_capacity(simulate, [parse_target("avg_jct<=1")], 1, 64)
    assert never.nodes is None and calls == [64]
    assert plan_capacity(simulate, [parse_target("avg_jct<=1e9")], 3, 5).nodes == 3
    with pytest.raises(ConfigError, match="at least one --target"):
        plan_capacity(simulate, [], 1, 4)
    with pytest.raises(ConfigError, match="--min-nodes 5 and --max-nodes 4"):
        plan_capacity(simulate, targets, 5, 4)


def test_danlu_sim_plan_finds_the_size_and_writes_every_trial(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    args = ["sim", "plan", "--jobs", "60", "--policy", "fifo", "--max-nodes", "16"]
    result = CliRunner().invoke(
        app,
        [
            *args,
            "--target",
            "avg_jct<=2h",
            "--target",
            "avg_queueing_delay<=5m",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    nodes = data["nodes"]
    assert isinstance(nodes, int) and 1 <= nodes <= 16
    assert data["gpus"] == 4 * nodes and data["targets"] == [
        "avg_jct<=2h",
        "avg_queueing_delay<=5m",
    ]
    assert f"smallest cluster meeting the targets: {nodes} nodes x 4 GPUs" in result.output
    tried = {t["nodes"]: t for t in data["tried"]}
    assert tried[nodes]["met"] and tried[nodes]["avg_jct"] <= 7200
    assert tried[nodes]["avg_queueing_delay"] <= 300
    if nodes > 1:  # the size below misses a target
        assert not tried[nodes - 1]["met"] and tried[nodes - 1]["missed"]
    # unreachable: exit 1 with the reason; bad input: exit 2 naming the flag
    never = CliRunner().invoke(app, [*args, "--target", "avg_jct<=1"])
    assert never.exit_code == 1 and "no cluster of up to 16 nodes meets the targets" in never.output
    bad = CliRunner().invoke(app, [*args, "--target", "jct<=1"])
    assert bad.exit_code == 2 and "--target 'jct<=1': unknown metric" in bad.output
