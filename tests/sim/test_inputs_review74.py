"""The simulator's inputs and results: a workload row shorter than its header
crashed with a bare AttributeError, and one longer than it was misread (its values shifted
into the wrong columns, the last dropped); jobs built in code with one ``seq`` (JobRequest's
default) made the engine drop the wrong job from its queue, and the policy was blamed; a
job ending at 0.0 had a NaN JCT; a hidden folder beside the trace applications refused them
all; NumPy seeds broke the packing experiment's JSON."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_trace_inputs_review69 import APP, write_traces

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DataError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profile, load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.metrics import JobRecord
from danlu.sim.openb import OpenbPod, run_allocation_experiment, run_seed
from danlu.sim.workload import RigidWork, Workload, WorkloadJob, in_submission_order, load_workload

PLAIN = "name,submit_time,gpus,duration"


def write(tmp_path: Path, text: str, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- 1. rows shorter or longer than the header ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        (f"{PLAIN}\nj0,0,1,10\nj1,0,2\n", 3, "duration"),
        (f"{PLAIN}\nj1,0\n", 2, "duration"),
        ("name,time,application,num_replicas,batch_size\na,10,bert,1\n", 2, "batch_size"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66\n", 2, "num_gpus"),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
            "p,1000,1024,1,500,0\n",
            2,
            "deletion_time",
        ),
    ],
)
def test_a_row_shorter_than_the_header_names_the_missing_column(
    tmp_path: Path, text: str, line: int, column: str
) -> None:
    """It raised ``AttributeError: 'NoneType' object has no attribute 'isascii'``."""
    path = write(tmp_path, text)
    with pytest.raises(DataError, match=rf"column '{column}' is missing.*fewer fields") as info:
        load_workload(path)
    assert f"{path}:{line}:" in str(info.value)


def test_a_short_row_names_every_column_it_lacks(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"it lacks 'gpus', 'duration'"):
        load_workload(write(tmp_path, f"{PLAIN}\nj1,0\n"))


def test_a_row_with_a_value_beyond_the_header_is_refused_naming_its_line(tmp_path: Path) -> None:
    """A priority column missing from the header: ``j1,0,2,1,3600`` ran for 1 s (the
    priority's 1 read as the duration, the 3600 dropped)."""
    path = write(tmp_path, f"{PLAIN}\nj0,0,1,60\nj1,0,2,1,3600\n")
    with pytest.raises(DataError, match=r"5 fields but the header has 4 columns") as info:
        load_workload(path)
    assert f"{path}:3:" in str(info.value) and "'3600'" in str(info.value)


def test_an_unquoted_comma_in_a_name_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "name,time,application,num_replicas,batch_size\nbert,big,0,bert,1,12\n")
    with pytest.raises(DataError, match=r":2: 6 fields but the header has 5"):
        load_workload(path)


def test_empty_fields_beyond_the_header_are_still_read(tmp_path: Path) -> None:
    """A spreadsheet's trailing commas hold no value: the rows load as before."""
    path = write(tmp_path, f"{PLAIN}\nj1,0,2,3600,\nj2,5,1,60,,\n")
    jobs = {job.request.id: job for job in load_workload(path).jobs}
    assert jobs["j1"].work == RigidWork(3600.0) and jobs["j1"].request.gpus == 2
    assert jobs["j2"].work == RigidWork(60.0) and jobs["j2"].request.submit_time == 5.0


def test_a_trace_row_with_a_value_beyond_the_header_is_refused(tmp_path: Path) -> None:
    """Placement ``11`` written ``1,1``: read as placement 1 at local_bsz 1 taking 32 s."""
    folder = write_traces(tmp_path, {("placements.csv", 3): "1,1,32,0.10,0.01"})
    with pytest.raises(DataError, match=r"placements\.csv:3: 5 fields but the header has 4"):
        load_profile(folder)


def test_empty_fields_beyond_a_trace_header_are_still_read(tmp_path: Path) -> None:
    folder = write_traces(tmp_path, {("placements.csv", 3): "1,64,0.20,0.01,,"})
    assert load_profile(folder).step_time((1,), 64) == pytest.approx((0.20, 0.01))


# -- 2. jobs numbered alike --------------------------------------------------------------------


SHAPES = [(0.0, 1, 1000.0), (1.0, 2, 100.0), (2.0, 1, 100.0), (3.0, 1, 50.0), (4.0, 2, 10.0)]


