"""Profiled (Pollux) jobs that a policy places on shares of a GPU are slowed by the
interference model as rigid shared jobs are: their iterations take ``1 / rate`` as long (and
they measure it), their restarts do not, and they speed up again when the job beside them
leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.sched.view import ClusterView, Plan, Start
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.interference import Interference
from danlu.sim.metrics import SimResult
from danlu.sim.progress import ProfiledProgress
from danlu.sim.workload import load_workload

TRACES = Path(__file__).parents[2] / ".." / "shared" / "data" / "pollux" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")

HALF = Interference({}, default=0.5)
"""Any job beside any other runs at half its speed (the families are unknown here)."""
RESTART = 30.0


class HalfGpuEach:
    """Starts every pending job on half of GPU 0 of node 0."""

    name = "half-gpu-each"

    def schedule(self, view: ClusterView) -> Plan:
        half = Allocation((GpuShare(0, 0, 500),))
        return Plan(starts=tuple(Start(j.id, half) for j in view.pending))


@pytest.fixture(scope="module")
def profiles() -> dict[str, ApplicationProfile]:
    return dict(load_profiles(TRACES))


def simulate(
    tmp_path: Path,
    rows: list[str],
    profiles: dict[str, ApplicationProfile],
    interference: Interference | None,
) -> SimResult:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    return Simulator(
        Cluster.homogeneous(1, 1),
        HalfGpuEach(),
        load_workload(path),
        SimConfig(interval=60.0, restart_cost=RESTART, interference=interference),
        profiles,
    ).run()


def test_two_jobs_on_one_gpu_train_at_the_rate_beside_each_other(
    tmp_path: Path, profiles: dict[str, ApplicationProfile]
) -> None:
    rows = ["cifar10-0,0,cifar10,1,128", "cifar10-1,0,cifar10,1,128"]
    free = simulate(tmp_path, rows, profiles, None)
    slowed = simulate(tmp_path, rows, profiles, HALF)
    # epochs end on whole seconds (as in the Pollux artifact): up to a second an epoch apart
    slack = float(profiles["cifar10"].max_epochs)
    for fast, slow in zip(free.jobs, slowed.jobs, strict=True):
        assert fast.start_time == slow.start_time == 60.0
        assert fast.end_time is not None and slow.end_time is not None
        trained = fast.end_time - fast.start_time - RESTART
        took = slow.end_time - slow.start_time - RESTART
        # twice as long to train; the restart is not slowed
        assert took == pytest.approx(2 * trained, abs=slack)
        assert took > 1.9 * trained
        assert fast.interference_seconds == 0.0
        assert slow.interference_seconds == pytest.approx(0.5 * took)
        # at the half GPU each held
        assert slow.interference_gpu_seconds == pytest.approx(0.25 * took)
        assert slow.gpu_seconds == pytest.approx(0.5 * (slow.end_time - slow.start_time))


def test_a_job_speeds_up_when_the_job_beside_it_leaves(
    tmp_path: Path, profiles: dict[str, ApplicationProfile]
) -> None:
    rows = ["cifar10-0,0,cifar10,1,128", "ncf-1,0,ncf,1,32768"]
    free = simulate(tmp_path, rows, profiles, None)
    slowed = simulate(tmp_path, rows, profiles, HALF)
    cifar_free, ncf_free = (next(j for j in free.jobs if j.id == i) for i in ("cifar10-0", "ncf-1"))
    cifar, ncf = (next(j for j in slowed.jobs if j.id == i) for i in ("cifar10-0", "ncf-1"))
    slack = float(profiles["cifar10"].max_epochs + profiles["ncf"].max_epochs)
    assert ncf.end_time is not None and ncf_free.end_time is not None
    assert cifar.end_time is not None and cifar_free.end_time is not None
    assert ncf.end_time < cifar_free.end_time  # the short job leaves first
    ncf_trained = ncf_free.end_time - ncf_free.start_time - RESTART
    assert ncf.end_time - ncf.start_time - RESTART == pytest.approx(2 * ncf_trained, abs=slack)
    # cifar10 ran at half speed while ncf was beside it, then at full speed (from the
    # first instant after ncf left: stepwise jobs take a new rate interval by interval)
    lost = cifar.end_time - cifar_free.end_time
    beside = ncf.end_time - (60.0 + RESTART)
    assert 0.5 * beside - slack <= lost <= 0.5 * beside + 60.0 + slack
    assert lost > 0.4 * beside
    assert cifar.interference_seconds == pytest.approx(lost, abs=slack)


def test_a_slowed_job_measures_its_slower_steps(profiles: dict[str, ApplicationProfile]) -> None:
    progress = ProfiledProgress(profiles["cifar10"], batch_size=128)
    progress.start(0.0, Allocation((GpuShare(0, 0, 500),)))
    alone = dict(progress.observe())
    progress.set_rate(0.0, 0.5)
    beside = progress.observe()
    assert beside["step_time"] == pytest.approx(2 * alone["step_time"])
    assert beside["sync_time"] == pytest.approx(2 * alone["sync_time"])
    assert beside["local_bsz"] == alone["local_bsz"]


def test_a_restart_runs_at_full_speed_until_the_engine_slows_it_again(
    profiles: dict[str, ApplicationProfile],
) -> None:
    progress = ProfiledProgress(profiles["cifar10"], batch_size=128)
    progress.start(0.0, Allocation((GpuShare(0, 0, 500),)))
    alone = dict(progress.observe())
    progress.set_rate(0.0, 0.5)
    progress.stop(100.0)
    progress.start(100.0, Allocation((GpuShare(0, 1),)))  # preempted, back on a whole GPU
    assert progress.rate == 1.0
    assert progress.observe()["step_time"] == pytest.approx(alone["step_time"])
    with pytest.raises(ValueError, match="rate"):
        progress.set_rate(100.0, 0.0)
