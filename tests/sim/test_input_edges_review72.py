"""The simulator's inputs and failure guard: bad values refused with the
package's errors naming the field (a raw ValueError, absurd GPU counts and times taken as
given, ``1_000`` and other scripts' digits read as integers, nameless or repeated nodes,
a ``scheduled_time`` of 0 read as missing), and a simulation that failures keep from
progressing stopped early instead of after hundreds of simulated days."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError, DataError
from danlu.sched.registry import default_registry
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profile
from danlu.sim.engine import Simulator
from danlu.sim.failures import (
    FAIL,
    MOST_FRUITLESS_FAILURES,
    NODE,
    Failures,
    OutageEvent,
    Outages,
    StallWatch,
)
from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.plan import parse_target
from danlu.sim.progress import RigidProgress
from danlu.sim.workload import (
    RigidWork,
    Workload,
    WorkloadJob,
    load_workload,
    synthetic_workload,
)

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- 1. synthetic_workload's hours ----------------------------------------------------------


@pytest.mark.parametrize("hours", [math.nan, math.inf, -1.0, 1e300])
def test_synthetic_hours_must_be_a_finite_span(hours: float) -> None:
    with pytest.raises(ConfigError, match="hours must be"):
        synthetic_workload(jobs=3, hours=hours)


def test_synthetic_jobs_must_be_whole() -> None:
    with pytest.raises(ConfigError, match=r"jobs \(--jobs\) must be a whole number"):
        synthetic_workload(jobs=2.5)  # type: ignore[arg-type]


def test_synthetic_edges_still_work() -> None:
    assert {j.request.submit_time for j in synthetic_workload(jobs=4, hours=0.0).jobs} == {0.0}
    assert len(synthetic_workload(jobs=4, hours=8.0).jobs) == 4


# -- 2. absurd numbers in workload files ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("name,submit_time,gpus,duration\na,0,1e300,60\n", "gpus"),
        ("name,submit_time,gpus,duration\na,0,2000000,60\n", "gpus"),
        ("name,time,application,num_replicas,batch_size\na,0,bert,1e300,64\n", "num_replicas"),
        ("name,time,application,num_replicas,batch_size\na,0,bert,1,1e300\n", "batch_size"),
        ("name,time,application,num_replicas,batch_size\na,1e300,bert,1,64\n", "time"),
        ("timestamp,duration,num_gpus\n2017-10-01 00:00:00,60,1e300\n", "num_gpus"),
        ("timestamp,duration,num_gpus\n2017-10-01 00:00:00,1e300,1\n", "duration"),
        (OPENB_HEADER + "p,1000,1024,1e300,1000,,LS,Running,0,100,0\n", "num_gpu"),
        (OPENB_HEADER + "p,1e300,1024,1,1000,,LS,Running,0,100,0\n", "cpu_milli"),
        (OPENB_HEADER + "p,1000,1e300,1,1000,,LS,Running,0,100,0\n", "memory_mib"),
        (OPENB_HEADER + "p,1000,1.5,1,1000,,LS,Running,0,100,0\n", "memory_mib"),
        (OPENB_HEADER + "p,1000,1024,1,1000,,LS,Running,0,1e300,0\n", "deletion_time"),
    ],
)
def test_absurd_workload_numbers_are_refused_at_their_row(
    tmp_path: Path, text: str, column: str
) -> None:
    path = write(tmp_path, "w.csv", text)
    with pytest.raises(DataError, match=f"w.csv:2: column '{column}'"):
        load_workload(path)


def test_plain_gpu_counts_still_load(tmp_path: Path) -> None:
    path = write(tmp_path, "w.csv", "name,submit_time,gpus,duration\na,0,1048576,60\nb,0,2,60\n")
    assert [j.request.gpus for j in load_workload(path).jobs] == [1048576, 2]


# -- 3. openb integer cells -----------------------------------------------------------------


@pytest.mark.parametrize("cell", ["1_000", "\u0661\u0660\u0660\u0660", "１０００", "1000.0"])
def test_openb_pod_cells_must_be_plain_integers(tmp_path: Path, cell: str) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + f"p1,{cell},1024,1,500,\n")
    with pytest.raises(DataError, match="line 2, column cpu_milli: not a plain integer"):
        load_pods(path)


def test_openb_node_cells_must_be_plain_integers(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER + "n1,64000,262144,4,T4\nn2,64000,2_0,4,T4\n")
    with pytest.raises(DataError, match="line 3, column memory_mib: not a plain integer"):
        load_nodes(path)


def test_openb_signed_and_spaced_integers_still_load(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p1, +1000 ,1024,1,500,\n")
    assert load_pods(path)[0].request.cpu_milli == 1000
    negative = write(tmp_path, "neg.csv", POD_HEADER + "p1,-1,1024,1,500,\n")
    with pytest.raises(DataError, match="negative value -1"):
        load_pods(negative)


# -- 4. openb node names --------------------------------------------------------------------


def test_an_empty_node_name_is_refused_at_its_row(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER + "n1,64000,262144,4,T4\n ,64000,262144,4,T4\n")
    with pytest.raises(DataError, match="line 3, column sn: empty"):
        load_nodes(path)


def test_a_repeated_node_name_is_refused_at_its_row(tmp_path: Path) -> None:
    rows = "n1,64000,262144,4,T4\nn2,64000,262144,4,T4\nn1 ,64000,262144,2,T4\n"
    path = write(tmp_path, "nodes.csv", NODE_HEADER + rows)
    used = "line 4, column sn: node name 'n1' is already used on line 2"
    with pytest.raises(DataError, match=used):
        load_nodes(path)


# -- 5. a scheduled_time of 0 ---------------------------------------------------------------


def test_a_scheduled_time_of_zero_is_a_time(tmp_path: Path) -> None:
    """The trace's times are seconds from its start (its first pod: created and scheduled
    at 0); a pod scheduled at 0 was scheduled, even if its phase says Pending (a pod
    without a scheduled_time is left out as never scheduled). (A pod cannot be scheduled
    before its creation_time: that is refused, see test_api_inputs_review73.)"""
    rows = "p1,1000,1024,1,1000,,LS,Pending,0,100,0\np2,1000,1024,1,1000,,LS,Running,50,100,60\n"
    workload = load_workload(write(tmp_path, "w.csv", OPENB_HEADER + rows))
    durations = {j.request.id: j.work for j in workload.jobs}
    assert durations == {"p1": RigidWork(100.0), "p2": RigidWork(40.0)}
    assert workload.never_scheduled == ()


def test_a_pod_deleted_before_its_start_names_the_start_column(tmp_path: Path) -> None:
    rows = "p1,1000,1024,1,1000,,LS,Running,0,5,10\n"
    with pytest.raises(DataError, match=r"before the pod's scheduled_time \(10\)"):
        load_workload(write(tmp_path, "w.csv", OPENB_HEADER + rows))


# -- 6. failures that leave no job able to progress -----------------------------------------


def test_failures_too_frequent_stop_the_simulation_early() -> None:
    """Nodes that fail about a second after each hour-long repair: jobs rarely even run,
    and the run went on for 1.7 million simulated seconds (28,000 rounds of the danlu
    policy, most of a minute) before one job had lost 100 runs. The nodes' early failures
    stop it within a few repairs."""
    failures = Failures(mtbf=1.0, repair=3600.0, checkpoint_every=1.0)
    sim = Simulator(
        Cluster.homogeneous(16, 4),
        default_registry().create("tiresias"),
        synthetic_workload(jobs=200, seed=0),
        SimConfig(failures=failures),
    )
    with pytest.raises(ConfigError, match="fail too often") as caught:
        sim.run()
    assert "--node-mtbf" in str(caught.value) and "--checkpoint-every" in str(caught.value)
    assert sim._now < 10 * 3600.0  # (it was 1,710,665 s)


def _early(at: float) -> OutageEvent:
    return OutageEvent(at, NODE, 0, FAIL, checkpoint_every=1.0, up_for=0.5)


class _Record:
    def __init__(self, kept_runs: int = 0, keeps: bool = False) -> None:
        self.kept_runs = kept_runs
        self.keeps = keeps

    def keeps_training(self, now: float, checkpoint_every: float) -> bool:
        return self.keeps


def test_the_stall_watch_waits_for_a_full_row_without_progress() -> None:
    watch = StallWatch(restart_cost=30.0)
    record = _Record()
    results = [watch.stalled(_early(i), lambda: [record]) for i in range(MOST_FRUITLESS_FAILURES)]
    assert results == [False] * (MOST_FRUITLESS_FAILURES - 1) + [True]


def test_progress_or_a_long_spell_in_service_starts_the_row_over() -> None:
    record = _Record()
    watch = StallWatch(restart_cost=30.0)
    for i in range(MOST_FRUITLESS_FAILURES - 1):
        assert not watch.stalled(_early(i), lambda: [record])
    record.kept_runs = 1  # a run kept training meanwhile
    assert not watch.stalled(_early(100), lambda: [record])
    assert watch.early == 1
    record.keeps = True  # a running job has saved a checkpoint it would keep
    for i in range(MOST_FRUITLESS_FAILURES):
        assert not watch.stalled(_early(200 + i), lambda: [record])
    long_spell = OutageEvent(400.0, NODE, 0, FAIL, checkpoint_every=1.0, up_for=31.0)
    assert not watch.stalled(long_spell, lambda: [record]) and watch.early == 0


def test_outages_report_how_long_a_unit_was_in_service() -> None:
    outages = Outages(2, 8, Failures(mtbf=100.0, repair=50.0, seed=3), None, start=10.0)
    events = outages.due(2000.0)
    back: dict[int, float] = {}
    for event in events:
        if event.kind == FAIL:
            assert event.up_for == pytest.approx(event.time - back.get(event.unit, 10.0))
        else:
            assert event.up_for == math.inf
            back[event.unit] = event.time


def test_a_run_counts_as_kept_only_when_it_keeps_new_training() -> None:
    alloc = Allocation((GpuShare(0, 0, 1000, 0),))
    progress = RigidProgress(1000.0, restart_cost=30.0)
    progress.start(0.0, alloc)  # the first run pays no restart
    assert not progress.keeps_training(0.5, 1.0) and progress.keeps_training(1.5, 1.0)
    progress.fail(1.5, 1.0)  # keeps 1 s of its 1.5
    assert progress.kept_runs == 1
    progress.start(10.0, alloc)  # restarts (30 s), then redoes 0.5 s
    assert not progress.keeps_training(40.9, 1.0)  # no checkpoint yet
    progress.fail(40.9, 1.0)  # trained 0.9 s, saved none of it
    assert progress.kept_runs == 1 and not progress.keeps_training(40.9, 1.0)
    progress.start(50.0, alloc)
    progress.stop(81.0)  # a preemption keeps all it trained, beyond its redo
    assert progress.kept_runs == 2


# -- more of the same kind ------------------------------------------------------------------


def test_failures_that_cannot_advance_the_clock_are_refused() -> None:
    """Both at 1e-300 s: a node failed and came back at one instant for ever (a hang)."""
    with pytest.raises(ConfigError, match=r"mtbf \(1e-300 s\) plus repair \(1e-300 s\)"):
        Failures(mtbf=1e-300, repair=1e-300)
    assert Failures(mtbf=1e-300, repair=3600.0).repair == 3600.0  # still taken
    assert Failures(mtbf=3600.0, repair=1e-300).mtbf == 3600.0


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("a,1_000,1,60", "submit_time"),
        ("a,0,1,\u0666\u0660", "duration"),
        ("a,0,1_0,60", "gpus"),
        ("a,0,1,60,1_0", "priority"),
    ],
)
def test_workload_numbers_must_be_plain(tmp_path: Path, row: str, column: str) -> None:
    """Python's float read ``1_000`` as 1000 and Arabic-Indic ``٦٠`` as 60."""
    path = write(tmp_path, "w.csv", f"name,submit_time,gpus,duration,priority\n{row}\n")
    with pytest.raises(DataError, match=f"w.csv:2: column '{column}' must be a"):
        load_workload(path)


