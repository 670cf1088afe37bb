"""A metric record's ``time`` is POSIX seconds: one in milliseconds or nanoseconds (a job
calling ``time.time_ns()``) is refused naming the field, and ``danlu metrics`` shows ``-``
for a time it cannot read (records stored before the check), never a traceback."""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from danlu.cli.metrics import line, table
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database, upgrade_database
from danlu.server.db.models import JobMetric
from danlu.server.services import cluster, jobs, metrics, users

T = 1_000_000.0
YEAR_10000 = 253_402_300_800


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("metrics-template") / "danlu.db"
    upgrade_database(f"sqlite:///{path}")
    return path


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Iterator[Database]:
    shutil.copyfile(template, tmp_path / "danlu.db")
    database = Database(f"sqlite:///{tmp_path / 'danlu.db'}")
    try:
        yield database
    finally:
        database.dispose()


def _job(db: Database) -> str:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=T)
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=T)
        return jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T).id


@pytest.mark.parametrize(
    "when",
    [1_796_159_889_844_468_800, 1_796_159_889_844.5, 1e20, YEAR_10000, -1, -0.5, 10**400],
    ids=["ns", "ms", "1e20", "year-10000", "negative", "negative-float", "huge-int"],
)
def test_a_time_outside_posix_seconds_is_refused_naming_it(db: Database, when: Any) -> None:
    job_id = _job(db)
    with db.session() as s, pytest.raises(SpecError) as info:
        job = jobs.get_job(s, job_id)
        metrics.ingest(s, job, [{"step": 1, "loss": 1.0}, {"step": 2, "time": when}])
    assert info.value.field == "metrics.1.time"
    assert "POSIX seconds" in str(info.value)
    with db.read_session() as s:
        assert metrics.list_metrics(s, job_id) == []  # the batch is refused whole


@pytest.mark.parametrize(
    "when", [0, 0.0, T, 1_796_159_889.5, YEAR_10000 - 1, float(YEAR_10000 - 1)]
)
def test_a_time_within_the_range_is_taken(db: Database, when: float) -> None:
    job_id = _job(db)
    with db.session() as s:
        assert metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 1, "time": when}]) == 1
    with db.read_session() as s:
        [stored] = metrics.list_metrics(s, job_id)
        assert stored.time == float(when)


def _rendered(records: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(table(records, ["loss"]))
    return out.getvalue()


def test_the_cli_shows_a_dash_for_a_time_it_cannot_read(db: Database) -> None:
    """Records stored before the check (a time in ns, 1e20, a negative one): the table and
    the lines of ``--follow`` show ``-`` where the time of day goes."""
    job_id = _job(db)
    bad = [float(time.time_ns()), 1e20, -1e300, 1e300, float("nan"), "noon", [1]]
    with db.session() as s:  # as an older control plane let them be stored
        s.add_all(
            JobMetric(job_id=job_id, step=i, time=when, data={"loss": 0.5})
            for i, when in enumerate(bad[:4])
        )
    records = [{"step": i, "time": when, "loss": 0.5} for i, when in enumerate(bad)]
    for record in records:
        assert line(record, ["loss"]) == f"step {record['step']}  -  loss 0.5"
    shown = _rendered(records)
    assert shown.count(" - ") >= len(bad), shown
    ok = time.strftime("%H:%M:%S", time.localtime(T))
    assert line({"step": 9, "time": T, "loss": 0.5}, ["loss"]) == f"step 9  {ok}  loss 0.5"
    with db.read_session() as s:
        stored = [
            {"step": m.step, "time": m.time, **m.data} for m in metrics.list_metrics(s, job_id)
        ]
    assert _rendered(stored).count(" - ") >= 4
