"""A ``checkpoint_dir`` ``file://`` URL is told by its scheme in any case (URL schemes are
case-insensitive): a spec stored with ``FILE:///...`` names a local directory the retention
must keep, and ``FILE://ckpt`` a relative path the launch does not pass on."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update
from test_retention import _finished_with_its_own_directory, _submit, _world

from danlu.core.spec import file_url_path
from danlu.server.db import Database
from danlu.server.db.models import Job
from danlu.server.purge import local_path
from danlu.server.services import jobs
from danlu.server.services.admission import relative_file_url

NOW = 1_000_000.0
DAY = 86_400.0


@pytest.mark.parametrize("scheme", ["file://", "FILE://", "File://", "fILe://"])
def test_a_file_url_in_any_case_names_its_path(scheme: str) -> None:
    assert file_url_path(f"{scheme}/shared/ckpt") == "/shared/ckpt"
    assert local_path(f"{scheme}/shared/ckpt") == "/shared/ckpt"
    assert relative_file_url(f"{scheme}ckpt/run1")
    assert not relative_file_url(f"{scheme}/shared/ckpt")


@pytest.mark.parametrize("location", ["/shared/ckpt", "s3://bucket/ckpt", "files:///x", "fil"])
def test_what_is_no_file_url_is_read_as_before(location: str) -> None:
    assert file_url_path(location) is None
    assert not relative_file_url(location)
    assert local_path(location) == (location if location.startswith("/") else None)


def test_a_stored_upper_case_file_url_keeps_the_directory_it_names(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """A spec stored with ``FILE://<a finished job's directory>`` (raw, as an older version
    stored it) is the later job's: the retention purging the finished job keeps it. It was
    taken for a remote URL and the directory deleted under the job writing there."""
    first, loop = _finished_with_its_own_directory(sqlite_db, tmp_path)
    given = tmp_path / "checkpoints" / first
    try:
        later = _submit(sqlite_db, "later")
        with sqlite_db.session() as s:
            stored = dict(jobs.get_job(s, later).spec)
            s.execute(
                update(Job)
                .where(Job.id == later)
                .values(spec={**stored, "checkpoint_dir": f"FILE://{given}"})
            )
        _world(loop).script(later, duration=10 * DAY)
        report = loop.run_once(now=NOW + 20 + 1.1 * DAY)
        assert report.purged == [first] and report.errors == []
        assert (given / "step-10").exists()
    finally:
        loop.stop()