def jobs(numbered: bool) -> list[WorkloadJob]:
    """Five jobs of ``SHAPES``; not ``numbered``: every ``seq`` left at JobRequest's 0."""
    out = []
    for i, (at, gpus, duration) in enumerate(SHAPES):
        request = JobRequest(
            f"j{i}",
            at,
            gpus,
            seq=i if numbered else 0,
            expected_duration=duration,
            priority=i,
        )
        out.append(WorkloadJob(request, RigidWork(duration)))
    return out


def test_jobs_of_one_seq_are_refused_when_the_simulator_is_built() -> None:
    """With every seq 0, a policy starting any job but the oldest made the engine drop the
    oldest from its queue: ``PlacementError: policy started j4, which is not pending``."""
    with pytest.raises(ConfigError, match=r"seq must increase.*'j1' has seq 0.*in_submission"):
        Simulator(
            Cluster.homogeneous(1, 2),
            make_policy("priority"),
            Workload("w", "t", tuple(jobs(False))),
        )


def test_jobs_numbered_by_in_submission_order_run_under_a_policy_that_skips_the_oldest() -> None:
    workload = Workload("w", "t", in_submission_order(jobs(False)))
    result = Simulator(Cluster.homogeneous(1, 2), make_policy("priority"), workload).run()
    starts = {record.id: record.start_time for record in result.jobs}
    assert len(starts) == 5 and not result.rejected
    assert starts["j4"] == 60.0 and starts["j0"] is not None and starts["j0"] > 60.0


# -- 3. a JCT of an end at 0.0 ---------------------------------------------------------------


def test_a_job_ending_at_time_zero_has_a_jct() -> None:
    record = JobRecord("a", -30.0, -30.0, 0.0, 1, 30.0, 0.0, 0)
    assert record.jct == 30.0
    assert math.isnan(JobRecord("b", 0.0, None, None, 1, 0.0, 0.0, 0).jct)


def test_a_zero_second_job_started_at_zero_counts_its_jct() -> None:
    request = JobRequest("a", 0.0, 1, expected_duration=0.0)
    workload = Workload("w", "t", (WorkloadJob(request, RigidWork(0.0)),))
    config = SimConfig(event_rounds=True)
    result = Simulator(Cluster.homogeneous(1, 1), make_policy("fifo"), workload, config).run()
    assert [record.end_time for record in result.jobs] == [0.0]
    assert result.summary()["avg_jct"] == 0.0
    assert result.to_json()["job_jcts"] == {"a": 0.0}


# -- 4. hidden folders beside the trace applications ---------------------------------------------


@pytest.mark.parametrize("hidden", [".ipynb_checkpoints", ".git"])
def test_a_hidden_folder_among_the_applications_is_skipped(tmp_path: Path, hidden: str) -> None:
    folder = write_traces(tmp_path)
    (folder.parent / hidden).mkdir()
    (folder.parent / hidden / "notes.txt").write_text("not an application\n")
    assert list(load_profiles(folder.parent)) == [APP]


def test_a_visible_folder_that_is_no_application_is_still_refused(tmp_path: Path) -> None:
    folder = write_traces(tmp_path)
    shutil.copytree(folder, folder.parent / "copy")
    (folder.parent / "copy" / "placements.csv").unlink()
    with pytest.raises(DataError, match=r"missing trace file .*copy.placements\.csv"):
        load_profiles(folder.parent)


# -- 5. NumPy seeds in the packing experiment ------------------------------------------------


def pods() -> list[OpenbPod]:
    return [OpenbPod(f"p{i}", ShareRequest(1000, 1024, 1, 500)) for i in range(4)]


def nodes() -> list[ShareNode]:
    return [ShareNode("a", 32_000, 65_536, 2, "T4")]


def test_numpy_seeds_give_json_results_equal_to_plain_seeds() -> None:
    """``json.dumps`` raised ``TypeError: Object of type int64 is not JSON serializable``."""
    numpy_run = run_allocation_experiment(
        pods(), nodes(), "best-fit", np.float32(1.0), np.arange(3)
    )
    plain_run = run_allocation_experiment(pods(), nodes(), "best-fit", 1.0, [0, 1, 2])
    payload = json.loads(json.dumps(numpy_run.to_json()))
    assert payload["seeds"] == [0, 1, 2] and payload["load"] == 1.0
    assert [s["seed"] for s in payload["per_seed"]] == [0, 1, 2]
    assert numpy_run.per_seed == plain_run.per_seed


def test_a_numpy_seed_for_one_seed_gives_a_plain_seed() -> None:
    result = run_seed(pods(), nodes(), "best-fit", 1.0, np.int64(7))
    assert type(result.seed) is int and result.seed == 7
    assert json.loads(json.dumps(result.to_json()))["seed"] == 7
