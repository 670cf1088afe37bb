"""Node failures in the simulator: seeded failure times, the training a job loses since its
last checkpoint and redoes, its runs re-queued as the control plane re-queues a run lost
with its node, and failed nodes closed to new work until repaired."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from closed_watch import WatchingClosed
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError
from danlu.core.state import JobState
from danlu.sched.policies.base import Policy
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.failures import FAIL, REPAIRED, FailureClock, NodeFailures, lost_training
from danlu.sim.metrics import SimResult
from danlu.sim.progress import RigidProgress
from danlu.sim.workload import Workload, load_workload, synthetic_workload

HEADER = "name,submit_time,gpus,duration"


def _workload(tmp_path: Path, rows: list[str]) -> Workload:
    path = tmp_path / "w.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return load_workload(path)


def _simulate(
    workload: Workload,
    cluster: Cluster,
    failures: NodeFailures | None,
    policy: str | Policy = "fifo",
    **config: object,
) -> SimResult:
    chosen = make_policy(policy) if isinstance(policy, str) else policy
    settings = SimConfig(failures=failures, record_events=True, **config)  # type: ignore[arg-type]
    return Simulator(cluster, chosen, workload, settings).run()


def test_the_clock_fails_and_repairs_nodes_by_its_seed() -> None:
    failures = NodeFailures(mtbf=1000.0, repair=50.0, seed=7)
    clock = FailureClock(failures, units=2, start=100.0)
    rng = np.random.default_rng(7)
    first = [100.0 + float(rng.exponential(1000.0)) for _ in range(2)]
    assert clock.next_time() == min(first)
    events = clock.due(20_000.0)
    assert events == sorted(events) and clock.next_time() > 20_000.0
    for node in (0, 1):
        mine = [(t, k) for t, n, k in events if n == node]
        assert mine[0] == (first[node], FAIL)
        assert [k for _, k in mine] == [FAIL, REPAIRED] * (len(mine) // 2) + [FAIL] * (
            len(mine) % 2
        )
        for (failed, _), (repaired, _) in zip(mine[::2], mine[1::2], strict=False):
            assert repaired == pytest.approx(failed + 50.0)
        assert (node in clock.down) == (mine[-1][1] == FAIL)
    assert clock.count == sum(k == FAIL for _, _, k in events) > 2
    again = FailureClock(failures, units=2, start=100.0)
    assert again.due(20_000.0) == events
    assert FailureClock(NodeFailures(1000.0, 50.0, seed=8), 2, 100.0).due(20_000.0) != events


@pytest.mark.parametrize("field", ["mtbf", "repair", "checkpoint_every"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_failure_settings_must_be_positive_and_finite(field: str, value: float) -> None:
    settings = {"mtbf": 10.0, "repair": 10.0, "checkpoint_every": 10.0, field: value}
    with pytest.raises(ConfigError, match=field):
        NodeFailures(**settings)  # type: ignore[arg-type]


def test_a_run_loses_the_training_since_its_last_checkpoint_and_redoes_it() -> None:
    assert lost_training(250.0, 100.0) == pytest.approx(50.0)
    assert lost_training(-5.0, 100.0) == 0.0
    one_gpu = Allocation((GpuShare(0, 0, 1000, 0),))
    job = RigidProgress(1000.0, restart_cost=30.0)
    job.start(0.0, one_gpu)  # a first start pays no restart
    assert job.fail(250.0, 100.0) == pytest.approx(50.0)  # checkpoints at 100 and 200
    job.start(300.0, one_gpu)  # the restart, then the 50 s again, then the 750 s left
    assert job.finish_time() == pytest.approx(300.0 + 30.0 + 50.0 + 750.0)
    # failing 10 s into the redo: 40 s of it are still to do, and the 10 s since the
    # run's checkpoint (none yet) are lost too
    assert job.fail(340.0, 100.0) == pytest.approx(10.0)
    job.start(400.0, one_gpu)
    assert job.finish_time() == pytest.approx(400.0 + 30.0 + 50.0 + 750.0)
    assert job.restart_seconds == pytest.approx(30.0 + 10.0)  # the second run's 40 s
    job.stop(450.0)  # preempted 20 s into the redo (a checkpoint, losing nothing)
    job.start(500.0, one_gpu)  # the restart, then the 30 s of the redo left
    assert job.finish_time() == pytest.approx(500.0 + 30.0 + 30.0 + 750.0)


def test_a_failure_after_skipped_ticks_keeps_the_interval_grid(tmp_path: Path) -> None:
    # one job on node 0 of two; nothing happens on the ticks between its start and node 0's
    # failure, at a time off the grid: its run is re-queued then, and the next round, on
    # the grid's next tick, resumes it on node 1
    duration, every = 20_000.0, 1800.0
    for seed in range(100):
        failures = NodeFailures(100_000.0, repair=50_000.0, checkpoint_every=every, seed=seed)
        clock = FailureClock(failures, units=2)
        fail_at = clock.next_time()
        (_, unit, _), *_ = clock.due(fail_at)
        if unit == 0 and 200.0 < fail_at < duration / 2 and clock.next_time() > 2 * duration:
            break
    else:
        pytest.fail("no seed fails node 0 alone within the run")
    result = _simulate(
        _workload(tmp_path, [f"long,0,1,{duration}"]),
        Cluster.homogeneous(2, 1),
        failures,
        interval=60.0,
        restart_cost=30.0,
    )
    (record,) = result.jobs
    resumed = math.ceil(fail_at / 60.0) * 60.0
    trained = fail_at - 60.0 - 30.0  # it starts at the tick 60, after its restart cost
    redo = math.fmod(trained, every)
    assert record.end_time == pytest.approx(resumed + 30.0 + redo + duration - trained)
    assert record.failures == 1


def test_a_job_on_a_failed_node_resumes_after_the_repair(tmp_path: Path) -> None:
    mtbf, repair, every, seed = 5000.0, 600.0, 300.0, 8
    rng = np.random.default_rng(seed)
    fail_at = float(rng.exponential(mtbf))
    next_fail = fail_at + repair + float(rng.exponential(mtbf))
    duration = 4000.0
    assert fail_at < duration  # the seed's first failure hits the job
    failures = NodeFailures(mtbf, repair, every, seed)
    result = _simulate(
        _workload(tmp_path, [f"long,0,1,{duration}"]),
        Cluster.homogeneous(1, 1),
        failures,
        event_rounds=True,  # the policy is asked at once when the node is back
        restart_cost=30.0,
    )
    (record,) = result.jobs
    lost = math.fmod(fail_at, every)
    end = fail_at + repair + 30.0 + lost + (duration - fail_at)
    assert next_fail > end  # no second failure within the run
    assert record.start_time == 0.0 and record.end_time == pytest.approx(end)
    on_grid = _simulate(
        _workload(tmp_path, [f"long,0,1,{duration}"]),
        Cluster.homogeneous(1, 1),
        failures,
        interval=60.0,
        restart_cost=30.0,
    )
    (gridded,) = on_grid.jobs  # it starts at 60 and resumes at the first instant after
    resumed = math.ceil((fail_at + repair) / 60.0) * 60.0
    trained = fail_at - 60.0
    redo = math.fmod(trained, every)
    assert gridded.end_time == pytest.approx(resumed + 30.0 + redo + duration - trained)
    assert (record.failures, record.restarts, record.preemptions) == (1, 1, 0)
    assert record.lost_seconds == pytest.approx(lost)
    summary = result.summary()
    assert summary["node_failures"] == 1.0 and summary["lost_runs"] == 1.0
    assert summary["lost_training_seconds"] == pytest.approx(lost)
    assert summary["preemptions"] == 0.0  # the policy preempted nothing
    edges = [(e.new, e.reason) for e in result.events if e.job_id == "long"]
    assert edges == [
        (JobState.RUNNING, "scheduled"),
        (JobState.PREEMPTING, "lost with node node-0"),
        (JobState.PENDING, "re-queued to resume from its last checkpoint"),
        (JobState.RUNNING, "scheduled"),
        (JobState.SUCCEEDED, "finished"),
    ]


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "danlu"])
def test_nothing_starts_on_a_node_out_of_service(policy: str) -> None:
    watching = WatchingClosed(make_policy(policy))
    failures = NodeFailures(mtbf=20_000.0, repair=3600.0, seed=1)
    result = _simulate(
        synthetic_workload(jobs=80, seed=2), Cluster.homogeneous(4, 4), failures, watching
    )
    assert watching.closed_rounds > 0 and result.node_failures > 0
    assert result.summary()["jobs"] == 80.0 and not result.unfinished and not result.rejected


def test_failures_depend_on_the_seed_alone() -> None:
    workload = synthetic_workload(jobs=120, seed=0)
    cluster = Cluster.homogeneous(16, 4)
    failures = NodeFailures(mtbf=86_400.0, seed=1)
    runs = {p: _simulate(workload, cluster, failures, p) for p in ("fifo", "tiresias")}
    assert runs["fifo"].node_failures == runs["tiresias"].node_failures > 0
    again = _simulate(workload, cluster, failures, "fifo")
    assert again.to_json() == runs["fifo"].to_json()
    other = _simulate(workload, cluster, NodeFailures(mtbf=86_400.0, seed=2), "fifo")
    assert other.to_json() != runs["fifo"].to_json()
    calm = _simulate(workload, cluster, None, "fifo")
    assert calm.summary()["node_failures"] == 0.0
    assert runs["fifo"].summary()["avg_jct"] > calm.summary()["avg_jct"]


def test_a_wide_job_waits_for_the_repair_instead_of_failing(tmp_path: Path) -> None:
    # a 2-GPU job arrives while one of the two nodes is out of service: fifo (which never
    # rechecks by itself) would fail it as unschedulable on an idle cluster
    failures = NodeFailures(mtbf=2000.0, repair=5000.0, seed=0)
    rng = np.random.default_rng(0)
    first = min(float(rng.exponential(2000.0)) for _ in range(2))
    arrive = first + 1.0
    workload = _workload(tmp_path, ["tiny,0,1,1", f"wide,{arrive},2,10"])
    result = _simulate(workload, Cluster.homogeneous(2, 1), failures, interval=60.0)
    assert not result.rejected and not result.unfinished
    wide = next(r for r in result.jobs if r.id == "wide")
    assert wide.start_time is not None and wide.start_time >= first + 5000.0


def test_danlu_sim_run_reports_failures(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    runner = CliRunner()
    args = ["sim", "run", "--policy", "fifo", "--jobs", "60", "--quiet", "--json", str(out)]
    result = runner.invoke(app, [*args, "--node-mtbf", "1d", "--failure-seed", "4"])
    assert result.exit_code == 0, result.output
    assert "node failures" in result.output and "runs lost with a node" in result.output
    data = json.loads(out.read_text())
    assert data["node_failures"] > 0 and data["lost_runs"] == sum(
        j["failures"] for j in data["per_job"]
    )
    calm = runner.invoke(app, args)
    assert calm.exit_code == 0 and "node failures" not in calm.output


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--node-mtbf", "soon"], "--node-mtbf"),
        (["--node-mtbf", "0"], "--node-mtbf must be a duration above 0"),
        (["--node-mtbf", "1d", "--node-repair", "-5"], "--node-repair"),
        (["--node-mtbf", "1d", "--checkpoint-every", "inf"], "--checkpoint-every"),
    ],
)
def test_bad_failure_flags_exit_2_naming_the_flag(flags: list[str], needle: str) -> None:
    for command in ("run", "compare"):
        result = CliRunner().invoke(app, ["sim", command, "--jobs", "5", "--quiet", *flags])
        assert result.exit_code == 2, result.output
        assert needle in result.output


def test_danlu_sim_plan_sizes_a_cluster_for_its_failures(tmp_path: Path) -> None:
    args = ["sim", "plan", "--jobs", "60", "--policy", "fifo", "--max-nodes", "32"]
    args += ["--target", "avg_queueing_delay<=5m"]
    sizes = {}
    for name, extra in (("calm", []), ("failing", ["--node-mtbf", "6h", "--node-repair", "6h"])):
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, [*args, *extra, "--json", str(out)])
        assert result.exit_code == 0, result.output
        sizes[name] = json.loads(out.read_text())["nodes"]
    # a node out of service half the time: the same wait needs more of them
    assert sizes["failing"] > sizes["calm"]


POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"


@pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)
@pytest.mark.parametrize("unit", ["node", "gpu"])
def test_the_failure_cost_benchmark_prints_a_ratio_per_run(
    unit: str,
    load_benchmark: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    benchmark = load_benchmark("failure_cost")
    flags = ["--load", "0.5", "--workloads", "3", "--policies", "fifo", "--seeds", "0"]
    flags += ["--unit", unit, "--mtbf", "12h" if unit == "node" else "2d"]
    monkeypatch.setattr("sys.argv", ["failure_cost.py", *flags])
    benchmark.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{unit}s fail every")
    row = lines[2].split()
    assert row[:2] == ["3", "fifo"]
    calm, failing, ratio, failures = (float(x) for x in row[2:6])
    assert ratio == pytest.approx(failing / calm, abs=1e-3) and failures > 0
    assert lines[-1].startswith(f"fifo: mean ratio {ratio:.3f}")
