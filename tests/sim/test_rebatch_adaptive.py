"""Restart-free batch changes in the simulator: a Rebatch keeps the job's GPUs and costs no
restart; an adaptive run re-picks its goodput-optimal batch in-process from what it measured;
only runs the scheduler lets adapt, of applications that adapt, do; other policies' runs are
untouched."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import PlacementError
from danlu.sched.view import ClusterView, Plan, Rebatch, Resize, Start
from danlu.sim.adapt import profile_tuner
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, OutOfProfileError, load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.progress import ProfiledProgress, RigidProgress
from danlu.sim.workload import load_workload

TRACES = Path(__file__).parents[2] / ".." / "shared" / "data" / "pollux" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")
FOUR = Allocation.whole_gpus([(0, 0), (0, 1), (0, 2), (0, 3)])


@pytest.fixture(scope="module")
def profiles() -> dict[str, ApplicationProfile]:
    return dict(load_profiles(TRACES))


@dataclass
class Scripted:
    """Starts the job on four GPUs in round 1, then does ``second`` in round 2."""

    second: str
    name: str = "scripted"
    seen: list[tuple[float, Allocation, float]] = field(default_factory=list)

    def schedule(self, view: ClusterView) -> Plan:
        for job in view.running:
            self.seen.append((view.time, job.allocation, job.observed["batch_size"]))
        if view.pending:
            return Plan(starts=(Start(view.pending[0].id, FOUR, 512),))
        if len(self.seen) == 1 and self.second == "rebatch":
            return Plan(rebatches=(Rebatch(view.running[0].id, 1024),))
        if len(self.seen) == 1 and self.second == "resize":
            return Plan(resizes=(Resize(view.running[0].id, FOUR, 1024),))
        return Plan()


def simulate(
    tmp: Path, profiles: dict[str, ApplicationProfile], second: str
) -> tuple[Scripted, float, float, int]:
    path = tmp / "one.csv"
    path.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,4,512\n")
    policy = Scripted(second)
    result = Simulator(
        Cluster.homogeneous(1, 4), policy, load_workload(path), SimConfig(), profiles
    ).run()
    (record,) = result.jobs
    assert record.end_time is not None
    assert result.summary()["restarts"] == record.restarts == record.resizes
    return policy, record.end_time, record.restart_gpu_seconds, record.restarts


def test_rebatch_keeps_the_gpus_and_costs_no_restart(
    tmp_path: Path, profiles: dict[str, ApplicationProfile]
) -> None:
    rebatched, end_rebatch, restart_rebatch, restarts = simulate(tmp_path, profiles, "rebatch")
    _, end_resize, restart_resize, resized_restarts = simulate(tmp_path, profiles, "resize")
    assert (restarts, resized_restarts) == (0, 1)  # a resize is a restart, a rebatch is not
    assert {alloc for _, alloc, _ in rebatched.seen} == {FOUR}  # same GPUs throughout
    batches = [batch for _, _, batch in rebatched.seen]
    assert batches[0] == 512 and set(batches[1:]) == {1024}
    assert restart_rebatch == 30.0 * 4  # the first start only
    assert restart_resize == 2 * 30.0 * 4  # the resize paid a second restart
    assert end_resize == pytest.approx(end_rebatch + 30.0, abs=1.0)


def test_rebatch_of_a_job_not_running_is_refused(
    tmp_path: Path, profiles: dict[str, ApplicationProfile]
) -> None:
    @dataclass
    class Bad:
        name: str = "bad"

        def schedule(self, view: ClusterView) -> Plan:
            return Plan(rebatches=(Rebatch(view.pending[0].id, 256),))

    path = tmp_path / "one.csv"
    path.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,4,512\n")
    sim = Simulator(Cluster.homogeneous(1, 4), Bad(), load_workload(path), SimConfig(), profiles)
    with pytest.raises(PlacementError, match="not running"):
        sim.run()


def test_a_start_outside_the_profile_names_the_policy_job_and_fix(
    tmp_path: Path, profiles: dict[str, ApplicationProfile]
) -> None:
    """yolov3 at batch 64 on 28 GPUs would run 3 samples per GPU, below what its profile
    measured: the run stops with an error that says whose choice it was and what to change."""
    wide = Allocation.whole_gpus([(node, gpu) for node in range(7) for gpu in range(4)])

    @dataclass
    class Wide:
        name: str = "wide"

        def schedule(self, view: ClusterView) -> Plan:
            if not view.pending:
                return Plan()
            return Plan(starts=(Start(view.pending[0].id, wide),))

    path = tmp_path / "one.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nyolov3-0,0,yolov3,4,64\n")
    sim = Simulator(Cluster.homogeneous(8, 4), Wide(), load_workload(path), SimConfig(), profiles)
    with pytest.raises(OutOfProfileError) as caught:
        sim.run()
    message = str(caught.value)
    for part in ("policy 'wide'", "job 'yolov3-0'", "28 GPUs (7 nodes)", "its own batch"):
        assert part in message
    assert "fewer GPUs" in message and "local batch 3" in message


def true_goodput(profile: ApplicationProfile, replicas: int, batch: int, epoch: int) -> float:
    config = profile.rigid_config(replicas, batch)
    time = profile.iteration_time((replicas,), config)
    return profile.gain(config.batch_size, epoch) / time


def true_best(profile: ApplicationProfile, replicas: int, epoch: int) -> float:
    """Brute force over every global batch the job could run (the oracle the job lacks)."""
    best = 0.0
    for batch in range(profile.init_batch_size, profile.max_batch_size + 1, replicas):
        config = profile.rigid_config(replicas, batch)
        if config.atomic_bsz < profile.min_local_bsz or config.batch_size < batch - replicas:
            continue
        best = max(best, true_goodput(profile, replicas, config.batch_size, epoch))
    return best


def test_adaptive_run_moves_to_the_goodput_optimum(
    profiles: dict[str, ApplicationProfile],
) -> None:
    profile = profiles["cifar10"]
    adaptive = ProfiledProgress(profile, 128)
    fixed = ProfiledProgress(profile, 128)
    adaptive.start(0.0, FOUR, 128, adaptive=True)
    fixed.start(0.0, FOUR, 128, adaptive=False)
    for k in range(15):
        adaptive.advance(60.0 * k, 60.0)
        fixed.advance(60.0 * k, 60.0)
    assert fixed.batch_size == 128  # not adaptive: the batch it was given
    epoch = adaptive.job.epoch
    reached = true_goodput(profile, 4, adaptive.batch_size, epoch)
    start = true_goodput(profile, 4, 128, epoch)
    assert adaptive.batch_size != 128
    assert reached >= 0.95 * true_best(profile, 4, epoch)
    assert reached > 1.2 * start
    assert adaptive.job.progress > fixed.job.progress  # and it got further
    assert adaptive.restart_seconds == fixed.restart_seconds == 30.0  # no restart for it


def test_only_consenting_runs_of_adaptive_applications_adapt(
    profiles: dict[str, ApplicationProfile],
) -> None:
    ncf = ProfiledProgress(profiles["ncf"], 32768)
    assert "adaptive" not in ncf.observe()  # NCF's batch is fixed (as in Pollux's runs)
    ncf.start(0.0, FOUR, None, adaptive=True)
    ncf.advance(0.0, 60.0)
    assert ncf.batch_size == 32768 and not ncf.adaptive
    cifar = ProfiledProgress(profiles["cifar10"], 128)
    assert cifar.observe()["adaptive"] == 1.0
    cifar.start(0.0, FOUR)  # what every other policy does: no consent
    for k in range(5):
        cifar.advance(60.0 * k, 60.0)
    assert cifar.batch_size == 128
    cifar.rebatch(300.0, 256, adaptive=True)  # consent given by a rebatch
    for k in range(5, 10):
        cifar.advance(60.0 * k, 60.0)
    assert cifar.adaptive and cifar.batch_size != 256


def test_self_tuner_knows_nothing_before_it_measured(
    profiles: dict[str, ApplicationProfile],
) -> None:
    tuner = profile_tuner(profiles["cifar10"])
    assert tuner.choose((4,)) is None
    tuner.measure((4,), 128, 0.11, 0.005, (1.0, 50.0))
    assert tuner.choose((2, 2)) is None  # sync on two nodes never measured
    chosen = tuner.choose((4,))
    assert chosen is not None and 128 <= chosen <= 4096


def test_restart_gpu_seconds_count_the_gpus_of_each_run(
    profiles: dict[str, ApplicationProfile],
) -> None:
    """A job restarted on 4 GPUs, then on 1, wastes 30 s x 4 + 30 s x 1 GPU-seconds."""
    job = ProfiledProgress(profiles["cifar10"], 128)
    job.start(0.0, FOUR, 128)  # the first start is charged the restart cost too
    job.advance(0.0, 60.0)
    job.stop(60.0)
    job.start(60.0, Allocation.whole_gpus([(1, 0)]), 128)
    job.advance(60.0, 60.0)
    assert job.restart_seconds == 60.0
    assert job.restart_gpu_seconds == 30.0 * 4 + 30.0 * 1


def test_rigid_restart_gpu_seconds() -> None:
    job = RigidProgress(1000.0, restart_cost=30.0)
    job.start(0.0, FOUR)  # the first start costs nothing
    job.stop(100.0)
    job.start(200.0, FOUR)
    job.stop(210.0)  # stopped 10 s into its 30 s restart
    assert (job.restart_seconds, job.restart_gpu_seconds) == (10.0, 40.0)
