"""A database whose running jobs a lost home launched: taken over on purpose, and never
migrated by a plane that refuses it.

A plane refuses a database whose running jobs another home's plane launched (their runs are
that home's processes, invisible to it). When that home is lost for good (its host died; a
backup restored onto a new host) the operator was told to start danlu on it again, which
cannot be done, and nothing else: the database could not be used again (``danlu server
--take-over-lost-home`` now takes it over, the jobs resuming from their checkpoints with no
restart counted). And a plane refused so had migrated the database first: the older danlu of
the home that launched the jobs, the one to start again, then refused it as newer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from alembic import command
from helpers import wait_for
from plane_procs import PLANE_TIMEOUT, Plane, admin_api, planes

from danlu.server.db import current_revision, head_revision, make_engine
from danlu.server.db import migrate as migrate_module

UP_TIMEOUT = PLANE_TIMEOUT
OLDER = "0034"
"""A revision older than the newest."""


def _job(api: httpx.Client, job_id: str) -> dict[str, object]:
    reply: dict[str, object] = api.get(f"/jobs/{job_id}").json()
    return reply


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _orphaned_job(url: str, tmp_path: Path, marks: Path) -> str:
    """A job launched by the plane of home ``lost`` on ``url``, that plane ``kill -9``'d and
    the job's run ended since (its host gone with it, as far as the database knows): the
    database says RUNNING, launched from a home no plane will serve again. Its id."""
    body = {
        "name": "train",
        "command": ["bash", "-c", f"echo start >> {marks}; sleep 3; echo end >> {marks}"],
        "resources": {"gpus": 1},
    }
    with planes() as started:
        lost = Plane(tmp_path / "lost", url, 8.0)
        started.append(lost)
        with admin_api(lost.home, lost.served()) as api:
            job = api.post("/jobs", json=body).json()
            wait_for(lambda: _lines(marks) == ["start"], UP_TIMEOUT, 0.05)
            lost.kill9()  # before its next pass sees the run end
    wait_for(lambda: _lines(marks) == ["start", "end"], UP_TIMEOUT, 0.1)
    return str(job["id"])


def test_a_lost_homes_running_jobs_are_taken_over_on_purpose_and_resume_here(
    fresh_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    job_id = _orphaned_job(fresh_url, tmp_path, marks)
    with planes() as started:
        other = Plane(tmp_path / "other", fresh_url, 0.5)
        started.append(other)
        said = other.refused()
        assert job_id in said, said
        assert "--take-over-lost-home" in said, said  # the way out, when that home is gone
        assert _lines(marks) == ["start", "end"]  # not relaunched by the refused plane
        taker = Plane(tmp_path / "other", fresh_url, 0.5, "--take-over-lost-home")
        started.append(taker)
        with admin_api(taker.home, taker.served()) as api:
            wait_for(lambda: _job(api, job_id)["state"] == "SUCCEEDED", UP_TIMEOUT, 0.1)
            job = _job(api, job_id)
            assert job["restarts"] == 0, job  # lost with its home: no fault of the job's
            events = api.get(f"/jobs/{job_id}/events").json()
            reasons = " | ".join(str(e.get("reason")) for e in events)
            assert "lost with the home that launched it" in reasons, reasons
            assert str((tmp_path / "lost").resolve()) in reasons, reasons
        assert _lines(marks) == ["start", "end", "start", "end"]  # ran again, here
        assert "--take-over-lost-home: took the database" in taker.output(), taker.output()
        taker.stop()
        # the home is the lease's now: a start without the flag is not refused
        again = Plane(tmp_path / "other", fresh_url, 0.5)
        started.append(again)
        again.served()


def test_a_plane_refused_for_another_homes_jobs_leaves_an_older_database_unmigrated(
    fresh_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    job_id = _orphaned_job(fresh_url, tmp_path, marks)
    engine = make_engine(fresh_url)
    try:
        config = migrate_module.alembic_config()
        with engine.begin() as conn:  # as an older danlu on that home left it
            config.attributes["connection"] = conn
            command.downgrade(config, OLDER)
        with planes() as started:
            other = Plane(tmp_path / "other", fresh_url, 0.5)
            started.append(other)
            said = other.refused()
            assert job_id in said, said
            assert f"left at revision {OLDER} (not migrated)" in said, said
        assert current_revision(engine) == OLDER
        with planes() as started:  # given up on purpose: migrated and taken over
            taker = Plane(tmp_path / "other", fresh_url, 0.5, "--take-over-lost-home")
            started.append(taker)
            taker.served()
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
