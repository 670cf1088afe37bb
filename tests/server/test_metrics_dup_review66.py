"""Metric ingestion: a metrics POST that outlived danlu.train's reporter timeout
(the database busy) was committed by the server and sent again by the reporter, so every
record was stored twice. The reporter now sends an ``Idempotency-Key`` (the same on every
resend of the same records) and the server remembers a job's keys (``job_metric_keys``, a
day, deleted with the job's records by the retention): a repeated key is answered with the
same reply and stores nothing. A request without a key is stored as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from alembic import command
from helpers import Live, live_server, wait_for
from interleave import Interleave
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Job
from danlu.server.services import jobs, metrics, retention, users
from danlu.server.services.common import lock_row
from danlu.train.report import MetricsReporter

NOW = 1_000_000.0
KEY_HEADER = "Idempotency-Key"
RECORDS = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]


def _keys(db: Database, job_id: str) -> list[str]:
    """The job's remembered keys (plain SQL: the table is this review's)."""
    with db.read_session() as s:
        rows = s.execute(
            text("SELECT key FROM job_metric_keys WHERE job_id = :id ORDER BY key"), {"id": job_id}
        )
        return [str(key) for key in rows.scalars()]


def _steps(db: Database, job_id: str) -> list[int]:
    with db.read_session() as s:
        return [m.step for m in metrics.list_metrics(s, job_id)]


def _job(db: Database, name: str = "m") -> str:
    """A pending job of alice's."""
    with db.session() as s:
        body = {"name": name, "command": ["true"], "resources": {"gpus": 1}}
        return jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id


def _ingest(db: Database, job_id: str, key: str | None, now: float = NOW + 1) -> int:
    with db.session() as s:
        return metrics.ingest(s, jobs.get_job(s, job_id), RECORDS, now=now, key=key)


# --- the reviewer's case, on a live server ------------------------------------------------


