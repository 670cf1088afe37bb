"""The simulator's co-location slowdown: jobs that share a GPU run at the rates Gavel
measured, recomputed whenever a job joins or leaves the GPU."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError, DataError
from danlu.core.spec import MODEL_FAMILIES
from danlu.core.units import GiB
from danlu.estimate.colocation import gavel_family, measured_pairs
from danlu.sched.registry import make_policy
from danlu.sched.share_size import milli_for_memory
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.interference import Interference
from danlu.sim.metrics import SimResult
from danlu.sim.progress import RigidProgress
from danlu.sim.workload import Workload, load_workload

GAVEL = Path(__file__).parents[2] / ".." / "shared" / "data" / "gavel"
THROUGHPUTS = GAVEL / "physical_cluster_throughputs.json"

# "a" slows to half beside "b"; "b" to a quarter beside "a"
HALF_AND_QUARTER = Interference({("gan", "rl"): 0.5, ("rl", "gan"): 0.25}, default=0.8)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.csv"
    path.write_text(text)
    return path


def gavel() -> Path:
    if not THROUGHPUTS.is_file():
        pytest.skip("gavel data not present (../shared/data/gavel)")
    return THROUGHPUTS


def two_shares(tmp_path: Path, b_duration: float, b_family: str = "rl") -> Workload:
    """Two 10 GiB jobs submitted at 0 on a 1-GPU cluster: both start at the first round,
    at 60 s."""
    path = tmp_path / "w.csv"
    path.write_text(
        "name,submit_time,gpus,duration,gpu_memory,family\n"
        f"a,0,1,100,{10 * GiB},gan\n"
        f"b,0,1,{b_duration},{10 * GiB},{b_family}\n"
    )
    return load_workload(path)


def simulate(workload: Workload, interference: Interference | None) -> SimResult:
    config = SimConfig(interval=60.0, interference=interference)
    return Simulator(Cluster.homogeneous(1, 1), make_policy("fifo"), workload, config).run()


def ends(result: SimResult) -> dict[str, float | None]:
    return {r.id: r.end_time for r in result.jobs}


def test_sharing_is_free_without_a_model(tmp_path: Path) -> None:
    result = simulate(two_shares(tmp_path, 100), None)
    assert ends(result) == {"a": 160.0, "b": 160.0}
    assert result.summary()["interference_seconds"] == 0.0


def test_shared_jobs_slow_and_the_survivor_speeds_up_when_its_neighbour_ends(
    tmp_path: Path,
) -> None:
    # both start at 60: a at 0.5 ends at 260; b at 0.25 has done 50 of 100 s by then and
    # runs the rest alone, at full speed: it ends at 310
    result = simulate(two_shares(tmp_path, 100), HALF_AND_QUARTER)
    assert ends(result) == pytest.approx({"a": 260.0, "b": 310.0})
    # what sharing cost each: 200 s run at half and at a quarter of its speed
    lost = {r.id: r.interference_seconds for r in result.jobs}
    assert lost == pytest.approx({"a": 100.0, "b": 150.0})
    assert result.summary()["interference_seconds"] == pytest.approx(250.0)
    per_job = {j["id"]: j["interference_seconds"] for j in result.to_json()["per_job"]}
    assert per_job == pytest.approx(lost)
    # each held half of the GPU (10 of 80 GiB by memory: 125 milli); utilisation counts
    # only the work done: held GPU-seconds less what sharing slowed
    shares = {r.id: r.interference_gpu_seconds for r in result.jobs}
    assert shares == pytest.approx({"a": 100.0 * 0.125, "b": 150.0 * 0.125})
    held = 0.125 * 200 + 0.125 * 250
    useful = held - 0.125 * 250
    summary = result.summary()
    assert summary["gpu_utilization"] == pytest.approx(useful / (1 * summary["makespan"]))


def test_a_speed_up_between_two_instants_completes_in_order(tmp_path: Path) -> None:
    # b (60 s) has 10 s left when a ends at 260; it ends at 270, before the next instant
    # (300) at which the engine looks again, and is completed there in time order
    result = simulate(two_shares(tmp_path, 60), HALF_AND_QUARTER)
    assert ends(result) == pytest.approx({"a": 260.0, "b": 270.0})
    assert [r.id for r in result.jobs] == ["a", "b"]


def test_unknown_families_run_at_the_default_rate(tmp_path: Path) -> None:
    result = simulate(two_shares(tmp_path, 100, b_family=""), HALF_AND_QUARTER)
    assert ends(result) == pytest.approx({"a": 185.0, "b": 185.0})  # 100 / 0.8 each


def test_rate_beside_several_jobs_is_the_product() -> None:
    model = HALF_AND_QUARTER
    gan, rl, lstm = ("", "gan"), ("", "rl"), ("", "lstm")
    assert model.rate(gan, []) == 1.0
    assert model.rate(gan, [rl]) == 0.5
    assert model.rate(gan, [rl, rl]) == 0.25
    assert model.rate(gan, [rl, lstm]) == pytest.approx(0.4)


def test_a_measured_pair_of_models_beats_the_families_median(tmp_path: Path) -> None:
    model = Interference(
        {("gan", "rl"): 0.5, ("rl", "gan"): 0.25},
        default=0.8,
        model_shares={("G1", "R1"): 0.9, ("R1", "G1"): 0.7},
    )
    assert model.models == {"G1", "R1"}
    assert model.share(("G1", "gan"), ("R1", "rl")) == 0.9
    assert model.share(("G1", "gan"), ("", "rl")) == 0.5  # the other's model unknown
    assert model.share(("G2", "gan"), ("R1", "rl")) == 0.5  # a pair never measured
    path = tmp_path / "w.csv"
    path.write_text(
        "name,submit_time,gpus,duration,gpu_memory,family,model\n"
        f"a,0,1,100,{10 * GiB},gan,G1\n"
        f"b,0,1,100,{10 * GiB},rl,R1\n"
    )
    # a at 0.9 ends at 60 + 100 / 0.9; b at 0.7 has done 77.8 s by then
    result = simulate(load_workload(path), model)
    a_end = 60 + 100 / 0.9
    assert ends(result) == pytest.approx({"a": a_end, "b": a_end + 100 - (a_end - 60) * 0.7})
    path.write_text(
        f"name,submit_time,gpus,duration,gpu_memory,family,model\na,0,1,100,{10 * GiB},gan,G9\n"
    )
    with pytest.raises(ConfigError, match=r"job a names model 'G9'.*use one of: G1, R1"):
        simulate(load_workload(path), model)
    assert ends(simulate(load_workload(path), None)) == {"a": 160.0}  # ignored without one


def test_rigid_progress_settles_each_stretch_at_its_rate() -> None:
    alloc = Allocation((GpuShare(0, 0, 500, 0),))
    job = RigidProgress(100.0, restart_cost=30.0)
    job.start(0.0, alloc)
    job.set_rate(10.0, 0.5)  # 10 s done; 90 s of work at half speed
    assert job.finish_time() == pytest.approx(190.0)
    assert job.fraction(50.0) == pytest.approx(0.3)
    job.stop(50.0)
    assert job.remaining == pytest.approx(70.0)
    # a restart pays 30 s first, at any rate; the rate applies to the work after it
    job.start(100.0, alloc)
    assert job.rate == 1.0
    job.set_rate(110.0, 0.5)
    assert job.finish_time() == pytest.approx(110.0 + 20.0 + 140.0)
    job.stop(200.0)
    assert job.restart_seconds == pytest.approx(30.0)
    assert job.remaining == pytest.approx(70.0 - 35.0)
    # 40 s at half speed, then 70 s at half speed after the restart (not the restart)
    assert job.interference_seconds == pytest.approx(20.0 + 35.0)
    with pytest.raises(ValueError, match="rate"):
        job.set_rate(200.0, 0.0)


def test_calibrated_on_gavel() -> None:
    model = Interference.from_gavel(gavel())
    pairs = list(measured_pairs(gavel()))
    assert model.default == pytest.approx(0.6003, abs=1e-4)
    assert len(model.models) == 26  # every batch size of the seven models Gavel ran
    assert model.share(("Recommendation (batch size 512)", ""), ("A3C", "")) < 0.1
    assert all(0 < v <= 1 for v in model.shares.values())
    # a recommendation job nearly stops beside anything Gavel measured it with
    assert max(v for (a, _), v in model.shares.items() if a == "recommendation") < 0.1
    # the table is the median of each job's measured share, by ordered pair of families
    lstm_tf = sorted(
        min(p.job_share, 1.0)
        for p in pairs
        if (gavel_family(p.job), gavel_family(p.other)) == ("lstm", "transformer")
    ) + sorted(
        min(p.other_share, 1.0)
        for p in pairs
        if (gavel_family(p.other), gavel_family(p.job)) == ("lstm", "transformer")
    )
    lstm_tf.sort()
    middle = len(lstm_tf) // 2
    median = lstm_tf[middle] if len(lstm_tf) % 2 else (lstm_tf[middle - 1] + lstm_tf[middle]) / 2
    assert model.share(("", "lstm"), ("", "transformer")) == pytest.approx(median)


def test_bad_gavel_files_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match=r"bad\.json"):
        Interference.from_gavel(bad)
    bad.write_text('{"k80": {}}')
    with pytest.raises(DataError, match="no 'v100' section"):
        Interference.from_gavel(bad)
    with pytest.raises(DataError, match="no pair"):
        Interference.from_gavel(bad, "k80")


def test_workload_family_column_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration,family\nx,0,1,10,diffusion\n")
    with pytest.raises(DataError, match=r"w.csv:2: column 'family' must be one of"):
        load_workload(path)
    path.write_text("name,submit_time,gpus,duration,family\nx,0,1,10, lstm \ny,0,1,10,\n")
    jobs = load_workload(path).jobs
    assert [j.request.family for j in jobs] == ["lstm", ""]


def test_cli_interference_flag(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text(
        "name,submit_time,gpus,duration,gpu_memory,family\n"
        f"a,0,1,100,{10 * GiB},recommendation\nb,0,1,100,{10 * GiB},cnn-small\n"
    )
    runner = CliRunner()
    base = ["sim", "run", "--workload", str(workload), "--policy", "fifo", "--nodes", "1"]
    base += ["--gpus-per-node", "1", "--quiet"]
    free = runner.invoke(app, [*base, "--json", str(tmp_path / "free.json")])
    assert free.exit_code == 0, free.output
    missing = runner.invoke(app, [*base, "--interference", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    assert "--interference" in missing.output and "physical_cluster_throughputs" in missing.output
    slowed = runner.invoke(
        app, [*base, "--interference", str(gavel()), "--json", str(tmp_path / "slow.json")]
    )
    assert slowed.exit_code == 0, slowed.output
    free_jct = json.loads((tmp_path / "free.json").read_text())["job_jcts"]
    slow_jct = json.loads((tmp_path / "slow.json").read_text())["job_jcts"]
    assert free_jct == {"a": 160.0, "b": 160.0}  # both start at the first round, at 60 s
    # the small CNN is not slowed beside a recommendation model; that model nearly stops
    # (Gavel: 0.074 of its speed) until the CNN ends, then runs alone
    assert slow_jct["b"] == pytest.approx(160.0)
    assert slow_jct["a"] == pytest.approx(160.0 + 100.0 * (1 - 0.074), abs=1.0)


def test_cli_compare_takes_the_interference_flag(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text(
        "name,submit_time,gpus,duration,gpu_memory,family\n"
        f"a,0,1,100,{10 * GiB},recommendation\nb,0,1,100,{10 * GiB},cnn-small\n"
    )
    out = tmp_path / "cmp.json"
    args = ["sim", "compare", "--workload", str(workload), "--policies", "fifo,danlu"]
    args += ["--nodes", "1", "--gpus-per-node", "2", "--quiet", "--json", str(out)]
    result = CliRunner().invoke(app, [*args, "--interference", str(gavel())])
    assert result.exit_code == 0, result.output
    summaries = json.loads(out.read_text())
    # fifo packs the two shares on one GPU (best fit) and the recommendation model nearly
    # stops; danlu gives each a GPU of its own while one is free
    assert summaries["fifo"]["interference_seconds"] > 90.0
    assert summaries["danlu"]["interference_seconds"] == 0.0
    assert summaries["danlu"]["avg_jct"] == pytest.approx(160.0)


def test_the_sharing_benchmark_runs_and_its_workloads_are_fixed(
    load_benchmark: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_benchmark("sharing_interference")
    first, again = bench.workload(1.0, 0), bench.workload(1.0, 0)
    assert first == again and len(first.jobs) == 400
    shares = [j for j in first.jobs if j.request.shares_gpu]
    assert 0.6 < len(shares) / 400 < 0.8
    assert all(j.request.family for j in first.jobs)
    unknown = bench.workload(1.0, 0, unknown=1.0)
    assert not any(j.request.family for j in unknown.jobs)
    monkeypatch.setattr(
        "sys.argv",
        ["sharing_interference.py", "--loads", "0.7", "--seeds", "0", "--gavel", str(gavel())],
    )
    bench.main()
    out = capsys.readouterr().out
    assert "pack: mean ratio to pack 1.000 free, 1.000 slowed" in out
    assert "spread: mean ratio to pack" in out


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "value-density", "danlu"])
def test_the_work_done_is_each_jobs_duration_however_it_was_slowed(
    tmp_path: Path, policy: str
) -> None:
    """GPU-seconds held, less restarts and less what sharing slowed, are exactly the work
    each job asked for, through preemptions, resizes and neighbours coming and going."""
    rng = random.Random(7)
    lines = ["name,submit_time,gpus,duration,priority,gpu_memory,family"]
    for i in range(60):
        family = rng.choice(("", *MODEL_FAMILIES))
        if rng.random() < 0.6:
            memory = rng.randint(4, 30) * GiB
            lines.append(f"s{i},{i * 90},1,{rng.randint(60, 3000)},{i % 3},{memory},{family}")
        else:
            gpus = rng.choice((1, 2, 4))
            lines.append(f"w{i},{i * 90},{gpus},{rng.randint(60, 3000)},{i % 3},0,{family}")
    workload = load_workload(_write(tmp_path, "\n".join(lines) + "\n"))
    options = {"thresholds": (3600.0,)} if policy == "tiresias" else {}
    result = Simulator(
        Cluster.homogeneous(2, 4),
        make_policy(policy, **options),
        workload,
        SimConfig(interval=60.0, interference=HALF_AND_QUARTER),
    ).run()
    assert result.unfinished == [] and len(result.jobs) == 60
    durations = {j.request.id: j.work.duration for j in workload.jobs}  # type: ignore[union-attr]
    requests = {j.request.id: j.request for j in workload.jobs}
    slowed = 0.0
    for record in result.jobs:
        request = requests[record.id]
        # a share holds its milli of one GPU (by memory: in proportion to 80 GiB, rounded down)
        held = milli_for_memory(request.gpu_memory, 80 * GiB) / 1000 if request.shares_gpu else 1.0
        held *= request.gpus
        work = record.gpu_seconds - record.restart_gpu_seconds - record.interference_gpu_seconds
        assert work == pytest.approx(durations[record.id] * held, rel=1e-9, abs=1e-6)
        assert record.interference_seconds == pytest.approx(record.interference_gpu_seconds / held)
        slowed += record.interference_seconds
    assert result.summary()["interference_seconds"] == pytest.approx(slowed)
    if policy in ("fifo", "danlu"):
        assert slowed > 0  # some shares did run beside others
