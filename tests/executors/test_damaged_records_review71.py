"""Damaged or hand-edited run records, and odd input, reach no raw Python exception and
make the executors touch no file but the run's own:

- a ``devices`` map without one of a launch's GPUs raised ``KeyError`` out of ``submit``;
- ``logs()``, the exit's classification and the Ray executor's appends followed the launch
  record's ``log_path``, which a job can rewrite to any file on the host;
- an empty exit record ``{}`` read as a run that FAILED, even while it still ran;
- a launch record without ``command`` (or with a ``user`` that is no account) crashed the
  supervisor with ``KeyError``/``AttributeError``, leaving no exit behind;
- a node's exit record with ``"exit_code": true`` read as exit 1, and a node name with a
  ``/`` named an exit file outside the run directory;
- a result record whose ``outcome`` is a list raised ``TypeError`` (unhashable) in every
  poll of a Slurm or Ray run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

from danlu.core.cluster import Cluster
from danlu.executors import (
    FakeExecutor,
    GpuSlot,
    Handle,
    InvalidLaunchError,
    JobLaunch,
    LocalExecutor,
    NodeLaunchError,
    Outcome,
    UnknownHandleError,
    records,
    slurm_task,
    supervise,
)
from danlu.executors.rundirs import RESULT_FIELDS
from danlu.executors.slurm import LAUNCH_FIELDS as SLURM_LAUNCH_FIELDS
from danlu.executors.slurm_exits import node_exits, recorded_exit

PY = sys.executable


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, cancel_grace=1.0
    )


def _rewrite(run_dir: Path, name: str, **fields: Any) -> None:
    """Change ``fields`` of the record ``name`` in ``run_dir`` (as a job could)."""
    data = supervise.read_json(run_dir / name) or {}
    (run_dir / name).write_text(json.dumps({**data, **fields}))


# -- 1. the devices map ---------------------------------------------------------------------


def test_a_gpu_missing_from_the_devices_map_is_a_node_launch_error(tmp_path: Path) -> None:
    ex = LocalExecutor(
        Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, devices={(0, 0): "3"}
    )
    assert ex.visible_devices(JobLaunch("a", ("x",), gpus=(GpuSlot(0, 0),))) == "3"
    job = JobLaunch("a", (PY, "-c", "pass"), gpus=(GpuSlot(0, 1),))
    with pytest.raises(NodeLaunchError, match=r"GPU 0/1 .*devices") as err:
        ex.visible_devices(job)
    assert err.value.nodes == ("node-0",)
    with pytest.raises(NodeLaunchError, match="devices"):
        ex.submit(job)
    assert ex.adopt() == []  # nothing was started
    with pytest.raises(InvalidLaunchError, match="GPU 7"):  # not the cluster's: no IndexError
        ex.visible_devices(JobLaunch("a", ("x",), gpus=(GpuSlot(0, 7),)))


# -- 2. the log is the executor's, never the record's ---------------------------------------


def test_logs_never_follow_the_launch_record_to_another_file(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"CUDA out of memory: not the job's\n")
    handle = ex.submit(launch("j", "import sys; print('mine'); sys.exit(1)"))
    status = wait(ex, handle)
    _rewrite(ex._runs / "j", supervise.LAUNCH, log_path=str(secret))
    ex = LocalExecutor(Cluster.homogeneous(1, 2), tmp_path / "state", base_env={})
    assert ex.logs(handle) == (b"mine\n", 5)
    assert ex.log_size(handle) == 5
    # the exit is classified on the job's own log: exit 1, FAILED, not the file's OOM
    assert status.outcome is Outcome.FAILED
    assert ex.poll(handle).outcome is Outcome.FAILED
    assert secret.read_bytes() == b"CUDA out of memory: not the job's\n"


def test_a_record_pointing_at_another_file_reads_the_job_s_log_before_it_exists(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not the job's\n")
    handle = ex.submit(launch("j", "pass"))
    wait(ex, handle)
    (tmp_path / "state" / "logs" / "j.log").unlink()  # the job's log is gone
    _rewrite(ex._runs / "j", supervise.LAUNCH, log_path=str(secret))
    assert ex.logs(handle) == (b"", 0)
    assert ex.log_size(handle) == 0


def test_a_launch_s_own_log_dir_is_read_while_the_executor_lives(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    logs = tmp_path / "elsewhere"
    handle = ex.submit(launch("j", "print('there')", log_dir=str(logs)))
    wait(ex, handle)
    assert (logs / "j.log").read_bytes() == b"there\n"
    assert ex.logs(handle) == (b"there\n", 6)
    ex.discard("j")
    assert (logs / "j.log").exists()  # the caller's, kept


def test_the_ray_executor_appends_to_the_job_s_log_not_the_record_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    fake = FakeRay([node("n1")]).install(monkeypatch)
    try:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ex = RayExecutor(tmp_path / "state", address=None, base_env=base)
        target = tmp_path / "target.txt"
        target.write_bytes(b"")
        handle = ex.submit(launch("r", "print('from the job')", gpus=(GpuSlot(0, 0),)))
        # before any poll, so before any output was appended
        _rewrite(tmp_path / "state" / "runs" / "r", supervise.LAUNCH, log_path=str(target))
        assert wait(ex, handle).outcome is Outcome.SUCCEEDED
        assert ex.logs(handle)[0] == b"from the job\n"
        assert target.read_bytes() == b""
    finally:
        fake.close_all()


# -- 3. an empty exit record ----------------------------------------------------------------


@pytest.mark.parametrize("text", ["{}", '{"signal": 9}', '{"finished_at": 5, "error": "x"}'])
def test_an_exit_record_without_exit_code_reads_as_missing(tmp_path: Path, text: str) -> None:
    (tmp_path / supervise.EXIT).write_text(text)
    assert records.read_exit(tmp_path) is None
    lost = {"exit_code": None, "signal": None, "error": "supervisor lost"}
    (tmp_path / supervise.EXIT).write_text(json.dumps(lost))
    assert records.read_exit(tmp_path) == lost


def test_a_running_job_with_an_empty_exit_record_still_runs(ex: LocalExecutor) -> None:
    handle = ex.submit(launch("long", "import time; time.sleep(60)"))
    try:
        (ex._runs / "long" / supervise.EXIT).write_text("{}")
        status = ex.poll(handle)
        assert status.running, status
    finally:
        ex.cancel(handle)
        wait(ex, handle)


# -- 4. the supervisor on a launch record it cannot start ----------------------------------


def _record(ex: LocalExecutor, name: str, **fields: Any) -> Path:
    run_dir = ex._runs / name
    run_dir.mkdir(parents=True)
    record = {"job_id": name, "attempt": 0, "launched_at": time.time(), "log_path": "x"}
    supervise.write_json(run_dir / supervise.LAUNCH, {**record, **fields})
    return run_dir


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, "command"),
        ({"command": "echo hi"}, "command"),
        ({"command": []}, "command"),
        ({"command": [PY, 1]}, "command"),
        ({"command": [PY, "-c", "pass"], "user": "root"}, "user"),
        ({"command": [PY, "-c", "pass"], "user": {"uid": "root", "gid": 0, "groups": []}}, "user"),
        ({"command": [PY, "-c", "pass"], "user": {"uid": 2**40, "gid": 0, "groups": []}}, "user"),
        ({"command": [PY, "-c", "pass"], "workdir": 5}, "workdir"),
    ],
    ids=["none", "string", "empty", "not-strings", "user-name", "uid-name", "uid-huge", "wd"],
)
def test_the_supervisor_records_a_launch_it_cannot_start_as_failed(
    ex: LocalExecutor, fields: dict[str, Any], named: str
) -> None:
    run_dir = _record(ex, "bad", **fields)
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = records.read_exit(run_dir)
    assert done is not None and done["exit_code"] == supervise.SPAWN_FAILED_EXIT_CODE
    assert f"{named}:" in done["error"]
    status = ex.poll(Handle("bad", 0))
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, 127)
    assert named in status.message and "launch the job again" in status.message
    assert not (run_dir / supervise.JOB).exists()  # nothing was started


# -- 5. and 6. the Slurm nodes' exit records ------------------------------------------------


def test_a_node_exit_of_true_is_no_exit(tmp_path: Path) -> None:
    launch_record = {"nodes": ["n1", "n2"]}
    for name, record in (("n1", {"exit_code": True}), ("n2", {"exit_code": 0})):
        slurm_task.exit_path(tmp_path, name).write_text(json.dumps(record))
    exits = node_exits(tmp_path, launch_record)
    assert exits == {"n2": (0.0, 0)}  # n1's true is no exit 1
    assert recorded_exit(exits, 2) is None  # n1's is not known yet: no failure
    slurm_task.exit_path(tmp_path, "n1").write_text('{"exit_code": 3, "finished_at": true}')
    assert node_exits(tmp_path, launch_record)["n1"] == (0.0, 3)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "a\0b"])
def test_a_node_name_that_is_no_plain_name_names_no_exit_file(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain name"):
        slurm_task.exit_path(tmp_path / "run", name)
    assert not SLURM_LAUNCH_FIELDS["nodes"](["n1", name])
    assert node_exits(tmp_path, {"nodes": [name]}) == {}


def test_a_node_name_with_a_slash_reads_no_file_below_the_run_directory(tmp_path: Path) -> None:
    (tmp_path / "exit-a").mkdir()
    (tmp_path / "exit-a" / "b.json").write_text('{"exit_code": 1}')  # "exit-" + "a/b"
    assert node_exits(tmp_path, {"nodes": ["a/b", "n1"]}) == {}


def test_plain_node_names_still_name_their_exit_files(tmp_path: Path) -> None:
    assert slurm_task.exit_path(tmp_path, "gpu-01.rack") == tmp_path / "exit-gpu-01.rack.json"
    assert slurm_task.exit_path(tmp_path, ".gpu1.123").name == "exit-.gpu1.123.json"  # a temp
    assert SLURM_LAUNCH_FIELDS["nodes"](["gpu-01", "gpu_02"])


# -- the result record ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage", [{"outcome": []}, {"outcome": {}}, {"started_at": True}, {"started_at": "nan"}]
)
def test_a_damaged_result_record_loses_the_damaged_field(damage: dict[str, Any]) -> None:
    result = {"outcome": "FAILED", "exit_code": 1, "started_at": 5.0, **damage}
    kept = records.checked(result, RESULT_FIELDS)
    assert kept is not None and kept["exit_code"] == 1
    (field,) = damage
    assert field not in kept


@pytest.mark.parametrize("text", [None, "{", "[1, 2]", "null"])
def test_the_slurm_task_without_a_readable_task_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None
) -> None:
    if text is not None:
        (tmp_path / slurm_task.TASK).write_text(text)
    assert slurm_task.main(["slurm_task.py", str(tmp_path)]) == 2
    assert "no readable task" in capsys.readouterr().err


def test_a_launch_record_naming_another_job_is_not_that_job_s(ex: LocalExecutor) -> None:
    """Its polls would find the other job's supervisor (and a Slurm run, the other job's
    Slurm jobs by name, cancelling them as duplicates)."""
    other = ex.submit(launch("b", "import time; time.sleep(60)"))
    try:
        handle = ex.submit(launch("a", "pass"))
        wait(ex, handle)
        _rewrite(ex._runs / "a", supervise.LAUNCH, job_id="b")
        with pytest.raises(UnknownHandleError):
            ex.poll(handle)
        assert ex.adopt() == [other]
        assert ex.poll(other).running
    finally:
        ex.cancel(other)
        wait(ex, other)


def test_a_ray_launch_record_names_only_its_run_s_own_actors() -> None:
    from danlu.executors.ray_records import LAUNCH_FIELDS as RAY_FIELDS
    from danlu.executors.ray_records import own_actors

    record = {"job_id": "a", "attempt": 2, "actors": ["danlu.a.2.0", "danlu.a.2.1"]}
    assert own_actors(dict(record)) == record
    for actors in (["danlu.b.0.0"], ["danlu.a.2.1"], ["danlu.a.2.0", "danlu.b.0.0"]):
        assert own_actors({**record, "actors": actors}) is None
    stop = {"actors": ["danlu.b.0.0"], "reason": "cancel", "grace": 1.0, "at": 5.0}
    assert RAY_FIELDS["unsignalled"](stop)
    assert "unsignalled" not in (own_actors({**record, "unsignalled": stop}) or {})
    assert not RAY_FIELDS["actors"]([])
    for damage in ({"grace": float("inf")}, {"at": True}, {"reason": "nap"}):
        assert not RAY_FIELDS["unsignalled"]({**stop, **damage})


def test_a_ray_run_whose_record_names_another_run_s_actors_leaves_them_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.executors.ray_executor import KILLED, RayExecutor

    fake = FakeRay([node("n1", gpus=2)]).install(monkeypatch)
    try:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ex = RayExecutor(tmp_path / "state", address=None, base_env=base, cancel_grace=1.0)
        other = ex.submit(launch("b", "import time; time.sleep(60)", gpus=(GpuSlot(0, 1),)))
        handle = ex.submit(launch("a", "pass", gpus=(GpuSlot(0, 0),)))
        wait(ex, handle)
        run_dir = tmp_path / "state" / "runs" / "a"
        _rewrite(run_dir, supervise.LAUNCH, actors=["danlu.b.0.0"])
        (run_dir / KILLED).unlink()  # as if a's actors were still to be killed
        with pytest.raises(UnknownHandleError):
            ex.poll(handle)
        # the next launch of a drops the record of its run: b's actor was killed with it
        ex.submit(launch("a", "pass", gpus=(GpuSlot(0, 0),), attempt=1))
        assert "danlu.b.0.0" not in fake.killed
        assert ex.poll(other).running
        ex.cancel(other)
        wait(ex, other)
    finally:
        fake.close_all()


# -- odd launches ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("restart_count", "1"),
        ("restart_count", 1.0),
        ("attempt", True),
        ("batch_size", "64"),
        ("micro_batch_limit", 2.5),
        ("preempt_grace", float("nan")),
        ("preempt_grace", -1.0),
        ("preempt_grace", "30"),
        ("gpus", ((0, 0),)),
    ],
)
def test_a_launch_with_a_field_of_the_wrong_type_names_it(field: str, value: Any) -> None:
    with pytest.raises(InvalidLaunchError) as err:
        JobLaunch("a", ("x",), **{field: value})
    assert err.value.field == field


@pytest.mark.parametrize(
    "slot", [{"node": "0", "gpu": 0}, {"node": 0, "gpu": 1.0}, {"node": 0, "gpu": 0, "memory": "1"}]
)
def test_a_gpu_slot_of_other_than_whole_numbers_is_refused(slot: dict[str, Any]) -> None:
    with pytest.raises(InvalidLaunchError, match="whole number") as err:
        GpuSlot(**slot)
    assert err.value.field == "gpus"


def test_whole_numbers_of_other_int_types_are_taken_as_ints() -> None:
    np = pytest.importorskip("numpy")
    slot = GpuSlot(np.int64(1), np.int32(2), np.int64(1 << 30))
    assert (slot.node, slot.gpu, slot.memory) == (1, 2, 1 << 30)
    assert type(slot.node) is int
    job = JobLaunch("a", ("x",), restart_count=np.int64(3), batch_size=np.int64(8))
    assert (job.restart_count, job.per_gpu_batch) == (3, 8)


@pytest.mark.parametrize(
    ("offset", "limit", "field"), [(-1, 10, "offset"), ("0", 10, "offset"), (0, 0, "limit")]
)
def test_a_log_read_from_a_bad_range_names_the_field(
    ex: LocalExecutor, offset: Any, limit: Any, field: str
) -> None:
    handle = ex.submit(launch("j", "print('hello')"))
    wait(ex, handle)
    fake = FakeExecutor(Cluster.homogeneous(1, 1))
    fake_handle = fake.submit(JobLaunch("j", ("x",)))
    for executor, run in ((ex, handle), (fake, fake_handle)):
        with pytest.raises(InvalidLaunchError) as err:
            executor.logs(run, offset, limit)
        assert err.value.field == field
    assert fake.logs(fake_handle, 0, 10)[1] >= 0