def test_the_reviewers_timeout_then_resend_stores_each_record_once(
    tmp_path: Path, db_url: str
) -> None:
    """The database is busy (the job's row locked by another transaction) past the
    reporter's timeout: its flush times out while the server keeps the request, which
    commits once the lock is gone. The next flush sends the same records again, under the
    same key: the server answers it as a repeat, and each step is stored once."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        body = {"name": "dup", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
        job_id = str(admin.post("/jobs", json=body).json()["id"])
        reporter = MetricsReporter(
            url=f"{live.url}/api/v1/jobs/{job_id}/metrics",
            token=live.token,
            interval_s=3600,
            timeout_s=1.0,
        )
        for step in range(2000, 2003):
            reporter.report({"step": step, "loss": 1.0 / step})
        holder = Database(db_url)
        try:
            with holder.session() as s:
                lock_row(s, Job, job_id)  # busy: ingest locks the job's row first
                reporter.flush()  # times out; the server still holds the request
                assert (reporter.sent, reporter.errors) == (0, 1)
        finally:
            holder.dispose()

        def stored() -> list[dict[str, Any]]:
            reply = admin.get(f"/jobs/{job_id}/metrics")
            assert reply.status_code == 200, reply.text
            return cast(list[dict[str, Any]], reply.json())

        wait_for(lambda: len(stored()) >= 3)  # the first request committed
        reporter.flush()  # the kept request, sent again
        assert (reporter.sent, reporter.errors) == (3, 1)
        assert [r["step"] for r in stored()] == [2000, 2001, 2002]


# --- the API: the header, repeats, old clients ----------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("dup66"), start_loops=False) as server:
        yield server


def _live_job(client: httpx.Client) -> str:
    body = {"name": "k", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
    response = client.post("/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _post(client: httpx.Client, job_id: str, key: str | None) -> httpx.Response:
    headers = {KEY_HEADER: key} if key is not None else {}
    return client.post(f"/jobs/{job_id}/metrics", json={"metrics": RECORDS}, headers=headers)


def _live_steps(client: httpx.Client, job_id: str) -> list[int]:
    return [int(r["step"]) for r in client.get(f"/jobs/{job_id}/metrics").json()]


def test_a_repeated_key_gets_the_same_reply_and_stores_nothing(live: Live) -> None:
    with live.client() as c:
        job_id = _live_job(c)
        first = _post(c, job_id, "a1b2-c3d4")
        again = _post(c, job_id, "a1b2-c3d4")
        assert first.status_code == again.status_code == 200, again.text
        assert again.json() == first.json() == {"accepted": 2, "batch_size": None}
        assert _live_steps(c, job_id) == [1, 2]


def test_a_new_key_stores_again(live: Live) -> None:
    with live.client() as c:
        job_id = _live_job(c)
        assert _post(c, job_id, "first").json()["accepted"] == 2
        assert _post(c, job_id, "second").json()["accepted"] == 2
        assert _live_steps(c, job_id) == [1, 1, 2, 2]


def test_a_key_is_remembered_per_job(live: Live) -> None:
    """The same key on two jobs stores on both (a key names a request to one job)."""
    with live.client() as c:
        one, two = _live_job(c), _live_job(c)
        assert _post(c, one, "same").json()["accepted"] == 2
        assert _post(c, two, "same").json()["accepted"] == 2
        assert (_live_steps(c, one), _live_steps(c, two)) == ([1, 2], [1, 2])


def test_a_client_without_a_key_is_stored_as_before(live: Live) -> None:
    """An old reporter sends no key: every request is stored, a resend too (as before)."""
    with live.client() as c:
        job_id = _live_job(c)
        assert _post(c, job_id, None).json() == {"accepted": 2, "batch_size": None}
        assert _post(c, job_id, None).json() == {"accepted": 2, "batch_size": None}
        assert _live_steps(c, job_id) == [1, 1, 2, 2]


BAD_KEYS = {
    "empty": "",
    "too-long": "k" * 129,
    "space": "a b",
    "slash": "a/b",
    "quote": 'a"b',
}


@pytest.mark.parametrize("key", list(BAD_KEYS.values()), ids=list(BAD_KEYS))
def test_a_bad_key_is_a_422_naming_the_header(live: Live, key: str) -> None:
    with live.client() as c:
        job_id = _live_job(c)
        response = _post(c, job_id, key)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == KEY_HEADER
        assert "at most 128" in error["message"], error
        assert _live_steps(c, job_id) == []


def test_the_longest_key_is_taken(live: Live) -> None:
    with live.client() as c:
        job_id = _live_job(c)
        key = "Az09._:-" * 16
        assert _post(c, job_id, key).json()["accepted"] == 2
        assert _post(c, job_id, key).json()["accepted"] == 2
        assert _live_steps(c, job_id) == [1, 2]


# --- the service, on SQLite and PostgreSQL --------------------------------------------------


def test_a_repeat_answers_the_count_it_stored(seeded: Database) -> None:
    job_id = _job(seeded)
    assert _ingest(seeded, job_id, "k1") == 2
    assert _ingest(seeded, job_id, "k1", now=NOW + 5) == 2
    assert _steps(seeded, job_id) == [1, 2]
    assert _keys(seeded, job_id) == ["k1"]
    with seeded.session() as s:  # a repeat of a smaller request: its own count, not 0
        job = jobs.get_job(s, job_id)
        assert metrics.ingest(s, job, RECORDS[:1], now=NOW + 6, key="k2") == 1
        assert metrics.ingest(s, job, RECORDS[:1], now=NOW + 7, key="k2") == 1
    assert _steps(seeded, job_id) == [1, 1, 2]


def test_a_refused_request_leaves_no_key(seeded: Database) -> None:
    """A 422 stores nothing, its key neither: the corrected records sent under it are
    stored."""
    job_id = _job(seeded)
    with pytest.raises(SpecError, match="step"), seeded.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), [{"loss": 1.0}], now=NOW, key="k")
    assert _keys(seeded, job_id) == []
    assert _ingest(seeded, job_id, "k") == 2
    assert _steps(seeded, job_id) == [1, 2]


def test_the_purge_deletes_the_keys(seeded: Database) -> None:
    job_id = _job(seeded)
    other = _job(seeded, "other")
    _ingest(seeded, job_id, "k1")
    _ingest(seeded, job_id, "k2")
    _ingest(seeded, other, "k1")
    with seeded.session() as s:
        jobs.cancel_job(s, job_id, reason="done", now=NOW + 2)
    with seeded.session() as s:
        retention.purged(s, job_id, NOW + 3 * retention.DAY)
    assert _keys(seeded, job_id) == []
    assert _keys(seeded, other) == ["k1"]


def test_a_key_is_forgotten_after_a_day(seeded: Database) -> None:
    """The job's keys older than a day are deleted when it stores a new one."""
    job_id = _job(seeded)
    _ingest(seeded, job_id, "old", now=NOW)
    _ingest(seeded, job_id, "young", now=NOW + metrics.KEY_DAYS * 86_400 - 1)
    assert _keys(seeded, job_id) == ["old", "young"]
    _ingest(seeded, job_id, "new", now=NOW + metrics.KEY_DAYS * 86_400 + 1)
    assert _keys(seeded, job_id) == ["new", "young"]


