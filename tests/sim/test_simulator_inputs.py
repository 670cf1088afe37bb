"""What the simulator and the packing experiment are built from, checked when given:

- ``Simulator(...)``'s arguments of the wrong type or value failed deep inside the run (a
  policy name for the policy: AttributeError at the first round), or were silently
  replaced (an empty list for ``config``), or let jobs out of submission order in late;
- pods (and nodes) built in code for the packing experiment could share a name (the CSV
  loaders refuse that), which left their order, and so the result, to the list's;
- a trace whose ``sync_time`` equals its ``step_time`` (no time left to compute) loaded;
- scorer options that are no mapping raised a bare TypeError from ``make_scorer`` when
  one seed was run (:func:`run_seed`), and so did an option name that is no string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_trace_inputs_review69 import write_traces

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DataError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profile
from danlu.sim.engine import Simulator
from danlu.sim.openb import OpenbPod, run_allocation_experiment, run_seed
from danlu.sim.workload import RigidWork, Workload, WorkloadJob


def job(name: str, at: float, seq: int) -> WorkloadJob:
    return WorkloadJob(JobRequest(name, at, 1, seq=seq), RigidWork(60.0))


def workload(*jobs: WorkloadJob) -> Workload:
    return Workload("w", "test", jobs or (job("a", 0.0, 0), job("b", 10.0, 1)))


def build(**changed: Any) -> Simulator:
    """A simulator of two one-minute jobs on two GPUs, with ``changed`` arguments."""
    arguments: dict[str, Any] = {
        "cluster": Cluster.homogeneous(1, 2),
        "policy": make_policy("fifo"),
        "workload": workload(),
        "config": SimConfig(),
        "profiles": None,
        "on_progress": None,
        **changed,
    }
    return Simulator(**arguments)


# -- 1. Simulator's arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"cluster": 4}, r"Simulator: cluster must be a Cluster, e\.g\. Cluster\.homogeneous"),
        ({"cluster": None}, r"Simulator: cluster must be a Cluster"),
        ({"policy": "fifo"}, r"Simulator: policy must be a scheduling policy .*make_policy"),
        ({"policy": object()}, r"Simulator: policy must be a scheduling policy"),
        ({"workload": [job("a", 0.0, 0)]}, r"Simulator: workload must be a Workload"),
        ({"workload": "w.csv"}, r"Simulator: workload must be a Workload, e\.g\. load_work"),
        (
            {"workload": Workload("w", "test", None)},  # type: ignore[arg-type]
            r"Simulator: workload\.jobs must be a tuple of WorkloadJobs",
        ),
        (
            {"workload": Workload("w", "test", (job("a", 0.0, 0), "b"))},  # type: ignore[arg-type]
            r"Simulator: workload\.jobs\[1\] must be a WorkloadJob; got 'b' \(str\)",
        ),
        ({"config": []}, r"Simulator: config must be a SimConfig"),
        ({"config": {"interval": 60.0}}, r"Simulator: config must be a SimConfig"),
        ({"profiles": []}, r"Simulator: profiles must be a mapping of application names"),
        ({"profiles": "traces/"}, r"Simulator: profiles must be a mapping"),
        ({"profiles": {"cifar10": "traces/cifar10"}}, r"Simulator: profiles\['cifar10'\] must"),
        ({"on_progress": 5}, r"Simulator: on_progress must be a function"),
    ],
)
def test_a_simulator_argument_of_the_wrong_type_is_refused_naming_it(
    changed: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build(**changed)


def test_a_profile_keyed_by_no_string_is_refused_naming_it(tmp_path: Path) -> None:
    profile = load_profile(write_traces(tmp_path))
    with pytest.raises(ConfigError, match=r"Simulator: profiles: the application name 7 must"):
        build(profiles={7: profile})


def test_jobs_out_of_submission_order_are_refused_naming_both() -> None:
    # they ran: "late" held "early" back until it arrived itself, at 500 s
    late_first = workload(job("late", 500.0, 0), job("early", 0.0, 1))
    with pytest.raises(ConfigError) as info:
        build(workload=late_first)
    message = str(info.value)
    assert "workload.jobs must be in submission order" in message
    assert "'early' (submitted at 0 s) comes after job 'late' (at 500 s)" in message


def test_good_arguments_still_build_and_run(tmp_path: Path) -> None:
    seen: list[tuple[float, int, int]] = []
    profile = load_profile(write_traces(tmp_path))
    same_time = workload(job("a", 0.0, 0), job("b", 0.0, 1), job("c", 5.0, 2))
    sim = build(
        workload=same_time,
        config=None,
        profiles={"toyapp": profile},
        on_progress=lambda *args: seen.append(args),
    )
    result = sim.run()
    assert sorted(r.id for r in result.jobs) == ["a", "b", "c"]
    assert all(r.end_time is not None for r in result.jobs)
    assert seen and seen[-1][1:] == (3, 3)


# -- 2. pods (and nodes) built in code: names ---------------------------------------------------


def pods(*names: str) -> list[OpenbPod]:
    return [OpenbPod(name, ShareRequest(1000, 1024, 1, 500)) for name in names]


NODES = [ShareNode("a", 32_000, 65_536, 2, "T4"), ShareNode("b", 32_000, 65_536, 2, "T4")]


@pytest.mark.parametrize("run", ["experiment", "seed"])
def test_two_pods_of_one_name_are_refused_naming_the_pod(run: str) -> None:
    given = pods("p0", "p1", "p2", "p1")
    with pytest.raises(ConfigError) as info:
        if run == "experiment":
            run_allocation_experiment(given, NODES, "best-fit", 1.0, [1])
        else:
            run_seed(given, NODES, "best-fit", 1.0, 1)
    message = str(info.value)
    assert "pods[3]: pod name 'p1' is already used by pods[1]" in message
    assert "give every pod its own name" in message


def test_a_repeated_pod_read_from_a_file_is_named_by_its_line() -> None:
    first, second = pods("p", "p")
    second = OpenbPod(second.name, second.request, "pods.csv, line 3")
    with pytest.raises(ConfigError, match=r"pods\[1\] \(pods\.csv, line 3\): pod name 'p'"):
        run_allocation_experiment([first, second], NODES, "best-fit", 1.0, [1])


@pytest.mark.parametrize("name", ["", "  "])
def test_a_nameless_pod_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"pods\[1\]: the pod name must be a non-empty string"):
        run_allocation_experiment(pods("p0", name), NODES, "best-fit", 1.0, [1])


def test_two_nodes_of_one_name_are_refused_naming_the_node() -> None:
    nodes = [*NODES, ShareNode("a", 32_000, 65_536, 2, "T4")]
    with pytest.raises(ConfigError, match=r"nodes\[2\]: node name 'a' is already used by nodes"):
        run_allocation_experiment(pods("p0", "p1"), nodes, "best-fit", 1.0, [1])


def test_pods_of_distinct_names_still_run() -> None:
    result = run_allocation_experiment(pods("p0", "p1", "p2"), NODES, "best-fit", 1.0, [1])
    assert 0 < result.allocation_ratio <= 100
    assert run_seed(pods("p0", "p1", "p2"), NODES, "best-fit", 1.0, 1) == result.per_seed[0]


# -- 3. a trace's sync time equal to its step time ----------------------------------------------


@pytest.mark.parametrize(
    ("file", "line", "text"),
    [("placements.csv", 3, "1,64,0.2,0.2"), ("scalability.csv", 2, "6,6,32,0.3,0.3")],
)
def test_a_sync_time_equal_to_the_step_time_is_refused_naming_file_line_and_column(
    tmp_path: Path, file: str, line: int, text: str
) -> None:
    folder = write_traces(tmp_path, {(file, line): text})
    with pytest.raises(DataError) as info:
        load_profile(folder)
    message = str(info.value)
    assert f"{folder / file}:{line}: sync_time=" in message
    assert "equals step_time" in message and "sync_time must be below step_time" in message


# -- 4. scorer options of one seed ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([("alpha", 1)], r"options \(--option\) must be a mapping .*got list"),
        ("alpha=1", r"options \(--option\) must be a mapping .*got str"),
        ({1: 0.5}, r"options \(--option\): the option name 1 must be a string"),
    ],
)
def test_scorer_options_of_the_wrong_type_are_refused_naming_them(
    options: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_seed(pods("p0", "p1"), NODES, "danlu", 1.0, 1, options)
    with pytest.raises(ConfigError, match=message):
        run_allocation_experiment(pods("p0", "p1"), NODES, "danlu", 1.0, [1], options)
