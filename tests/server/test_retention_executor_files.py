"""The retention's purge of what an executor keeps of a finished job: a capped log's older
part (``JOB_ID.log.1``) goes with the log, and a Slurm job's working directory
(``{home}/executor/work/JOB_ID``) that a later job's spec names, as its ``checkpoint_dir`` or
its ``workdir``, stays: it is that job's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.executors.local import LocalExecutor
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands
from danlu.server.db import Database
from danlu.server.plane_lease import EXECUTOR_STATE
from danlu.server.purge import Purger
from danlu.server.services import jobs, retention, users

NOW = 1_000_000.0
DAY = 86_400.0
NODE = Node("a", 4, gpu_type("H100"))


class NoSlurm(SlurmCommands):
    """Slurm's commands, none of which a purge of a job without run records needs."""

    def __init__(self) -> None:
        super().__init__({})

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        raise AssertionError(f"no Slurm command is expected: {list(argv)}")


def _cancelled(db: Database, **extra: Any) -> str:
    """A job of alice's cancelled while queued, at ``NOW + 1``."""
    body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}, **extra}
    with db.session() as s:
        job_id = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
        jobs.cancel_job(s, job_id, now=NOW + 1)
    return job_id


def _purged_at(db: Database, job_id: str) -> float | None:
    with db.read_session() as s:
        return jobs.get_job(s, job_id).purged_at


def test_a_capped_logs_older_part_is_deleted_with_the_log(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    job_id = _cancelled(db)
    other = "someone-else"
    logs = tmp_path / "logs"
    executor = LocalExecutor(Cluster((NODE,)), tmp_path / EXECUTOR_STATE, log_dir=logs)
    logs.mkdir(exist_ok=True)
    for name in (f"{job_id}.log", f"{job_id}.log.1", f"{other}.log.1"):
        (logs / name).write_text("output\n")
    purger = Purger(db, executor, tmp_path / "checkpoints", days=0.5)
    purged, errors = purger.run(NOW + DAY)
    assert purged == [job_id] and errors == []
    assert sorted(p.name for p in logs.iterdir()) == [f"{other}.log.1"]


@pytest.mark.parametrize("field", ["checkpoint_dir", "workdir"])
@pytest.mark.parametrize("where", ["the same", "inside", "linked"])
def test_a_slurm_working_directory_a_later_spec_names_stays(
    sqlite_db: Database, tmp_path: Path, field: str, where: str
) -> None:
    """A job run without ``workdir`` on Slurm writes its relative paths under
    ``{home}/executor/work/JOB_ID``; a later job continuing there names that directory:
    the first's purge leaves it (and with it the records the executor keeps beside it)."""
    with sqlite_db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    first = _cancelled(sqlite_db)
    work = tmp_path / EXECUTOR_STATE / "work" / first
    (work / "ckpt").mkdir(parents=True)
    (work / "ckpt" / "step-10.pt").write_bytes(b"weights")
    named = {"the same": work, "inside": work / "ckpt", "linked": tmp_path / "link"}[where]
    if where == "linked":
        named.symlink_to(work)
    later = _cancelled(sqlite_db, **{field: str(named)})
    executor = SlurmExecutor(NoSlurm(), tmp_path / EXECUTOR_STATE, log_dir=tmp_path / "logs")
    purger = Purger(sqlite_db, executor, tmp_path / "checkpoints", days=0.5)
    purged, errors = purger.run(NOW + DAY)
    assert sorted(purged) == sorted([first, later]) and errors == []
    assert (work / "ckpt" / "step-10.pt").read_bytes() == b"weights"
    assert _purged_at(sqlite_db, first) == NOW + DAY


def test_a_slurm_working_directory_no_spec_names_is_deleted(
    sqlite_db: Database, tmp_path: Path
) -> None:
    with sqlite_db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    first = _cancelled(sqlite_db)
    work = tmp_path / EXECUTOR_STATE / "work" / first
    (work / "ckpt").mkdir(parents=True)
    elsewhere = tmp_path / EXECUTOR_STATE / "work" / f"{first}-v2"
    elsewhere.mkdir()
    later = _cancelled(sqlite_db, checkpoint_dir=str(elsewhere))
    executor = SlurmExecutor(NoSlurm(), tmp_path / EXECUTOR_STATE, log_dir=tmp_path / "logs")
    purger = Purger(sqlite_db, executor, tmp_path / "checkpoints", days=0.5)
    purged, errors = purger.run(NOW + DAY)
    assert sorted(purged) == sorted([first, later]) and errors == []
    assert not work.exists() and elsewhere.is_dir()


@pytest.mark.parametrize(
    ("workdir", "kept"),
    [("checkpoints/FIRST", True), ("checkpoints/FIRST/run2", True), (".", False), ("", False)],
)
def test_a_checkpoint_directory_a_later_jobs_workdir_names_stays(
    sqlite_db: Database, tmp_path: Path, workdir: str, kept: bool
) -> None:
    """A job run in the directory danlu gave a finished one keeps it; a ``workdir`` holding
    danlu's home (a user's home directory holding ``~/.danlu``) keeps none of its
    directories, as a ``checkpoint_dir`` there would."""
    home = tmp_path / "home"
    with sqlite_db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    first = _cancelled(sqlite_db)
    own = home / "checkpoints" / first
    (own / "run2").mkdir(parents=True)
    (own / "step-10.pt").write_bytes(b"weights")
    path = tmp_path if workdir == "" else home / workdir.replace("FIRST", first)
    later = _cancelled(sqlite_db, workdir=str(path))
    executor = FakeExecutor(Cluster((NODE,)), FakeWorld())
    purger = Purger(sqlite_db, executor, home / "checkpoints", days=0.5)
    purged, errors = purger.run(NOW + DAY)
    assert sorted(purged) == sorted([first, later]) and errors == []
    assert (own / "step-10.pt").exists() is kept


def test_a_long_list_of_jobs_to_try_later_passes_over_them_without_a_database_limit(
    db: Database,
) -> None:
    """Every due job failing (the logs' disk not mounted) puts a batch a pass in the list
    of jobs to try later: at a pass a second that is tens of thousands by the time the first
    is due again, past the parameters a PostgreSQL statement may bind (65,535); the jobs are
    passed over all the same."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    first, second = _cancelled(db), _cancelled(db)
    skip = {f"{i:012x}" for i in range(70_000)} | {first}
    with db.read_session() as s:
        assert retention.due(s, 0.5, NOW + DAY, limit=5, skip=skip) == [second]