def test_concurrent_duplicates_store_once(seeded: Database) -> None:
    """Two requests with one key at once: the second waits for the first's lock of the job
    (PostgreSQL), then reads its key and stores nothing."""
    job_id = _job(seeded)
    race = Interleave(seeded)

    def first(s: Session) -> int:
        stored = metrics.ingest(s, jobs.get_job(s, job_id), RECORDS, now=NOW + 1, key="k")
        race.pause()  # stored, not committed
        return stored

    def second(s: Session) -> int:
        return metrics.ingest(s, jobs.get_job(s, job_id), RECORDS, now=NOW + 2, key="k")

    outcome = race.run(first, second)
    assert (outcome.first_error, outcome.second_error) == (None, None)
    assert (outcome.first, outcome.second) == (2, 2)
    assert outcome.second_waited == (seeded.dialect == "postgresql")
    assert _steps(seeded, job_id) == [1, 2]


def test_a_duplicate_insert_of_a_key_is_answered_as_a_repeat(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the look-up miss a key stored meanwhile, the unique (job, key) refuses the
    second insert: the request is answered as the repeat it is, storing nothing."""
    job_id = _job(seeded)
    assert _ingest(seeded, job_id, "k") == 2
    real = metrics.repeated
    looked: list[str] = []

    def stale(session: Session, job: str, key: str, t: float) -> int | None:
        looked.append(key)
        return None if len(looked) == 1 else real(session, job, key, t)

    monkeypatch.setattr(metrics, "repeated", stale)
    assert _ingest(seeded, job_id, "k", now=NOW + 2) == 2
    assert len(looked) == 2  # the first look-up missed; the unique key caught it
    assert _steps(seeded, job_id) == [1, 2]
    assert _ingest(seeded, job_id, "k2", now=NOW + 3) == 2  # the session is still usable
    assert _steps(seeded, job_id) == [1, 1, 2, 2]


def test_the_migration_adds_and_drops_the_keys_table(seeded: Database) -> None:
    """Revision 0027 down to 0026 drops the keys (and keeps the records), up again adds an
    empty table."""
    db = seeded
    job_id = _job(db)
    try:
        _ingest(db, job_id, "k")
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0026")
        assert "job_metric_keys" not in inspect(db.engine).get_table_names()
        with db.engine.connect() as conn:  # plain SQL: the model has later columns
            query = text("SELECT step FROM job_metrics WHERE job_id = :j ORDER BY step, id")
            assert list(conn.scalars(query, {"j": job_id})) == [1, 2]
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision()
        assert _keys(db, job_id) == []
        assert _ingest(db, job_id, "k", now=NOW + 2) == 2
        assert _ingest(db, job_id, "k", now=NOW + 3) == 2
        assert _steps(db, job_id) == [1, 1, 2, 2]
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head


def test_a_resend_of_a_key_older_than_a_day_is_stored_again(seeded: Database) -> None:
    """The key's own age counts, not only whether a newer key deleted it: a resend
    under a key stored more than a day ago is stored, with the new count."""
    job_id = _job(seeded)
    assert _ingest(seeded, job_id, "k", now=NOW) == 2
    later = NOW + metrics.KEY_DAYS * 86_400 + 1
    with seeded.session() as s:
        job = jobs.get_job(s, job_id)
        assert metrics.ingest(s, job, RECORDS[:1], now=later, key="k") == 1
    assert _steps(seeded, job_id) == [1, 1, 2]
    assert _keys(seeded, job_id) == ["k"]
    with seeded.session() as s:  # and the key stored again is remembered from then on
        job = jobs.get_job(s, job_id)
        assert metrics.ingest(s, job, RECORDS, now=later + 5, key="k") == 1
    assert _steps(seeded, job_id) == [1, 1, 2]
