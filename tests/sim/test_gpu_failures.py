"""Single GPUs failing in the simulator (``SimConfig.gpu_failures``, ``--gpu-mtbf``): the
jobs on a failed GPU lose their runs and resume from their last checkpoint, the rest of its
node works on, and nothing is placed on the GPU until it is repaired."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from closed_watch import WatchingClosed
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Cluster
from danlu.core.state import JobState
from danlu.sched.policies.base import Policy
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.failures import FAIL, GPU, NODE, REPAIRED, FailureClock, Failures, Outages
from danlu.sim.metrics import SimResult
from danlu.sim.workload import Workload, load_workload, synthetic_workload


def _simulate(
    workload: Workload, cluster: Cluster, policy: str | Policy, **config: object
) -> SimResult:
    chosen = make_policy(policy) if isinstance(policy, str) else policy
    settings = SimConfig(record_events=True, **config)  # type: ignore[arg-type]
    return Simulator(cluster, chosen, workload, settings).run()


def test_gpus_fail_from_a_stream_of_their_own() -> None:
    nodes, gpus = Failures(mtbf=1000.0, repair=50.0, seed=3), Failures(mtbf=4000.0, seed=3)
    outages = Outages(2, 8, nodes, gpus, start=10.0)
    alone = FailureClock(nodes, 2, start=10.0)
    rng = np.random.default_rng([3, 1])
    first = [10.0 + float(rng.exponential(4000.0)) for _ in range(8)]
    events = outages.due(30_000.0)
    assert events == sorted(events, key=lambda e: (e.time, e.scope, e.unit))
    # the nodes fail as they would without GPU failures
    assert [(e.time, e.unit, e.kind) for e in events if e.scope == NODE] == alone.due(30_000.0)
    by_gpu = [[e for e in events if e.scope == GPU and e.unit == g] for g in range(8)]
    assert [mine[0].time for mine in by_gpu] == first
    for mine in by_gpu:
        assert [e.kind for e in mine][:2] == [FAIL, REPAIRED][: len(mine)]
        assert all(e.checkpoint_every == gpus.checkpoint_every for e in mine)
    down = {g for g, mine in enumerate(by_gpu) if mine[-1].kind == FAIL}
    assert outages.closed_gpus == down and outages.closed_nodes == frozenset(alone.down)
    assert outages.gpu_count == sum(e.kind == FAIL for e in events if e.scope == GPU) > 8
    assert outages.any_down == bool(down or alone.down)
    assert Outages(2, 8, None, None, 0.0).next_time() == math.inf


def test_a_job_on_a_failed_gpu_resumes_and_its_neighbour_runs_on(tmp_path: Path) -> None:
    mtbf, repair, every, seed = 5000.0, 600.0, 300.0, 62
    rng = np.random.default_rng([seed, 1])
    fail_at, other = (float(rng.exponential(mtbf)) for _ in range(2))
    next_fail = fail_at + repair + float(rng.exponential(mtbf))
    duration = 4000.0
    assert fail_at + repair < duration < other  # the seed's GPU 0 fails once, GPU 1 never
    path = tmp_path / "w.csv"
    path.write_text(f"name,submit_time,gpus,duration\na,0,1,{duration}\nb,0,1,{duration}\n")
    result = _simulate(
        load_workload(path),
        Cluster.homogeneous(1, 2),
        "fifo",
        gpu_failures=Failures(mtbf, repair, every, seed),
        event_rounds=True,
        restart_cost=30.0,
    )
    lost_jobs = [r for r in result.jobs if r.failures]
    (hit,) = lost_jobs
    (spared,) = [r for r in result.jobs if r is not hit]
    lost = math.fmod(fail_at, every)
    end = fail_at + repair + 30.0 + lost + (duration - fail_at)
    assert next_fail > end
    # the failed GPU's job waits for its repair (the other GPU is busy); its neighbour runs on
    assert hit.end_time == pytest.approx(end) and hit.lost_seconds == pytest.approx(lost)
    assert spared.end_time == duration and spared.restarts == 0
    edges = [(e.new, e.reason) for e in result.events if e.job_id == hit.id]
    assert edges[1:3] == [
        (JobState.PREEMPTING, "lost with GPU 0 of node node-0"),
        (JobState.PENDING, "re-queued to resume from its last checkpoint"),
    ]
    summary = result.summary()
    assert (summary["gpu_failures"], summary["node_failures"], summary["lost_runs"]) == (1, 0, 1)


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "danlu"])
def test_nothing_starts_on_a_gpu_out_of_service(policy: str) -> None:
    watching = WatchingClosed(make_policy(policy))
    failures = Failures(mtbf=40_000.0, repair=3600.0, seed=1)
    result = _simulate(
        synthetic_workload(jobs=80, seed=2), Cluster.homogeneous(4, 4), watching,
        gpu_failures=failures,
    )  # fmt: skip
    assert watching.closed_rounds > 0 and result.gpu_failures > 0
    assert result.node_failures == 0 and sum(r.failures for r in result.jobs) > 0
    assert result.summary()["jobs"] == 80.0 and not result.unfinished and not result.rejected


def test_gpu_failures_cost_less_than_as_many_node_failures() -> None:
    # as many failures in the cluster on average (8 nodes failing every 6 h on average, or 32 GPUs
    # every day): a node's takes its four GPUs out at once and loses every run on them
    workload, cluster = synthetic_workload(jobs=120, seed=0), Cluster.homogeneous(8, 4)
    day = 86_400.0
    by_node = _simulate(workload, cluster, "tiresias", failures=Failures(day / 4, seed=5))
    by_gpu = _simulate(workload, cluster, "tiresias", gpu_failures=Failures(day, seed=5))
    calm = _simulate(workload, cluster, "tiresias").summary()["avg_jct"]
    node, gpu = by_node.summary(), by_gpu.summary()
    assert node["lost_runs"] > gpu["lost_runs"] > 0
    assert calm < gpu["avg_jct"] < node["avg_jct"]


def test_danlu_sim_run_reports_gpu_failures(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = ["sim", "run", "--policy", "fifo", "--jobs", "60", "--quiet", "--json", str(out)]
    result = CliRunner().invoke(app, [*args, "--gpu-mtbf", "4d", "--gpu-repair", "2h"])
    assert result.exit_code == 0, result.output
    assert "GPU failures" in result.output and "runs lost with a node or GPU" in result.output
    data = json.loads(out.read_text())
    assert data["gpu_failures"] > 0 and data["node_failures"] == 0
    assert data["lost_runs"] == sum(j["failures"] for j in data["per_job"]) > 0


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--gpu-mtbf", "soon"], "--gpu-mtbf"),
        (["--gpu-mtbf", "0"], "--gpu-mtbf must be a duration above 0"),
        (["--gpu-mtbf", "1d", "--gpu-repair", "-5"], "--gpu-repair"),
    ],
)
def test_bad_gpu_failure_flags_exit_2_naming_the_flag(flags: list[str], needle: str) -> None:
    for command in ("run", "plan"):
        extra = ["--target", "avg_jct<=1d"] if command == "plan" else []
        result = CliRunner().invoke(app, ["sim", command, "--jobs", "5", *extra, *flags])
        assert result.exit_code == 2, result.output
        assert needle in result.output


def _mixed_workload(tmp_path: Path, seed: int) -> Workload:
    """40 rigid jobs: whole GPUs (1-8) and parts of one GPU (8-30 GiB of its 80), in bursts."""
    rng = np.random.default_rng(seed)
    rows = ["name,submit_time,gpus,duration,gpu_memory,family"]
    for i in range(40):
        submit, duration = float(rng.integers(0, 20_000)), float(rng.integers(600, 20_000))
        if rng.random() < 0.3:
            memory = int(rng.integers(8, 31)) * 2**30
            rows.append(f"j{i},{submit},1,{duration},{memory},cnn-small")
        else:
            rows.append(f"j{i},{submit},{int(rng.choice([1, 1, 2, 4, 8]))},{duration},,")
    path = tmp_path / f"mixed-{seed}.csv"
    path.write_text("\n".join(rows) + "\n")
    return load_workload(path)


@pytest.mark.parametrize("policy", ["danlu", "fair-share", "fifo", "tiresias", "value-density"])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_job_ends_with_nodes_and_gpus_failing(tmp_path: Path, policy: str, seed: int) -> None:
    # nodes and single GPUs failing often, shares of a GPU among whole-GPU jobs: the engine
    # checks every plan against over-allocation, the wrapper against closed nodes and GPUs
    # (pollux is left out: its search takes ~0.1 s a round, minutes for this workload)
    watching = WatchingClosed(make_policy(policy))
    result = _simulate(
        _mixed_workload(tmp_path, seed),
        Cluster.homogeneous(3, 4, gpu="a100-80gb"),
        watching,
        failures=Failures(mtbf=30_000.0, repair=1800.0, seed=seed),
        gpu_failures=Failures(mtbf=40_000.0, repair=3600.0, seed=seed),
    )
    assert result.node_failures > 0 and result.gpu_failures > 0 and watching.closed_rounds > 0
    assert not result.unfinished and not result.rejected and len(result.jobs) == 40
    assert sum(r.failures for r in result.jobs) > 0