def test_plain_workload_numbers_still_load(tmp_path: Path) -> None:
    rows = "a, 1e2 ,1,60.5,-2\nb,+0,2.0,.5,\n"
    jobs = load_workload(
        write(tmp_path, "w.csv", "name,submit_time,gpus,duration,priority\n" + rows)
    )
    assert [(j.request.id, j.request.submit_time, j.request.gpus) for j in jobs.jobs] == [
        ("b", 0.0, 2),
        ("a", 100.0, 1),
    ]
    assert jobs.jobs[1].request.priority == -2


@pytest.mark.parametrize("bound", ["1_000", "\u0661\u0660"])
def test_plan_targets_must_be_plain_numbers(bound: str) -> None:
    with pytest.raises(ConfigError, match="the bound must be a number"):
        parse_target(f"preemptions<={bound}")
    assert parse_target("preemptions<=1e3").bound == 1000.0


TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "pollux" / "traces"


@pytest.mark.skipif(not (TRACES / "cifar10").is_dir(), reason="needs the Pollux traces")
def test_trace_cells_and_file_names_must_be_plain(tmp_path: Path) -> None:
    app = tmp_path / "cifar10"
    shutil.copytree(TRACES / "cifar10", app)
    assert load_profile(app).name == "cifar10"  # the copy loads
    placements = app / "placements.csv"
    text = placements.read_text()
    placements.write_text(text.replace("\n1,32,", "\n1,3_2,", 1))
    with pytest.raises(DataError, match=r"placements.csv:2: local_bsz='3_2' is not a number"):
        load_profile(app)
    placements.write_text(text)
    (app / "validation-128.csv").rename(app / "validation-\u0661\u0662\u0668.csv")
    with pytest.raises(DataError, match=r"expected validation-<batch size>.csv"):
        load_profile(app)


