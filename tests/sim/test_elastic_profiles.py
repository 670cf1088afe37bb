"""Tests of the profiled application model (danlu.sim.elastic) on the Pollux traces."""

from __future__ import annotations

import csv
import shutil
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DanluError, DataError
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import (
    ApplicationProfile,
    BatchConfig,
    JobProgress,
    OutOfProfileError,
    canonical_placement,
    load_profile,
    load_profiles,
)
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload

# Shared data lives beside the project root: ../shared/data/pollux/traces
TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pollux" / "traces"
APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")


@pytest.fixture(scope="module")
def profiles() -> dict[str, ApplicationProfile]:
    return load_profiles(TRACES)


def _placement_rows(app: str) -> list[dict[str, str]]:
    with (TRACES / app / "placements.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_loads_every_application(profiles: dict[str, ApplicationProfile]) -> None:
    assert sorted(profiles) == sorted(APPS)
    for name, profile in profiles.items():
        assert profile.name == name
        assert profile.init_batch_size == min(profile.validated_batch_sizes)
        assert profile.max_batch_size == max(profile.validated_batch_sizes)
        assert len(profile.epoch_boundaries) == profile.max_epochs
        assert profile.target_progress == profile.epoch_boundaries[-1] > 0
        assert all(a < b for a, b in pairwise(profile.epoch_boundaries))


def test_artifact_settings(profiles: dict[str, ApplicationProfile]) -> None:
    epochs = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80}
    for app, n in epochs.items():
        assert profiles[app].max_epochs == n
    assert profiles["yolov3"].max_epochs == 50
    assert profiles["yolov3"].max_local_bsz == 8  # capped although 16 was measured
    assert profiles["cifar10"].init_batch_size == 128
    assert (profiles["cifar10"].min_local_bsz, profiles["cifar10"].max_local_bsz) == (32, 1024)
    # bert: both validation files end epoch 1 at different progress; the minimum is used.
    assert profiles["bert"].epoch_boundaries[0] == pytest.approx(7387.0)


