"""The simulator's inputs: bad values given through the Python API or in its
files refused with the package's errors naming the field (a load of 1e300 packed pods for
ever, nameless or repeated pods, priorities beyond a job spec's, a pod scheduled before it
was created, settings of the wrong type raising bare TypeErrors, co-location rates outside
(0, 1] run as free sharing or as years of slowdown)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_input_edges_review72 import OPENB_HEADER, POD_HEADER, write

from danlu.cli.sim_checks import MOST_LOAD as CLI_MOST_LOAD
from danlu.core.errors import ConfigError, DataError
from danlu.core.spec import MAX_PRIORITY
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sched.quota import Quotas
from danlu.sim.config import SimConfig
from danlu.sim.failures import Failures
from danlu.sim.interference import Interference
from danlu.sim.openb import MOST_LOAD, OpenbPod, load_pods, run_allocation_experiment
from danlu.sim.plan import parse_target, plan_capacity
from danlu.sim.workload import load_workload, synthetic_workload


def pods() -> list[OpenbPod]:
    return [OpenbPod(f"p{i}", ShareRequest(1000, 1024, 1, 500)) for i in range(4)]


def nodes() -> list[ShareNode]:
    return [ShareNode("a", 32_000, 65_536, 2, "T4")]


# -- 1. the allocation experiment's load and seeds --------------------------------------------


@pytest.mark.parametrize("load", [1e300, MOST_LOAD * 1.01, 11.0])
def test_a_load_beyond_the_clis_bound_is_refused_through_the_api(load: float) -> None:
    with pytest.raises(ConfigError, match=r"load \(--load\).*at most 10") as info:
        run_allocation_experiment(pods(), nodes(), "best-fit", load, [1])
    assert str(load) in str(info.value)


def test_the_api_and_the_cli_share_one_load_bound() -> None:
    assert MOST_LOAD == CLI_MOST_LOAD == 10.0


def test_the_largest_load_still_runs() -> None:
    result = run_allocation_experiment(pods(), nodes(), "best-fit", MOST_LOAD, [1])
    assert result.load == MOST_LOAD
    assert 0 < result.allocation_ratio <= 100


@pytest.mark.parametrize("load", ["1.0", None, True])
def test_a_load_that_is_no_number_is_refused_naming_it(load: Any) -> None:
    with pytest.raises(ConfigError, match=r"load \(--load\) must be a number"):
        run_allocation_experiment(pods(), nodes(), "best-fit", load, [1])


@pytest.mark.parametrize("seeds", ["42", [1.5], [True], [None]])
def test_seeds_that_are_no_whole_numbers_are_refused_naming_them(seeds: Any) -> None:
    with pytest.raises(ConfigError, match=r"seeds \(--seeds\)"):
        run_allocation_experiment(pods(), nodes(), "best-fit", 1.0, seeds)


def test_numpy_integer_seeds_still_run() -> None:
    seed: Any = np.int64(3)  # numpy's integers are integers (numbers.Integral)
    result = run_allocation_experiment(pods(), nodes(), "best-fit", 1.0, [seed])
    assert result.seeds == (3,)


# -- 2. pod names of an openb pod list --------------------------------------------------------


def test_an_empty_pod_name_is_refused_at_its_row(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p0,1000,1024,1,500,\n ,1000,1024,1,500,\n")
    with pytest.raises(DataError, match=r"line 3, column name: empty; give every pod a name"):
        load_pods(path)


def test_a_repeated_pod_name_is_refused_at_its_row(tmp_path: Path) -> None:
    rows = "p0,1000,1024,1,500,\np1,1000,1024,1,500,\np0,2000,1024,1,1000,\n"
    path = write(tmp_path, "pods.csv", POD_HEADER + rows)
    with pytest.raises(
        DataError, match=r"line 4, column name: pod name 'p0' is already used on line 2"
    ):
        load_pods(path)


def test_distinct_pod_names_are_read_stripped(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + " p0 ,1000,1024,1,500,\np1,1000,1024,0,0,\n")
    assert [pod.name for pod in load_pods(path)] == ["p0", "p1"]


# -- 3. a plain workload's priority -----------------------------------------------------------


def plain(tmp_path: Path, priority: str) -> Path:
    text = f"name,submit_time,gpus,duration,priority\na,0,1,60,0\nb,0,1,60,{priority}\n"
    return write(tmp_path, "jobs.csv", text)


@pytest.mark.parametrize("priority", [str(MAX_PRIORITY + 1), f"-{MAX_PRIORITY + 1}", "1e18"])
def test_a_priority_beyond_a_specs_bound_is_refused_naming_row_and_column(
    tmp_path: Path, priority: str
) -> None:
    with pytest.raises(DataError, match=r"jobs\.csv:3: column 'priority' must lie within") as info:
        load_workload(plain(tmp_path, priority))
    assert "-1,000,000..1,000,000" in str(info.value)


@pytest.mark.parametrize("priority", [MAX_PRIORITY, -MAX_PRIORITY])
def test_a_priority_at_a_specs_bound_is_taken(tmp_path: Path, priority: int) -> None:
    jobs = load_workload(plain(tmp_path, str(priority))).jobs
    assert {job.request.id: job.request.priority for job in jobs} == {"a": 0, "b": priority}


# -- 4. an openb pod scheduled before it was created ------------------------------------------


def test_a_pod_scheduled_before_its_creation_is_refused_naming_its_row(tmp_path: Path) -> None:
    rows = "p0,1000,1024,1,500,,LS,Running,0,100,0\np1,1000,1024,1,500,,LS,Running,50,100,40\n"
    path = write(tmp_path, "openb.csv", OPENB_HEADER + rows)
    with pytest.raises(
        DataError, match=r"openb\.csv:3: column 'scheduled_time' \(40\) is before .*\(50\)"
    ):
        load_workload(path)


def test_a_pod_scheduled_at_or_after_its_creation_is_taken(tmp_path: Path) -> None:
    rows = "p0,1000,1024,1,500,,LS,Running,0,100,0\np1,1000,1024,1,500,,LS,Running,50,100,60\n"
    jobs = load_workload(write(tmp_path, "openb.csv", OPENB_HEADER + rows)).jobs
    assert [job.request.expected_duration for job in jobs] == [100.0, 40.0]


# -- 5. settings of the wrong type ------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"project_shares": [("a", 1.0)]}, "project_shares must be a mapping"),
        ({"project_shares": None}, "project_shares must be a mapping"),
        ({"project_shares": {"a": "2"}}, "project_shares: a's weight must be a number"),
        ({"project_shares": {"a": True}}, "project_shares: a's weight must be a number"),
        ({"project_shares": {1: 2.0}}, "project_shares: the project name 1 must be a string"),
        ({"interval": "60"}, r"interval \(--interval\) must be a number"),
        ({"restart_cost": None}, r"restart_cost \(--restart-cost\) must be a number"),
        ({"max_time": "3600"}, "max_time must be a number"),
        ({"idle_retries": "5"}, "idle_retries must be a whole number"),
        ({"idle_retries": 2.5}, "idle_retries must be a whole number"),
        ({"failures": 3600}, "failures must be a Failures or None"),
        ({"gpu_failures": "30d"}, "gpu_failures must be a Failures or None"),
        ({"interference": {"a": 0.5}}, "interference must be an Interference or None"),
        ({"quotas": None}, "quotas must be a Quotas"),
    ],
)
def test_a_sim_setting_of_the_wrong_type_is_refused_naming_it(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        SimConfig(**settings)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"seed": "1"}, r"failures: seed \(--failure-seed\) must be a whole number"),
        ({"seed": 1.5}, r"failures: seed \(--failure-seed\) must be a whole number"),
        ({"seed": None}, r"failures: seed \(--failure-seed\) must be a whole number"),
        ({"mtbf": "30d"}, "failures: mtbf must be a number"),
        ({"repair": None}, "failures: repair must be a number"),
        ({"checkpoint_every": [1800]}, "failures: checkpoint_every must be a number"),
    ],
)
def test_a_failure_setting_of_the_wrong_type_is_refused_naming_it(
    settings: dict[str, Any], named: str
) -> None:
    values: dict[str, Any] = {"mtbf": 3600.0, **settings}
    with pytest.raises(ConfigError, match=named):
        Failures(**values)


def test_settings_of_the_right_types_are_kept() -> None:
    seed: Any = np.int64(7)  # numpy's numbers are numbers
    retries: Any = np.int64(3)
    failures = Failures(np.float64(3600.0), 60, 600, seed)
    config = SimConfig(
        interval=30,
        max_time=math.inf,
        idle_retries=retries,
        project_shares={"vision": 2, "nlp": np.float64(0.5)},
        failures=failures,
        quotas=Quotas(),
    )
    assert config.failures is failures and failures.seed == 7
    assert dict(config.project_shares) == {"vision": 2, "nlp": 0.5}


# -- 6. the co-location slowdown's rates -------------------------------------------------------


@pytest.mark.parametrize("default", [2.0, 0.0, -0.5, math.nan, "0.5"])
def test_an_interference_default_outside_0_to_1_is_refused_naming_it(default: Any) -> None:
    with pytest.raises(ConfigError, match=r"interference: default must be"):
        Interference({}, default=default)


@pytest.mark.parametrize("field", ["shares", "model_shares"])
def test_an_interference_pair_rate_outside_0_to_1_is_refused_naming_the_pair(field: str) -> None:
    rates: dict[str, Any] = {"shares": {}, field: {("gan", "rl"): 1.5}}
    with pytest.raises(ConfigError, match=rf"interference: {field}\[\('gan', 'rl'\)\]"):
        Interference(rates["shares"], 0.5, rates.get("model_shares", {}))


def test_interference_rates_that_are_no_mapping_are_refused() -> None:
    bad: Any = [(("gan", "rl"), 0.5)]
    with pytest.raises(ConfigError, match="interference: shares must be a mapping"):
        Interference(bad, 0.5)


def test_interference_rates_within_0_to_1_are_kept() -> None:
    model = Interference({("gan", "rl"): 0.5}, 1.0, {("a", "b"): np.float64(0.25)})
    assert model.rate(("a", "gan"), [("b", "rl")]) == 0.25
    assert model.rate(("", "gan"), [("", "rl")]) == 0.5


# -- 7. the synthetic workload's seed and span -------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"seed": [1]}, r"seed \(--seed\) must be a whole number"),
        ({"seed": 1.5}, r"seed \(--seed\) must be a whole number"),
        ({"hours": "8"}, "hours must be a number"),
        ({"hours": None}, "hours must be a number"),
    ],
)
def test_a_synthetic_setting_of_the_wrong_type_is_refused_naming_it(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        synthetic_workload(5, **settings)


def test_a_synthetic_workload_of_plain_settings_is_built() -> None:
    seed: Any = np.int64(3)
    workload = synthetic_workload(5, seed, 2)
    assert len(workload.jobs) == 5 and workload == synthetic_workload(5, 3, 2.0)


# -- 8. the allocation experiment's pods, nodes, options and seed list -----------------------


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"pods": "pods.csv"}, "pods must be a list of OpenbPods"),
        ({"nodes": ["a"]}, "each of nodes must be a ShareNode"),
        ({"options": [("alpha", 1)]}, r"options \(--option\) must be a mapping"),
        ({"seeds": 42}, r"seeds \(--seeds\) must be a list of whole numbers"),
    ],
)
def test_experiment_inputs_of_the_wrong_type_are_refused_naming_them(
    arguments: dict[str, Any], named: str
) -> None:
    given: dict[str, Any] = {"pods": pods(), "nodes": nodes(), **arguments}
    with pytest.raises(ConfigError, match=named):
        run_allocation_experiment(policy="best-fit", **given)


def test_experiment_inputs_of_any_sequence_run() -> None:
    result = run_allocation_experiment(tuple(pods()), nodes(), "best-fit", 1.0, range(2))
    assert result.seeds == (0, 1) and len(result.per_seed) == 2


# -- 9. sim plan's node bounds -----------------------------------------------------------------


def fits(nodes: int) -> tuple[dict[str, float], int]:
    return {"avg_jct": 3600.0 / nodes}, 0


@pytest.mark.parametrize(
    ("low", "high", "named"),
    [
        ("1", 4, r"min_nodes \(--min-nodes\)"),
        (1.5, 4, r"min_nodes \(--min-nodes\)"),
        (1, 4.0, r"max_nodes \(--max-nodes\)"),
    ],
)
def test_plan_node_bounds_that_are_no_whole_numbers_are_refused(
    low: Any, high: Any, named: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{named} must be a whole number"):
        plan_capacity(fits, [parse_target("avg_jct<=2000s")], low, high)


def test_plan_node_bounds_of_whole_numbers_are_bisected() -> None:
    plan = plan_capacity(fits, [parse_target("avg_jct<=2000s")], 1, 4)
    assert plan.nodes == 2