def test_a_multi_gpu_openb_pod_must_take_whole_gpus(tmp_path: Path) -> None:
    """A 2-GPU pod of 500 milli-GPU each used to run on two whole GPUs, silently."""
    bad = write(tmp_path, "w.csv", OPENB_HEADER + "p,1000,1024,2,500,,LS,Running,0,100,0\n")
    with pytest.raises(DataError, match=r"w\.csv:2: column 'gpu_milli' must be 1000 for a 2-GPU"):
        load_workload(bad)
    rows = "p,1000,1024,2,1000,,LS,Running,0,100,0\nq,1000,1024,4,,,LS,Running,0,100,0\n"
    jobs = load_workload(write(tmp_path, "ok.csv", OPENB_HEADER + rows)).jobs
    assert [(j.request.gpus, j.request.gpu_milli) for j in jobs] == [(2, 1000), (4, 1000)]


def test_failures_while_no_job_waits_or_runs_never_stall_the_simulation() -> None:
    """Between two arrivals a day apart the idle nodes fail, each well before a checkpoint
    could be saved, hundreds of times: nothing is stalled, as no work waits on them, and
    both jobs (a minute each) finish."""
    jobs = tuple(
        WorkloadJob(JobRequest(name, at, 1, seq=seq), RigidWork(60.0))
        for seq, (name, at) in enumerate((("first", 0.0), ("later", 86_400.0)))
    )
    failures = Failures(mtbf=600.0, repair=60.0, checkpoint_every=3600.0)
    sim = Simulator(
        Cluster.homogeneous(4, 1),
        default_registry().create("fifo"),
        Workload("gap", "test", jobs),
        SimConfig(failures=failures),
    )
    result = sim.run()
    assert sorted(record.id for record in result.jobs) == ["first", "later"]
    assert all(record.end_time is not None for record in result.jobs)