@pytest.mark.parametrize("app", APPS)
def test_step_time_matches_csv_at_measured_points(
    profiles: dict[str, ApplicationProfile], app: str
) -> None:
    profile = profiles[app]
    rows = _placement_rows(app)
    for row in rows[:: max(1, len(rows) // 60)]:
        placement = tuple(int(c) for c in row["placement"])
        step, sync = profile.step_time(placement, float(row["local_bsz"]))
        assert step == pytest.approx(float(row["step_time"]), rel=1e-12)
        assert sync == pytest.approx(float(row["sync_time"]), rel=1e-12)
        # any rotation of the placement is the same measurement
        rotated = placement[1:] + placement[:1]
        assert profile.step_time(rotated, float(row["local_bsz"])) == (step, sync)


def test_step_time_between_measured_points(profiles: dict[str, ApplicationProfile]) -> None:
    cifar = profiles["cifar10"]
    lo, hi = cifar.step_time((1,), 32), cifar.step_time((1,), 45)
    mid = cifar.step_time((1,), 38.5)
    assert mid[0] == pytest.approx((lo[0] + hi[0]) / 2)
    assert mid[1] == pytest.approx((lo[1] + hi[1]) / 2)
    # bigger per-GPU batches take longer on one GPU
    times = [cifar.step_time((1,), b)[0] for b in range(32, 1025, 7)]
    assert all(a <= b for a, b in pairwise(times))
    assert all(0 < cifar.step_time((2, 2), b)[1] < cifar.step_time((2, 2), b)[0] for b in (40, 300))


def test_step_time_interpolates_unmeasured_placements(
    profiles: dict[str, ApplicationProfile],
) -> None:
    imagenet = profiles["imagenet"]
    # 8 full nodes = a scalability.csv row (8 nodes, 32 replicas, local 200)
    with (TRACES / "imagenet" / "scalability.csv").open() as handle:
        row = next(
            r
            for r in csv.DictReader(handle)
            if (r["num_nodes"], r["num_replicas"], r["local_bsz"]) == ("8", "32", "200")
        )
    step, sync = imagenet.step_time((4,) * 8, 200)
    assert step == pytest.approx(float(row["step_time"]))
    assert sync == pytest.approx(float(row["sync_time"]))
    # a 5-node placement lies between measured 4-node and 6-node data
    s5 = imagenet.step_time((4, 4, 4, 3, 1), 200)[0]
    assert 0 < s5 < 2 * step
    with pytest.raises(OutOfProfileError):
        imagenet.step_time((1,), 10_000)
    with pytest.raises(OutOfProfileError):
        imagenet.step_time((), 100)


def test_vector_accessors_agree_with_the_scalar_ones(
    profiles: dict[str, ApplicationProfile],
) -> None:
    imagenet = profiles["imagenet"]
    measured = imagenet.measured_placements
    assert (1, 1, 2, 2) in measured
    xs, steps, syncs = measured[(4,)]
    assert imagenet.step_time((4,), float(xs[1])) == (float(steps[1]), float(syncs[1]))
    points = np.array([[5.0, 17.0, 200.0], [8.0, 32.0, 100.0], [20.0, 64.0, 100.0], [1, 1, 1e6]])
    out = imagenet.interpolated_step_times(points)
    assert tuple(out[0]) == pytest.approx(imagenet.step_time((4, 4, 4, 4, 1), 200))
    assert tuple(out[1]) == pytest.approx(imagenet.step_time((4,) * 8, 100))
    # nodes are clamped to 16 as step_time clamps them
    assert tuple(out[2]) == pytest.approx(imagenet.step_time((4,) * 4 + (3,) * 16, 100))
    assert np.isnan(out[3]).all()
    cifar = profiles["cifar10"]
    sqr, var = cifar.grad_stats_many(np.array([128.0, 320.0, 4096.0]), 3)
    for i, batch in enumerate((128, 320, 4096)):
        assert (sqr[i], var[i]) == pytest.approx(cifar.grad_stats(batch, 3))


def test_canonical_placement() -> None:
    assert canonical_placement((2, 2, 1, 1)) == (1, 1, 2, 2)
    assert canonical_placement((2, 1, 2, 1)) == (1, 2, 1, 2)
    assert canonical_placement((0, 4, 0, 2)) == (2, 4)
    assert canonical_placement((0, 0)) == ()


@pytest.mark.parametrize("app", APPS)
def test_efficiency_one_at_initial_batch_below_above(
    profiles: dict[str, ApplicationProfile], app: str
) -> None:
    profile = profiles[app]
    for progress in (0.0, profile.target_progress / 2):
        assert profile.efficiency(progress, profile.init_batch_size) == pytest.approx(1.0)
        for batch in profile.validated_batch_sizes[1:]:
            eff = profile.efficiency(progress, batch)
            assert 0 < eff < 1
            # progress per iteration still grows with the batch
            assert profile.gain(batch, profile.epoch_at(progress)) > 1


def test_gain_interpolates_gradient_statistics(profiles: dict[str, ApplicationProfile]) -> None:
    cifar = profiles["cifar10"]
    sqr_lo, var_lo = cifar.grad_stats(256, 3)
    sqr_hi, var_hi = cifar.grad_stats(512, 3)
    sqr, var = cifar.grad_stats(320, 3)
    assert sqr == pytest.approx(0.75 * sqr_lo + 0.25 * sqr_hi)
    assert var == pytest.approx(0.75 * var_lo + 0.25 * var_hi)
    scale = 320 / 128
    assert cifar.gain(320, 3) == pytest.approx((var + sqr) / (var / scale + sqr))
    with pytest.raises(OutOfProfileError):
        cifar.grad_stats(64, 0)
    with pytest.raises(OutOfProfileError):
        cifar.grad_stats(256, cifar.max_epochs)


def test_rigid_config_follows_artifact_rules(profiles: dict[str, ApplicationProfile]) -> None:
    assert profiles["cifar10"].rigid_config(6, 2048) == BatchConfig(6, 342, 0)
    # one replica above the initial batch always accumulates at least once
    assert profiles["ncf"].rigid_config(1, 32768) == BatchConfig(1, 16384, 1)
    # yolov3's 8-per-GPU cap forces accumulation
    assert profiles["yolov3"].rigid_config(4, 64) == BatchConfig(4, 8, 1)
    # bert: ceil() rounding overshoots, then the cap to max_batch_size trims the micro-batch
    bert = profiles["bert"].rigid_config(6, 384)
    assert bert == BatchConfig(6, 10, 5)
    assert bert.batch_size == 360 <= profiles["bert"].max_batch_size


def _run_solo(profile: ApplicationProfile, placement: tuple[int, ...], batch: int) -> float:
    job = JobProgress(profile)
    job.restart()
    elapsed = 0.0
    for _ in range(100_000):
        elapsed += job.advance(60, placement, batch)
        if job.done:
            return elapsed
    raise AssertionError("job never completed")


def test_advance_completes_at_target_with_partial_seconds(
    profiles: dict[str, ApplicationProfile],
) -> None:
    ncf = profiles["ncf"]
    job = JobProgress(ncf)
    job.restart()
    first = job.advance(60, (1,), 32768)
    assert first == 60 and not job.done
    assert 0 < job.progress < ncf.target_progress
    second = job.advance(60, (1,), 32768)
    assert job.done
    assert 0 < second < 60
    assert second == int(second)  # whole seconds, as in the artifact
    assert job.progress == ncf.target_progress
    assert job.epoch == ncf.max_epochs
    assert job.fraction == 1.0
    assert job.advance(60, (1,), 32768) == 0.0
    assert job.attained_service == pytest.approx(first + second)


def test_solo_runs_match_published_artifact_times(
    profiles: dict[str, ApplicationProfile],
) -> None:
    # Jobs that the published Tiresias runs started at once, alone on their nodes:
    # workload-4 ncf-59 submitted at 12180 (a scheduling instant) -> JCT 77 s;
    # workload-4 bert-86 submitted at 17758 -> started at 17760 -> JCT 2491 s.
    assert _run_solo(profiles["ncf"], (1,), 32768) == 77
    assert _run_solo(profiles["bert"], (4, 4), 384) + 2 == 2491


def test_restart_costs_time_without_progress(profiles: dict[str, ApplicationProfile]) -> None:
    cifar = profiles["cifar10"]
    job = JobProgress(cifar)
    job.restart(30)
    assert job.advance(20, (4, 2), 2048) == 20
    assert job.progress == 0 and job.restart_remaining == 10
    assert job.advance(0, (4, 2), 2048) == 0
    job.advance(60, (4, 2), 2048)
    fresh = JobProgress(cifar)
    fresh.advance(50, (4, 2), 2048)
    assert job.progress == pytest.approx(fresh.progress)
    assert job.attained_service == pytest.approx(80 * 6)
    # without GPUs nothing moves, not even the restart countdown
    idle = JobProgress(cifar)
    idle.restart()
    assert idle.advance(60, (), 2048) == 60
    assert idle.progress == 0 and idle.restart_remaining == 30


def test_advance_uses_explicit_config_and_checks_it(
    profiles: dict[str, ApplicationProfile],
) -> None:
    cifar = profiles["cifar10"]
    small, large = JobProgress(cifar), JobProgress(cifar)
    small.advance(60, (4,), config=BatchConfig(4, 32, 0))
    large.advance(60, (4,), config=BatchConfig(4, 256, 0))
    assert small.progress > 0 and large.progress > 0 and small.progress != large.progress
    with pytest.raises(OutOfProfileError):
        JobProgress(cifar).advance(60, (4,), config=BatchConfig(2, 32, 0))
    with pytest.raises(OutOfProfileError):
        JobProgress(cifar).advance(60, (4,))


def test_missing_folder_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="nowhere"):
        load_profiles(missing)
    with pytest.raises(DataError, match="nowhere"):
        load_profile(missing)
    assert issubclass(DataError, DanluError)
    with pytest.raises(DataError, match="no application"):
        load_profiles(tmp_path)


def test_bad_files_raise_data_error(tmp_path: Path) -> None:
    app = tmp_path / "cifar10"
    shutil.copytree(TRACES / "cifar10", app)
    (app / "scalability.csv").unlink()
    with pytest.raises(DataError, match=r"scalability\.csv"):
        load_profile(app)
    shutil.copy(TRACES / "cifar10" / "scalability.csv", app / "scalability.csv")
    placements = app / "placements.csv"
    lines = placements.read_text().splitlines()
    lines[3] = "11,abc,0.1,0.01"
    placements.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"placements\.csv:4"):
        load_profile(app)
    placements.write_text("placement,local_bsz\n1,32\n")
    with pytest.raises(DataError, match="step_time"):
        load_profile(app)
    shutil.copy(TRACES / "cifar10" / "placements.csv", placements)
    for path in app.glob("validation-*.csv"):
        path.unlink()
    with pytest.raises(DataError, match="validation"):
        load_profile(app)


@pytest.mark.parametrize(
    ("row", "gpus_per_node", "error", "message"),
    [
        (
            "ncf-0,0,ncf,1,1",
            4,
            DataError,
            r"job ncf-0: batch_size 1 is outside .* \(256\.\.32768\)",
        ),
        ("ncf-0,0,ncf,1,100000", 4, DataError, r"batch_size 100000 is outside"),
        (
            "cifar10-0,0,cifar10,16,128",
            4,
            DataError,
            r"on its 16 GPUs gives each a micro-batch of 8,",
        ),
        ("cifar10-0,0,cifar10,1,128", 8, ConfigError, r"at most 4 GPUs of one node.*nodes of 8"),
    ],
)
def test_a_job_its_profile_cannot_simulate_is_refused_before_the_run(
    profiles: dict[str, ApplicationProfile],
    tmp_path: Path,
    row: str,
    gpus_per_node: int,
    error: type[Exception],
    message: str,
) -> None:
    """These failed mid-run with an error blaming the policy that ran the job."""
    path = tmp_path / "w.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size\n{row}\n")
    workload = load_workload(path)
    cluster = Cluster.homogeneous(4, gpus_per_node)
    for policy in ("danlu", "tiresias"):
        with pytest.raises(error, match=message):
            Simulator(cluster, make_policy(policy), workload, SimConfig(), profiles).run()
